"""tpu with processes: a child forked after the parent started the runtime
raises at once instead of deadlocking (torch.tpu._is_in_bad_fork() says so);
tpu tensors travel between processes by value (queues, spawn arguments,
DataLoader workers); nothing hangs.

Each case runs this file as a script in a fresh process with a hard timeout
(a hang fails the test instead of stopping the suite); spawned children
re-import it as their main module, which is why the cases live here."""
import os
import pickle
import re
import subprocess
import sys

import pytest
import torch
import torch.multiprocessing as mp
from multiprocessing.reduction import ForkingPickler
from torch.utils.data import DataLoader, Dataset

import torchtpu  # noqa: F401

REINIT = ("Cannot re-initialize tpu in forked subprocess. To use tpu with multiprocessing, "
          "you must use the 'spawn' start method")


def run_case(name, timeout=60, **env):
    r = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **env})
    assert r.returncode == 0, f"exit code {r.returncode}\n{r.stdout}\n{r.stderr}"
    assert r.stdout.strip().endswith("ok"), r.stdout + r.stderr
    return r.stdout


# --- cases (run in their own process) ----------------------------------------------

class TpuItems(Dataset):
    """Items made on tpu in the worker (the user's report)."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.full((2,), float(i), device="tpu")


class CpuItems(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.full((2,), float(i))


def _expect_batches(batches, device):
    got = sorted(b[:, 0].tolist() for b in batches)
    assert got == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]], got
    assert all(b.device.type == device for b in batches)


def case_dataloader_fork_after_use():
    """Forked workers of a parent that used tpu: the worker's error is
    raised in the parent, at once."""
    torch.ones(1, device="tpu").cpu()
    with pytest.raises(RuntimeError, match="(?s)DataLoader worker process.*" + re.escape(REINIT)):
        list(DataLoader(TpuItems(), batch_size=4, num_workers=2, multiprocessing_context="fork"))


def case_dataloader_spawn():
    """Spawned workers start a runtime each; their tpu batches reach the
    parent as tpu tensors with the same values."""
    torch.ones(1, device="tpu").cpu()
    _expect_batches(list(DataLoader(TpuItems(), batch_size=4, num_workers=2, multiprocessing_context="spawn")),
                    "tpu")


def case_dataloader_pin_memory():
    """CPU batches from forked workers with pin_memory=True while tpu is in
    use: the pinning thread runs, batches arrive, the main process moves them."""
    torch.ones(1, device="tpu").cpu()
    batches = list(DataLoader(CpuItems(), batch_size=4, num_workers=2, pin_memory=True,
                              multiprocessing_context="fork"))
    _expect_batches([b.to("tpu") for b in batches], "tpu")


def _send_tensors(q, done):
    x = torch.arange(6.0, device="tpu").view(2, 3)
    q.put((x, x[1], x.t(), torch.nn.Parameter(torch.ones(2, device="tpu")), torch.empty(0, device="tpu")))
    done.wait(30)  # the sender keeps the host copy's shared memory until it is taken, as for CPU tensors


def _echo_values(q, out):
    try:
        t = q.get(timeout=30)
        out.put((t.device.type, t.cpu().tolist()))
    except Exception as e:  # noqa: BLE001 - reported to the parent
        out.put(("error", f"{type(e).__name__}: {e}"))


def _check_received(q, done):
    x, row, xt, p, empty = q.get(timeout=30)
    done.set()
    assert x.device.type == "tpu" and x.cpu().tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert xt.cpu().tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    assert type(p) is torch.nn.Parameter and p.requires_grad and p.cpu().tolist() == [1.0, 1.0]
    assert empty.device.type == "tpu" and empty.shape == (0,)
    row.mul_(10)  # views sent together share one storage on arrival
    assert x.cpu().tolist() == [[0.0, 1.0, 2.0], [30.0, 40.0, 50.0]]
    assert xt.cpu().tolist()[0] == [0.0, 30.0]


def _send_and_echo(q, done, back, out):
    _send_tensors(q, done)
    _echo_values(back, out)


def case_queue_spawn():
    """A spawned child puts tpu tensors on an mp.Queue (the user's report),
    then gets one from the parent."""
    ctx = mp.get_context("spawn")
    q, done, back, out = ctx.Queue(), ctx.Event(), ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_send_and_echo, args=(q, done, back, out))
    child.start()
    _check_received(q, done)
    back.put(torch.arange(3.0, device="tpu") * 2)
    assert out.get(timeout=30) == ("tpu", [0.0, 2.0, 4.0])
    child.join(30)
    assert child.exitcode == 0


def case_queue_fork_before_use():
    """A child forked before the parent used tpu starts its own runtime; its
    tensors reach the parent."""
    ctx = mp.get_context("fork")
    q, done = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_send_tensors, args=(q, done))
    child.start()
    _check_received(q, done)
    child.join(30)
    assert child.exitcode == 0


def _use_tpu():
    torch.ones(2, device="tpu").cpu()


def _send_inherited(q, x):
    q.put(x)


def case_bad_fork():
    """After the parent used tpu: an os.fork child is marked, and every use
    of tpu there raises at once; an mp 'fork' child fails with the error;
    a tensor the child gets from a queue raises in its get(); a tensor it
    inherited and sends raises in the parent's get(); the parent goes on."""
    x = torch.arange(4.0, device="tpu")
    assert (x + 1).cpu().tolist() == [1.0, 2.0, 3.0, 4.0]
    assert not torch.tpu._is_in_bad_fork() and torch.tpu.is_initialized()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            assert torch.tpu._is_in_bad_fork() and not torch.tpu.is_initialized()
            assert torch.tpu.device_count() == 1
            torch.manual_seed(0)  # PyTorch skips tpu's seeding in a bad fork
            uses = [lambda: torch.ones(2, device="tpu"), lambda: torch.empty(2, device="tpu"),
                    lambda: torch.arange(2).to("tpu"), lambda: x + 1, lambda: x.cpu(), lambda: x.sum().item(),
                    torch.tpu.synchronize, lambda: torch.tpu.Event().record()]
            for use in uses:
                with pytest.raises(RuntimeError, match=re.escape(REINIT)):
                    use()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status

    ctx = mp.get_context("fork")
    child = ctx.Process(target=_use_tpu)
    child.start()
    child.join(30)
    assert child.exitcode == 1

    q, out = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_echo_values, args=(q, out))
    child.start()
    q.put(x)
    kind, message = out.get(timeout=30)
    assert kind == "error" and REINIT in message, message
    child.join(30)

    child = ctx.Process(target=_send_inherited, args=(q, x))
    child.start()
    with pytest.raises(RuntimeError, match="a tpu tensor sent by process .* could not be read there: Cannot re-init"):
        q.get(timeout=30)
    child.join(30)
    assert (x * 3).cpu().tolist() == [0.0, 3.0, 6.0, 9.0]


