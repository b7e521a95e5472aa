"""The c10d backend "tpu_dist" across processes (CPU plugin, gloo on the
buffers' host memory). Workers live in tests/dist/; every launch has a hard
timeout, and a hang kills the process group."""
import os
import re

import pytest

from conftest import launch, torchrun

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist")


def worker(name):
    return os.path.join(WORKERS, name)


@pytest.mark.parametrize("n", [2, 3])
def test_collectives_equal_gloo(n):
    rc, out = torchrun([worker("collectives.py")], n, 400)
    assert rc == 0, out[-6000:]
    counts = re.findall(r"rank \d+: (\d+) equal", out)
    assert len(counts) == n and all(int(c) > 350 for c in counts), out[-3000:]


def test_ddp_fsdp2_equal_one_process():
    rc, out = torchrun([worker("training.py")], 2, 400)
    assert rc == 0, out[-6000:]
    assert out.count("training checks done, 0 failures") == 2, out[-3000:]


def test_default_group_starts_tpu_only_when_used():
    """A default group's tpu half starts nothing until a tpu tensor comes
    (it started the tpu runtime in every process, tpu used or not), and
    DeviceMesh then sets tpu:LOCAL_RANK from a launcher that gives
    LOCAL_RANK alone."""
    rcs, outs = launch([worker("mesh.py")], 2, 120, env={"LOCAL_WORLD_SIZE": ""})
    for r, out in enumerate(outs):
        assert f"rank {r}: idle True device {r} cpu [3.0, 3.0] tpu [3.0, 3.0]" in out, out[-3000:]
    assert rcs == [0, 0]


def raised(out):
    m = re.search(r"RAISED (\w+): (.*)", out)
    return m and (m.group(1), m.group(2))


@pytest.mark.parametrize("case,words", [
    ("shape", ["shape [4]", "shape [5]"]),
    ("dtype", ["Float", "Half"]),
])
def test_mismatch_raises_on_every_rank(case, words):
    rcs, outs = launch([worker("errors.py"), case], 2, 120)
    for out in outs:
        kind = raised(out)
        assert kind and kind[0] == "RuntimeError", out[-3000:]
        for w in words:
            assert w in kind[1], kind[1]
    if case == "shape":  # the group keeps working
        assert all("AFTER [2.0, 2.0, 2.0]" in o for o in outs), outs


def test_wrong_list_length_is_local_value_error():
    rcs, outs = launch([worker("errors.py"), "list_length"], 2, 120)
    for out in outs:
        kind = raised(out)
        assert kind and kind[0] == "ValueError" and "one tensor per rank" in kind[1], out[-3000:]
        assert "AFTER ok" in out


@pytest.mark.parametrize("case,words", [("peer_exits", ["closed", "reset", "Connection"]),
                                        ("peer_silent", ["Timed out", "timed out", "timeout"])])
def test_fault_raises_within_timeout(case, words):
    rcs, outs = launch([worker("errors.py"), case], 2, 120, env={"TIMEOUT_S": "8"})
    kind = raised(outs[0])
    assert kind and kind[0] in ("RuntimeError", "DistBackendError"), outs[0][-3000:]
    assert any(w in kind[1] for w in words), kind[1]


def test_compiled_collectives_ddp_fsdp2_equal_eager():
    rc, out = torchrun([worker("compiled.py")], 2, 500)
    assert rc == 0, out[-6000:]
    assert out.count("compiled checks done, 0 failures") == 2, out[-3000:]


def test_dtensor_2x2_mesh():
    rc, out = torchrun([worker("dtensor.py")], 4, 500)
    assert rc == 0, out[-6000:]
    assert out.count("dtensor checks done, 0 failures") == 4, out[-3000:]


def test_debug_detail_wraps_backend():
    """TORCH_DISTRIBUTED_DEBUG=DETAIL wraps tpu_dist in PyTorch's checking
    wrapper (it needs sequence numbers): its own mismatch error comes first."""
    rcs, outs = launch([worker("errors.py"), "shape"], 2, 120, env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    for out in outs:
        kind = raised(out)
        assert kind and "Detected mismatch between collectives" in kind[1], out[-3000:]
