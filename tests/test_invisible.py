"""torchtpu installed changes nothing for code that does not use tpu.

PyTorch's device-backend autoload imports torchtpu in every process that
imports torch. tests/invisible/battery.py runs CPU-only workloads (OpInfo
samples and error inputs on the CPU, under FakeTensorMode and on meta
tensors, the ops whose meta functions torchtpu repairs for tpu, Inductor,
torch.export, a default-backend gloo DDP step, forked DataLoader workers);
each test here runs some of them in two fresh processes at once, one with
TORCH_DEVICE_BACKEND_AUTOLOAD=0 and one with torchtpu installed, and
requires equal results: values, dtypes, shapes, strides, exception types and
messages."""
import json
import os
import subprocess
import sys

import pytest

from conftest import write_dist_info

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATTERY = os.path.join(ROOT, "tests", "invisible", "battery.py")


def installed_env(tmp_path):
    """The environment of a process that sees torchtpu installed (its
    distribution metadata, entry points as pyproject.toml declares them, put
    first on the path) and imports it from this tree."""
    write_dist_info(tmp_path)
    path = os.pathsep.join([str(tmp_path), ROOT, os.environ.get("PYTHONPATH", "")])
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    # Inductor's caches apart per process: a result must be computed, not found.
    return dict(env, PYTHONPATH=path, TORCHINDUCTOR_FX_GRAPH_CACHE="0", TORCHINDUCTOR_AUTOGRAD_CACHE="0")


def both(tmp_path, *steps, timeout=600):
    """The battery's |steps| without torchtpu and with it, run at once; their
    two results."""
    env = installed_env(tmp_path)
    runs = {}
    for name, extra in (("without", {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}), ("with", {})):
        out = tmp_path / f"{name}.json"
        runs[name] = (out, subprocess.Popen([sys.executable, BATTERY, str(out), *steps], env=dict(env, **extra),
                                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    results = {}
    try:
        for name, (out, proc) in runs.items():
            log, _ = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, f"{name} torchtpu: {log[-3000:]}"
            results[name] = json.loads(out.read_text())
    finally:
        for _, proc in runs.values():
            if proc.poll() is None:
                proc.kill()
    without, with_ = results["without"], results["with"]
    assert without.pop("torchtpu_loaded") is False and with_.pop("torchtpu_loaded") is True
    return without, with_


def assert_same(without, with_):
    assert without.keys() == with_.keys()
    differ = [f"{key}:\n  without torchtpu: {without[key]}\n  with torchtpu:    {with_[key]}"
              for key in without if without[key] != with_[key]]
    assert not differ, f"{len(differ)} of {len(without)} results differ:\n" + "\n".join(differ[:10])
    assert not any(key.startswith("crash/") for key in without), without


def test_repaired_meta_functions_are_tpu_only(tmp_path):
    """tpu's meta functions (torchtpu/_meta.py) leave the CPU's, meta
    tensors' and FakeTensor's answers for those ops PyTorch's own."""
    without, with_ = both(tmp_path, "probes")
    assert_same(without, with_)
    # The probes reach what tpu repairs: PyTorch's meta functions answer
    # otherwise than the CPU there.
    assert without["probe/max_pool2d_1d"][1]["raises"][0] == "IndexError"
    assert "raises" in without["probe/grouped_mm_float32"][1]


def test_default_process_group_is_pytorchs(tmp_path):
    """init_process_group() with no backend on a CPU script, 2 processes and
    1: gloo for cpu as without torchtpu (it raised "No backend type
    associated with device type cpu"), with all_gather_object and a CPU
    DeviceMesh."""
    without, with_ = both(tmp_path, "ddp", timeout=300)
    assert_same(without, with_)
    assert with_["ddp/2"][0]["all_reduce"] == [3.0, 3.0] and with_["ddp/2"][1]["mesh_sum"] == 1.0
    assert with_["ddp/1"][0]["cpu_backend"] == "ProcessGroupGloo"


def test_cpu_workloads_unchanged(tmp_path):
    """OpInfo samples and error inputs (CPU, meta, fake), Inductor, export
    and forked DataLoader workers."""
    without, with_ = both(tmp_path, "opinfo", "compile", "dataloader")
    assert_same(without, with_)
    assert len([k for k in without if k.startswith("opinfo/")]) > 100
