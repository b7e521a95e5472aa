"""torchtpu/_settings.py is the one reader of the environment: C and C++
read none, every variable it reads is documented, and each setting still
reaches the code that uses it (a fresh process per environment)."""
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from torchtpu import _settings

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_c_reads_no_environment():
    readers = re.compile(r"\b(secure_getenv|getenv|environ)\b")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "csrc").rglob("*"))
             if p.suffix in (".c", ".h", ".cpp")
             for n, line in enumerate(p.read_text().splitlines(), 1) if readers.search(line)]
    assert found == []


def test_every_setting_is_documented():
    doc = (ROOT / "docs" / "configuration.md").read_text()
    names = set(re.findall(r'"(TORCHTPU_[A-Z_]+)"', (ROOT / "torchtpu" / "_settings.py").read_text()))
    assert len(names) >= 15
    assert sorted(n for n in names if f"`{n}`" not in doc) == []


def test_counts_read_as_c_read_them():
    # C's strtol/atoi: the leading integer; nothing or not positive -> the default
    read = _settings._positive_int
    assert [read(None), read(""), read("abc"), read("0"), read("-4"), read("12"), read(" 7x"), read("+3")] == \
        [0, 0, 0, 0, 0, 12, 7, 3]
    s = _settings.read({})
    assert (s.fused_max_ops, s.fused_exact, s.max_cached_programs, s.compile_limit, s.matmul_isa_cap) == \
        (0, True, 0, 0, 0)
    assert s.eager == "strict" and s.fallback == "warn" and s.kernels == "1" and s.xla_flags is None
    assert s.cache_max_bytes == 2048 * 2**20
    s = _settings.read({"TORCHTPU_FUSED_EXACT": "0", "TORCHTPU_MATMUL_ISA": "avx2", "TORCHTPU_CACHE_DIR": "off",
                        "TORCHTPU_EAGER": " Fused ", "LOCAL_WORLD_SIZE": "2"})
    assert (s.fused_exact, s.matmul_isa_cap, s.cache_dir, s.eager, s.cpu_devices) == (False, 2, "", "fused", 2)
    assert _settings.dist_check({}) and not _settings.dist_check({"TORCHTPU_DIST_CHECK": "0"})


_PROBE = r"""
import json, torch, torchtpu
out = {"limit": torchtpu.get_compile_limit(), "kernels": torchtpu._C._info()["kernels"],
       "cache_dir": torchtpu._C._cache_dir()}
torchtpu.reset_stats()
with torchtpu.eager_mode("fused"):
    x = torch.ones(4, device="tpu")
    for _ in range(7):
        x = x + 1
    out["value"] = x.sum().item()
out["size_cuts"] = torchtpu.stats()["cuts"].get("size_cap", 0)
print(json.dumps(out))
"""


def _probe(tmp_path, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("TORCHTPU_") and k != "XLA_FLAGS"}
    full.update(TORCHTPU_CACHE_DIR=str(tmp_path), **env)
    r = subprocess.run([sys.executable, "-c", _PROBE], env=full, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_settings_reach_the_runtime(tmp_path):
    default = _probe(tmp_path)
    assert default["limit"] == 8 and default["size_cuts"] == 0 and default["value"] == 32.0
    set_ = _probe(tmp_path, TORCHTPU_COMPILE_LIMIT="3", TORCHTPU_FUSED_MAX_OPS="3",
                  XLA_FLAGS="--xla_backend_optimization_level=2")
    assert set_["limit"] == 3 and set_["size_cuts"] >= 2 and set_["value"] == 32.0
    # XLA_FLAGS is part of the disk cache's key: another folder
    assert set_["cache_dir"] != default["cache_dir"]
    assert pathlib.Path(set_["cache_dir"]).parent == pathlib.Path(default["cache_dir"]).parent
    if "AVX-512" in default["kernels"]:
        capped = _probe(tmp_path, TORCHTPU_MATMUL_ISA="avx2")
        assert "(AVX2)" in capped["kernels"], capped["kernels"]
    none = _probe(tmp_path, TORCHTPU_KERNELS="0")
    assert none["kernels"] == ""


def test_bad_setting_raises_at_import(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHTPU_")}
    env.update(TORCHTPU_KERNELS="nonesuch", TORCHTPU_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", "import torchtpu"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0
    assert "ValueError: TORCHTPU_KERNELS=nonesuch: expected 1, 0, or kernel names" in r.stderr
