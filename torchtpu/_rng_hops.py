"""PyTorch's RNG higher-order ops, run_and_save_rng_state and
run_with_rng_state, which torch.compile's partitioner wraps around a random
op that activation checkpointing recomputes (SDPA's fused attention is one,
dropout or not), so that the recomputation draws what the forward drew.
They choose their implementation from a fixed list of devices (cpu, cuda,
hpu, xpu) and raise "Backend not supported for tpu" otherwise. tpu joins
the list here, with torch.tpu's generator state, as CUDA's with
torch.cuda's; other devices keep PyTorch's implementations."""
import torch
from torch._C import DispatchKey
from torch._higher_order_ops.utils import registered_hop_fake_fns
from torch._prims.rng_prims import get_device


def _run_and_save(op, *args, **kwargs):
    return torch.tpu.get_rng_state(), op(*args, **kwargs)


def _run_with(rng_state, op, *args, **kwargs):
    current = torch.tpu.get_rng_state()
    torch.tpu.set_rng_state(rng_state.cpu())
    try:
        return op(*args, **kwargs)
    finally:
        torch.tpu.set_rng_state(current)


def _join(hop, tpu_impl, leading):
    """|hop| runs |tpu_impl| for tpu arguments (after |leading| ones that
    are not the op's: the op itself, a saved state), else as before."""
    def with_tpu(base):
        def impl(*args, **kwargs):
            if get_device(args[leading:], kwargs) == "tpu":
                return tpu_impl(*args, **kwargs)
            return base(*args, **kwargs)
        return impl
    hop.py_kernels[DispatchKey.BackendSelect] = with_tpu(hop.py_kernels[DispatchKey.BackendSelect])
    hop.py_impl(DispatchKey.PrivateUse1)(tpu_impl)
    registered_hop_fake_fns[hop] = with_tpu(registered_hop_fake_fns[hop])
    hop._dispatch_cache.clear()


_join(torch.ops.higher_order.run_and_save_rng_state, _run_and_save, 1)
_join(torch.ops.higher_order.run_with_rng_state, _run_with, 2)