def case_fork_before_use():
    """A child forked before any tpu use (after import torchtpu) is not a
    bad fork and computes on tpu."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            assert not torch.tpu._is_in_bad_fork()
            assert (torch.arange(3.0, device="tpu") * 2).cpu().tolist() == [0.0, 2.0, 4.0]
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert not torch.tpu._is_in_bad_fork()
    assert (torch.ones(2, device="tpu") + 1).cpu().tolist() == [2.0, 2.0]


# --- tests ---------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["dataloader_fork_after_use", "dataloader_spawn", "dataloader_pin_memory",
                                  "queue_spawn", "queue_fork_before_use", "bad_fork", "fork_before_use"])
def test_case(case):
    run_case(case)


def test_bad_fork_refuses_recording_in_fused_eager():
    """Fused eager records ops without touching the device: a forked child
    must still refuse each at its call (it recorded `x + 1` silently)."""
    run_case("bad_fork", TORCHTPU_EAGER="fused")


def test_not_in_bad_fork():
    assert torch.tpu._is_in_bad_fork() is False


def test_forking_pickler_sends_by_value():
    """What a queue sends: a new tpu tensor of the same values, dtype and
    view, not the sender's storage."""
    base = torch.arange(12, dtype=torch.int32, device="tpu").view(3, 4)
    view = base[1:, ::2]
    got = pickle.loads(ForkingPickler.dumps(view))
    assert got.device == view.device and got.dtype == torch.int32
    assert got.stride() == view.stride() and got.storage_offset() == view.storage_offset()
    torch.testing.assert_close(got.cpu(), view.cpu())
    got.zero_()
    assert base.cpu()[1:, ::2].tolist() == [[4, 6], [8, 10]]
    cpu = torch.arange(3.0)
    torch.testing.assert_close(pickle.loads(ForkingPickler.dumps(cpu)), cpu)  # CPU tensors as PyTorch sends them


if __name__ == "__main__":
    globals()["case_" + sys.argv[1]]()
    print("ok")
