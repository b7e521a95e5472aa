"""torchtpu in every process and tool: PyTorch's device-backend autoload
(plain `import torch`), torch.tpu's memory reports, pinned host memory, DLPack
and channels_last convolutions."""
import os
import subprocess
import sys

import pytest

from conftest import write_dist_info
import torch

import torchtpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _plain_torch(tmp_path, code, first=(), **env):
    """Runs |code| (which imports torch, never torchtpu) in a fresh process
    that sees torchtpu's distribution metadata as pyproject.toml declares it
    (a pip install writes the same entry points; the metadata put first on
    the path shadows any other installed copy's)."""
    write_dist_info(tmp_path)
    path = os.pathsep.join([*first, str(tmp_path), ROOT, os.environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=path, **env),
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_plain_import_torch_loads_tpu(tmp_path):
    code = ("import sys, torch\n"
            "assert 'torchtpu' in sys.modules\n"
            "x = torch.arange(6.0, device='tpu').reshape(2, 3)\n"
            "print(torch.accelerator.current_accelerator(), (x * 2).sum().item(), torch.tpu.device_count())\n")
    r = _plain_torch(tmp_path, code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["tpu", "30.0", "1"]


def test_import_torchtpu_first_with_autoload(tmp_path):
    """A process that imports torchtpu before torch: torch's import, inside
    torchtpu's, runs the entry point while the package is half imported (it
    raised "Failed to load the backend extension: tpu" when the entry point
    was an attribute of the package)."""
    code = ("import torchtpu, torch\n"
            "print((torch.ones(3, device='tpu') * 2).sum().item())\n")
    r = _plain_torch(tmp_path, code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "6.0"
    r = subprocess.run([sys.executable, "-m", "torchtpu", "info"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT])))
    assert r.returncode == 0, r.stderr


def test_a_torchtpu_that_cannot_load_leaves_import_torch_working(tmp_path):
    """torchtpu installed but broken (its extension not built yet, as while
    its own build imports torch): `import torch` warns and works."""
    fake = tmp_path / "shadow" / "torchtpu"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no _C here')\n")
    code = "import warnings\nwarnings.simplefilter('always')\nimport torch\nprint(torch.ones(2).sum().item())\n"
    r = _plain_torch(tmp_path, code, first=[str(tmp_path / "shadow")])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "2.0"
    assert "torchtpu was not loaded by `import torch` (ImportError: no _C here)" in r.stderr


def test_autoload_can_be_turned_off(tmp_path):
    r = _plain_torch(tmp_path, "import sys, torch; print('torchtpu' in sys.modules)", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_autoload_without_a_plugin_keeps_import_torch_working(tmp_path):
    """A missing PJRT plugin is reported where tpu is used, not by `import torch`."""
    code = ("import torch\n"
            "print(torch.tpu.is_available())\n"
            "try:\n"
            "    torch.ones(1, device='tpu')\n"
            "except RuntimeError as e:\n"
            "    print('error:', e)\n")
    r = _plain_torch(tmp_path, code, TORCHTPU_PLATFORM=str(tmp_path / "no_plugin.so"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "False"
    assert lines[1].startswith("error:") and "neither cpu, cuda or tpu nor an existing PJRT plugin file" in lines[1]


def test_memory_summary_reads_the_allocator():
    torch.tpu.synchronize()
    x = torch.ones(1024, 1024, device="tpu")  # 4 MiB: the large pool
    y = torch.ones(10, device="tpu")
    text = torch.tpu.memory_summary()
    lines = text.splitlines()
    assert lines[0] == "|" + "=" * 75 + "|" and all(len(line) == 77 for line in lines), text
    row = next(line for line in lines if line.startswith("| Allocated memory"))
    current = row.split("|")[2].split()
    stats = torch.tpu.memory_stats()
    cur = stats["allocated_bytes.all.current"]
    assert cur >= 4 * 2**20 + 40
    assert current == ([str(cur), "B"] if cur < 10240 else [str(cur // 1024), "KiB"] if cur < 10240 * 1024
                       else [str(cur // 2**20), "MiB"])
    assert "from large pool" in text and "from small pool" in text
    assert "from large pool" not in torch.tpu.memory_summary(abbreviated=True)
    allocs = next(line for line in lines if line.startswith("| Allocations"))
    assert int(allocs.split("|")[2]) == stats["allocation.all.current"]
    del x, y


@pytest.mark.strict_eager
def test_memory_snapshot_lists_live_storages():
    before = {s["address"] for s in torch.tpu.memory_snapshot()}
    x = torch.randn(300, 1000, device="tpu")
    v = x[10:20]  # a view: the same storage
    e = torch.empty(7, device="tpu")
    segments = torch.tpu.memory_snapshot()
    new = [s for s in segments if s["address"] not in before]
    by_address = {s["address"]: s for s in new}
    assert set(by_address) == {x.untyped_storage().data_ptr(), e.untyped_storage().data_ptr()}
    big, small = by_address[x.untyped_storage().data_ptr()], by_address[e.untyped_storage().data_ptr()]
    assert big["total_size"] == 300 * 1000 * 4 and big["segment_type"] == "large" and big["materialized"]
    assert small["total_size"] == 28 and small["segment_type"] == "small" and not small["materialized"]
    assert big["blocks"] == [{"address": big["address"], "size": big["total_size"],
                              "requested_size": big["total_size"], "state": "active_allocated", "frames": []}]
    assert sum(s["total_size"] for s in segments) == torch.tpu.memory_allocated()
    del x, v, e
    assert {s["address"] for s in torch.tpu.memory_snapshot()} <= before | set()


@pytest.mark.filterwarnings("ignore:The argument 'device' of Tensor")  # deprecated by PyTorch, still served
def test_pin_memory_pins():
    t = torch.arange(12.0).reshape(3, 4)
    assert not t.is_pinned()
    for pinned in (t.pin_memory(), t.pin_memory("tpu"), t.t().pin_memory()):
        assert pinned.device.type == "cpu" and pinned.is_pinned() and pinned.is_pinned("tpu")
        assert pinned.untyped_storage().data_ptr() % 4096 == 0
        torch.testing.assert_close(pinned, t if pinned.shape == t.shape else t.t())
        assert pinned[1:, 2:].is_pinned()  # any address inside the block
        torch.testing.assert_close(pinned.to("tpu", non_blocking=True).cpu(), pinned)
    assert t.t().pin_memory().stride() == t.t().stride()
    assert torch.empty(0).pin_memory().is_pinned()
    assert torch.empty(5, pin_memory=True).is_pinned()
    assert not t.clone().is_pinned()


def test_host_cache_calls_after_device_use():
    """torch.accelerator.empty_host_cache() (vLLM's shutdown calls it) asks
    tpu's host allocator: there was none, and the process crashed."""
    code = ("import torch, torchtpu\n"
            "torch.ones(3, device='tpu').cpu()\n"
            "torch.accelerator.empty_host_cache()\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])))
    assert r.returncode == 0 and r.stdout.split() == ["ok"], r.stderr[-2000:]


def test_dataloader_pins_its_batches():
    data = torch.utils.data.TensorDataset(torch.arange(40.0).reshape(10, 4), torch.arange(10))
    loader = torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True)
    batches = list(loader)
    assert len(batches) == 3
    for x, y in batches:
        assert x.is_pinned() and y.is_pinned()
    torch.testing.assert_close(torch.cat([x for x, _ in batches]), data.tensors[0])


def test_dlpack_device_and_exports():
    from torch.utils.dlpack import DLDeviceType
    x = torch.arange(6.0, device="tpu")
    assert x.__dlpack_device__() == (DLDeviceType.kDLExtDev, 0)
    y = torch.from_dlpack(x)  # the protocol path: tpu to tpu, one storage
    assert y.device == x.device and y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    y.add_(1)
    torch.testing.assert_close(x.cpu(), torch.arange(1.0, 7.0))
    np = pytest.importorskip("numpy")
    with pytest.raises(RuntimeError, match="Unsupported device in DLTensor"):  # numpy takes host memory only
        np.from_dlpack(x)
    copied = np.from_dlpack(x, device="cpu")  # a consumer that asks for a CPU copy gets one
    assert copied.tolist() == [1.0, 2, 3, 4, 5, 6]
    pinned = torch.arange(3.0).pin_memory()
    assert pinned.__dlpack_device__() == (DLDeviceType.kDLCPU, 0)
    assert np.from_dlpack(pinned).tolist() == [0.0, 1, 2]
    assert torch.from_dlpack(pinned).untyped_storage().data_ptr() == pinned.untyped_storage().data_ptr()
    assert torch.nn.Parameter(x).__dlpack_device__() == (DLDeviceType.kDLExtDev, 0)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("case", ["x_cl", "w_cl", "both_cl", "neither", "conv3d_cl", "transposed_cl"])
def test_convolution_output_layout_is_the_cpus(compiled, case):
    """Outputs (and the gradients that flow on) have the CPU's strides: channels-last
    when the input or the weight is, for torch.compile's graphs too."""
    import copy
    torch.manual_seed(0)
    cl = torch.channels_last_3d if case == "conv3d_cl" else torch.channels_last
    if case == "conv3d_cl":
        conv, x = torch.nn.Conv3d(3, 4, 3, padding=1), torch.randn(2, 3, 5, 6, 7)
    elif case == "transposed_cl":
        conv, x = torch.nn.ConvTranspose2d(3, 4, 3, stride=2), torch.randn(2, 3, 5, 6)
    else:
        conv, x = torch.nn.Conv2d(3, 8, 3, padding=1), torch.randn(2, 3, 10, 12)
    if case != "w_cl" and case != "neither":
        x = x.to(memory_format=cl)
    if case in ("w_cl", "both_cl"):
        conv = conv.to(memory_format=cl)

    def step(module, x):
        y = module(x.requires_grad_())
        z = y * 2  # a gradient that flows back through y's layout
        z.sum().backward()
        return y

    expected = step(conv, x.clone())
    torch._dynamo.reset()  # each case its own graph, not a dynamic-shape one
    tconv = copy.deepcopy(conv).to("tpu")
    tx = x.to("tpu")
    assert tx.stride() == x.stride()
    got = (torch.compile(step, backend="tpu") if compiled else step)(tconv, tx)
    assert got.stride() == expected.stride(), case
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tconv.weight.grad.cpu(), conv.weight.grad, rtol=1e-4, atol=1e-4)
    assert tconv.weight.grad.stride() == conv.weight.grad.stride()


_COMPILES = ("import torch, torchtpu\n"
             "x = torch.randn(16, 16, device='tpu')\n"
             "for f in (torch.sin, torch.cos, torch.exp):\n"
             "    x = f(x)\n"
             "x.sum().item()\n"
             "print(torchtpu.stats()['cache_misses'], torchtpu.stats()['cache_loads'])\n")


def _progress_run(tmp_path, setting):
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("TORCHTPU_PROGRESS", None)
    if setting is not None:
        env["TORCHTPU_PROGRESS"] = setting
    return subprocess.run([sys.executable, "-c", _COMPILES], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.strict_eager
def test_progress_line_reports_a_burst_of_compiles(tmp_path):
    """TORCHTPU_PROGRESS=<seconds>: the note once a burst has run that long; at
    exit the burst's summary, counting programs compiled and loaded."""
    for run in range(2):  # cold, then every program from the disk cache
        r = _progress_run(tmp_path, "0.000001")
        assert r.returncode == 0, r.stderr
        misses, loads = map(int, r.stdout.split())
        assert (misses > 0 and loads == 0) if run == 0 else (misses == 0 and loads > 0)
        summary = [line for line in r.stderr.splitlines() if line.startswith("torchtpu: compiled")]
        assert len(summary) == 1, r.stderr
        n = misses + loads
        expected = f"torchtpu: compiled {n} programs in "
        assert summary[0].startswith(expected), r.stderr
        assert summary[0].endswith(" s" if run == 0 else f" s ({loads} loaded from the disk cache)"), r.stderr


def test_progress_line_is_off_without_a_terminal_or_when_asked(tmp_path):
    for setting in (None, "0"):  # stderr is a pipe here
        r = _progress_run(tmp_path, setting)
        assert r.returncode == 0 and "torchtpu: compil" not in r.stderr, r.stderr
    r = _progress_run(tmp_path, "often")
    assert r.returncode != 0 and "TORCHTPU_PROGRESS='often': expected 0, 1 or a number of seconds" in r.stderr
