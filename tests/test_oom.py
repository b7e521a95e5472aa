"""Out of memory as a CUDA user meets it: torch.OutOfMemoryError at the op
whose outputs do not fit (the device's capacity, or the cap
torch.tpu.set_per_process_memory_fraction sets), worded as CUDA's allocator
words it, the process living on and memory back where it was. In strict and
fused eager (the outputs are allocated before the op is run or recorded)."""
import gc

import pytest
import torch

import torchtpu

MiB = 2**20
MODES = ["strict", "fused"]


@pytest.fixture
def cap():
    """cap(extra): allows the tensors alive now plus |extra| bytes; the
    fraction goes back to 1 afterwards."""
    gc.collect()
    total = torch.tpu.get_device_properties().total_memory

    def set_cap(extra):
        torch.tpu.set_per_process_memory_fraction((torch.tpu.memory_allocated() + extra) / total)
    yield set_cap
    torch.tpu.set_per_process_memory_fraction(1.0)
    assert torch.tpu.get_per_process_memory_fraction() == 1.0


def _check_message(e, nbytes_text, allowed):
    msg = str(e)
    assert msg.startswith(f"tpu out of memory. Tried to allocate {nbytes_text}. tpu 0 has a total capacity of "), msg
    assert " is free. " in msg and " is allocated by PyTorch, and " in msg and "reserved by PyTorch" in msg, msg
    assert (" allowed; " in msg) == allowed, msg
    assert isinstance(e, RuntimeError) and len(e.args) == 1  # what accelerate and transformers look for


@pytest.mark.parametrize("mode", MODES)
def test_op_over_the_cap_raises_at_the_op(cap, mode):
    a = torch.randn(1024, 1024, device="tpu")  # 4 MiB
    expected = (a @ a).cpu()
    torch.tpu.synchronize()
    gc.collect()
    cap(6 * MiB)
    before = torch.tpu.memory_allocated()
    with torchtpu.eager_mode(mode):
        b = a * 2  # fits: 4 MiB
        with pytest.raises(torch.OutOfMemoryError) as info:
            a @ b  # 4 MiB more does not
        _check_message(info.value, "4.00 MiB", allowed=True)
        del b
    assert torch.tpu.memory_allocated() == before
    torch.tpu.set_per_process_memory_fraction(1.0)
    torch.testing.assert_close((a @ a).cpu(), expected)  # the process lives on, the device computes


@pytest.mark.parametrize("mode", MODES)
def test_tensor_past_the_devices_capacity_raises(mode):
    gc.collect()
    before = torch.tpu.memory_allocated()
    total = torch.tpu.get_device_properties().total_memory
    n = 2 * total  # bytes
    with torchtpu.eager_mode(mode):
        with pytest.raises(torch.OutOfMemoryError) as info:
            torch.ones(n, dtype=torch.uint8, device="tpu")
    _check_message(info.value, f"{n / 2**30:.2f} GiB", allowed=False)
    assert torch.tpu.memory_allocated() == before
    assert torch.ones(3, device="tpu").sum().item() == 3


def test_memory_fraction_is_checked_as_cudas():
    with pytest.raises(TypeError, match="Invalid type for fraction argument, must be `float`"):
        torch.tpu.set_per_process_memory_fraction(1)
    with pytest.raises(ValueError, match=r"Invalid fraction value: 1.5. Allowed range: 0~1"):
        torch.tpu.set_per_process_memory_fraction(1.5)
    assert torch.tpu.get_per_process_memory_fraction() == 1.0


