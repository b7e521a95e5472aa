"""tpu tensors between processes (torch.multiprocessing queues, pipes and
spawn arguments; DataLoader workers): sent by value.

PyTorch's ForkingPickler shares a CPU storage through shared memory and a
CUDA one through CUDA IPC; a PJRT buffer cannot be opened by another
process. So a tpu storage goes as a host copy (which PyTorch's own reduction
then sends through shared memory) and the receiver makes it again on the same
tpu device: a copy with the values the storage had when it was pickled (for
an mp.Queue, when the queue's feeder thread sent it), not shared memory;
writes on one side are not seen on the other. Views sent together still
share one storage there, since PyTorch's tensor reduction sends a tensor as
its storage plus its view.

A sender that cannot read its storage (a child forked after its parent
started the runtime, holding a tensor it inherited) sends the error instead,
and the receiver raises it: a queue pickles in its feeder thread, where an
exception is only printed and the receiver would wait forever.
"""
import os
from multiprocessing.reduction import ForkingPickler

import torch
from torch.multiprocessing import reductions as _torch_reductions


def _rebuild_storage(host, device):
    return host.to(device=device)


def _raise_sent_error(message):
    raise RuntimeError(message)


def _reduce_storage(storage):
    if storage.device.type != "tpu":
        return _torch_reductions.reduce_storage(storage)
    try:
        host = storage.cpu()
    except RuntimeError as e:
        return (_raise_sent_error, (f"a tpu tensor sent by process {os.getpid()} could not be read there: {e}",))
    return (_rebuild_storage, (host, storage.device))


def enable():
    """Registers the reduction for every storage, over the one
    torch.multiprocessing registered when it was imported (above); storages
    of other devices go to PyTorch's."""
    ForkingPickler.register(torch.UntypedStorage, _reduce_storage)
