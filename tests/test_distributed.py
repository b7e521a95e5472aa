"""The c10d backend "tpu_dist" across processes (CPU plugin, gloo on the
buffers' host memory). Workers live in tests/dist/; every launch has a hard
timeout, and a hang kills the process group."""
import os
import re
import signal
import socket
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKERS = os.path.join(ROOT, "tests", "dist")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_for(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def torchrun(script, n, timeout, *args):
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={n}",
           f"--master-port={free_port()}", os.path.join(WORKERS, script), *args]
    p = subprocess.Popen(cmd, env=env_for(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        pytest.fail(f"{script} did not finish in {timeout} s:\n{out[-4000:]}")
    return p.returncode, out


def launch(script, n, timeout, *args, env=None):
    """n plain processes (RANK, WORLD_SIZE, MASTER_*), as torchrun sets them,
    without torchrun stopping the others when one exits."""
    port = str(free_port())
    procs = []
    for r in range(n):
        e = env_for({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(n),
                     "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, **(env or {})})
        procs.append(subprocess.Popen([sys.executable, os.path.join(WORKERS, script), *args], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      start_new_session=True))
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    os.killpg(q.pid, signal.SIGKILL)
            out, _ = p.communicate()
            pytest.fail(f"{script} {args} did not finish in {timeout} s:\n{out[-4000:]}")
        outs.append(out)
    return [p.returncode for p in procs], outs


@pytest.mark.parametrize("n", [2, 3])
def test_collectives_equal_gloo(n):
    rc, out = torchrun("collectives.py", n, 400)
    assert rc == 0, out[-6000:]
    counts = re.findall(r"rank \d+: (\d+) equal", out)
    assert len(counts) == n and all(int(c) > 350 for c in counts), out[-3000:]


def test_ddp_fsdp2_equal_one_process():
    rc, out = torchrun("training.py", 2, 400)
    assert rc == 0, out[-6000:]
    assert out.count("training checks done, 0 failures") == 2, out[-3000:]


def test_default_group_starts_tpu_only_when_used():
    """A default group's tpu half starts nothing until a tpu tensor comes
    (it started the tpu runtime in every process, tpu used or not), and
    DeviceMesh then sets tpu:LOCAL_RANK from a launcher that gives
    LOCAL_RANK alone."""
    rcs, outs = launch("mesh.py", 2, 120, env={"LOCAL_WORLD_SIZE": ""})
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
    rcs, outs = launch("errors.py", 2, 120, case)
    for out in outs:
        kind = raised(out)
        assert kind and kind[0] == "RuntimeError", out[-3000:]
        for w in words:
            assert w in kind[1], kind[1]
    if case == "shape":  # the group keeps working
        assert all("AFTER [2.0, 2.0, 2.0]" in o for o in outs), outs


def test_wrong_list_length_is_local_value_error():
    rcs, outs = launch("errors.py", 2, 120, "list_length")
    for out in outs:
        kind = raised(out)
        assert kind and kind[0] == "ValueError" and "one tensor per rank" in kind[1], out[-3000:]
        assert "AFTER ok" in out


@pytest.mark.parametrize("case,words", [("peer_exits", ["closed", "reset", "Connection"]),
                                        ("peer_silent", ["Timed out", "timed out", "timeout"])])
def test_fault_raises_within_timeout(case, words):
    rcs, outs = launch("errors.py", 2, 120, case, env={"TIMEOUT_S": "8"})
    kind = raised(outs[0])
    assert kind and kind[0] in ("RuntimeError", "DistBackendError"), outs[0][-3000:]
    assert any(w in kind[1] for w in words), kind[1]


def test_compiled_collectives_ddp_fsdp2_equal_eager():
    rc, out = torchrun("compiled.py", 2, 500)
    assert rc == 0, out[-6000:]
    assert out.count("compiled checks done, 0 failures") == 2, out[-3000:]


def test_dtensor_2x2_mesh():
    rc, out = torchrun("dtensor.py", 4, 500)
    assert rc == 0, out[-6000:]
    assert out.count("dtensor checks done, 0 failures") == 4, out[-3000:]


def test_debug_detail_wraps_backend():
    """TORCH_DISTRIBUTED_DEBUG=DETAIL wraps tpu_dist in PyTorch's checking
    wrapper (it needs sequence numbers): its own mismatch error comes first."""
    rcs, outs = launch("errors.py", 2, 120, "shape", env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    for out in outs:
        kind = raised(out)
        assert kind and "Detected mismatch between collectives" in kind[1], out[-3000:]