@pytest.mark.parametrize("mode", MODES)
def test_find_executable_batch_size_trains_at_the_size_that_fits(cap, mode):
    """accelerate retries a batch that raises an out-of-memory error (it
    looks for " out of memory." in a RuntimeError) with a smaller one, and
    calls torch.tpu.empty_cache between tries: on tpu it reaches the size
    that fits under the cap and trains there."""
    from accelerate.utils import find_executable_batch_size

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.tpu.synchronize()
    gc.collect()
    cap(4 * MiB)  # a batch row takes ~3 KiB at the peak of a step (input, activations, gradients)
    base = torch.tpu.memory_allocated()
    tried, trained, losses = [], [], []

    @find_executable_batch_size(starting_batch_size=8192, reduce_batch_size_fn=lambda: tried[-1] // 2)
    def train(batch_size):
        tried.append(batch_size)
        opt.zero_grad(set_to_none=True)  # a failed try's backward may have made some gradients
        assert torch.tpu.memory_allocated() == base  # and it left nothing else behind
        with torchtpu.eager_mode(mode):
            for _ in range(3):
                x = torch.randn(batch_size, 256, device="tpu")
                loss = model(x).pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                losses.append(loss.item())
        trained.append(batch_size)

    train()
    assert tried[0] == 8192 and len(tried) > 2 and trained == [tried[-1]], tried
    assert tried == [8192 >> i for i in range(len(tried))]
    assert tried[-1] * 256 * 4 < 4 * MiB  # its input fits
    assert all(torch.isfinite(torch.tensor(losses)))


def _overcommit_refuses_huge_allocations():
    """Linux refuses an allocation past RAM and swap under its heuristic
    (mode 0) or strict (2) overcommit; under mode 1 a huge malloc would
    succeed and the program would fill the machine's memory."""
    try:
        return open("/proc/sys/vm/overcommit_memory").read().strip() in ("0", "2")
    except OSError:
        return False


@pytest.mark.skipif(not _overcommit_refuses_huge_allocations(), reason="needs an overcommit that refuses it")
@pytest.mark.parametrize("mode", MODES)
def test_program_out_of_scratch_memory_raises_naming_it(mode):
    """XLA's scratch memory inside a program is not known before it runs: a
    matmul of an expanded (broadcast) matrix, which XLA makes dense, fails
    when it runs, and the read after it raises torch.OutOfMemoryError naming
    the op (in fused eager, after the trace's ops are replayed one by one)."""
    total = torch.tpu.get_device_properties().total_memory
    cols = 2**17
    rows = 4 * total // (4 * cols)  # the dense matrix: four times the device's memory
    a = torch.ones(1, 1, device="tpu").expand(rows, cols)
    v = torch.ones(cols, 1, device="tpu")
    torch.tpu.synchronize()  # the inputs made apart: under TORCHTPU_EAGER=fused they would join mm's trace
    gc.collect()
    before = torch.tpu.memory_allocated()
    with torchtpu.eager_mode(mode):
        r = a @ v  # its output fits: it is launched
        with pytest.raises(torch.OutOfMemoryError, match=r"^tpu out of memory\. aten::mm.* ran out of memory") as info:
            r.cpu()
    assert f"Out of memory allocating {rows * cols * 4} bytes" in str(info.value)
    # Reported once, where it surfaced: the next synchronize has nothing
    # more to say about it.
    torch.tpu.synchronize()
    del r, info
    assert torch.tpu.memory_allocated() == before
    assert torch.ones(3, device="tpu").sum().item() == 3


@pytest.mark.skipif(not _overcommit_refuses_huge_allocations(), reason="needs an overcommit that refuses it")
def test_an_unread_failed_launch_is_reported_once_by_synchronize():
    """A failed launch whose results nobody reads surfaces at the next
    synchronize, once; the one after it is clean."""
    total = torch.tpu.get_device_properties().total_memory
    cols = 2**17
    a = torch.ones(1, 1, device="tpu").expand(4 * total // (4 * cols), cols)
    v = torch.ones(cols, 1, device="tpu")
    torch.tpu.synchronize()
    with torchtpu.eager_mode("strict"):
        r = a @ v
    with pytest.raises(torch.OutOfMemoryError, match="Out of memory allocating"):
        torch.tpu.synchronize()
    torch.tpu.synchronize()
    del r
    assert torch.ones(3, device="tpu").sum().item() == 3
