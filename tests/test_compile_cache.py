"""The persistent compile cache (TORCHTPU_CACHE_DIR) trusts nothing it finds
on disk: an entry proves it belongs to its program (it carries its key, the
program text, compared on load), and what is not a regular file is never
read (a FIFO would block the process forever) and is replaced where it can
be. Each case runs in fresh processes that share one cache directory."""
import os
import shutil
import subprocess
import sys

import pytest

_OP = ("import torch, torchtpu\n"
       "x = torch.tensor([6., 8., 9.], device='tpu')\n"
       "y = torch.tensor([2., 4., 3.], device='tpu')\n"
       "print((x {} y).cpu().tolist(), torchtpu.stats()['cache_loads'])\n")


def _run(cache, op):
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(cache), TORCHTPU_EAGER="strict")
    r = subprocess.run([sys.executable, "-c", _OP.format(op)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    values, loads = r.stdout.rsplit(" ", 1)
    return values, int(loads)


def _entries(cache):
    return {os.path.join(d, f) for d, _, files in os.walk(cache) for f in files if f.endswith(".xla")}


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A cache holding a mul's and a div's entries: (its directory, the div
    entry's path in it, the mul entry's bytes)."""
    cache = tmp_path_factory.mktemp("template") / "cache"
    assert _run(cache, "*") == ("[12.0, 32.0, 27.0]", 0)
    mul = _entries(cache)
    assert _run(cache, "/") == ("[3.0, 2.0, 3.0]", 0)
    div = _entries(cache) - mul
    assert len(mul) == 1 and len(div) == 1, (mul, div)
    return cache, div.pop(), open(mul.pop(), "rb").read()


@pytest.fixture
def div_entry(template, tmp_path):
    """A copy of the template: (cache, the div entry's path, the mul entry's bytes)."""
    cache, path, mul_bytes = template
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy)
    return copy, str(copy / os.path.relpath(path, cache)), mul_bytes


def test_another_programs_entry_is_not_run(div_entry):
    """A valid entry of a mul stored under the div's name (a key collision, a
    keying bug or a copied cache would give it) is a miss: the div is
    compiled, right, and its own entry replaces the mul's."""
    cache, path, mul_bytes = div_entry
    with open(path, "wb") as f:
        f.write(mul_bytes)
    assert _run(cache, "/") == ("[3.0, 2.0, 3.0]", 0)
    assert open(path, "rb").read() != mul_bytes
    assert _run(cache, "/") == ("[3.0, 2.0, 3.0]", 1)  # the div's own entry, loaded


def _replaced(cache, path):
    """The div runs right (no entry loaded), and a regular entry stands at
    |path| afterwards (that a regular entry there loads, the test above
    shows)."""
    assert _run(cache, "/") == ("[3.0, 2.0, 3.0]", 0)
    assert os.path.isfile(path) and not os.path.islink(path)


def test_fifo_in_place_of_an_entry_does_not_block(div_entry):
    cache, path, _ = div_entry
    os.unlink(path)
    os.mkfifo(path)
    _replaced(cache, path)  # _run's timeout turns a hang into a failure


def test_symlink_to_a_fifo_in_place_of_an_entry_does_not_block(div_entry, tmp_path):
    cache, path, _ = div_entry
    os.unlink(path)
    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "fifo", path)
    _replaced(cache, path)


def test_empty_directory_in_place_of_an_entry_is_replaced(div_entry):
    cache, path, _ = div_entry
    os.unlink(path)
    os.mkdir(path)
    _replaced(cache, path)


def test_directory_with_files_in_place_of_an_entry_is_skipped(div_entry):
    cache, path, _ = div_entry
    os.unlink(path)
    os.mkdir(path)
    open(os.path.join(path, "keep"), "w").close()
    assert _run(cache, "/") == ("[3.0, 2.0, 3.0]", 0)
    assert os.path.isfile(os.path.join(path, "keep"))
