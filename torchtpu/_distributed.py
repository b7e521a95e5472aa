"""Registers the c10d backend "tpu_dist" (csrc/torch/distributed.cpp) for tpu
and cpu tensors, and makes it the default backend for tpu, so that
`dist.init_process_group()` on a tpu machine, `init_process_group("tpu_dist")`
and `init_device_mesh("tpu", ...)` reach it. Each group's backend runs an inner
gloo: CPU tensors go to it unchanged, tpu tensors as their buffers' host memory.

A group made with no backend named gets PyTorch's own default beside tpu's
("cpu:gloo,tpu:tpu_dist" here, "cuda:nccl,tpu:tpu_dist" on a CUDA machine).
PyTorch 2.13 gives such a group the accelerator's backend alone, and tpu is
the accelerator wherever torchtpu is loaded, so a CPU-only script's
`init_process_group()` would find no backend for its CPU tensors."""
import datetime

import torch
import torch.distributed as dist

from . import _C, _settings

NAME = "tpu_dist"


def _create(store, group_rank, group_size, timeout):
    if not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(seconds=float(timeout))
    gloo = dist.ProcessGroupGloo(store, group_rank, group_size, timeout)
    return _C._ProcessGroupTpu(group_rank, group_size, gloo, _settings.dist_check())


def _pytorchs_device():
    """The device PyTorch alone takes as the accelerator here (it puts a
    registered PrivateUse1 device first): the first one available of its
    own, else the CPU."""
    for name in ("cuda", "xpu", "mtia", "mps"):
        module = getattr(torch, name, None)
        if module is not None and module.is_available():
            return name
    return "cpu"


def _default_keeps_pytorchs():
    """The backends of a group made with no backend named: PyTorch's own
    choice beside tpu's, where PyTorch 2.13 takes tpu's alone."""
    from torch.distributed.distributed_c10d import Backend, BackendConfig
    if getattr(BackendConfig.__init__, "_torchtpu", False):
        return
    init = BackendConfig.__init__

    def __init__(self, backend):
        init(self, backend)
        if str(backend) == Backend.UNDEFINED and list(self.device_backend_map.items()) == [("tpu", NAME)]:
            device = _pytorchs_device()
            name = Backend.default_device_backend_map.get(device)
            if name is not None and dist.is_backend_available(name):
                self.device_backend_map = {device: Backend(name), "tpu": Backend(NAME)}

    __init__._torchtpu = True
    BackendConfig.__init__ = __init__


def enable():
    if not dist.is_available() or NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(NAME, _create, devices=["tpu", "cpu"])
    _default_keeps_pytorchs()
