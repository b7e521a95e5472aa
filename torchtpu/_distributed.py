"""Registers the c10d backend "tpu_dist" (csrc/torch/distributed.cpp) for tpu
and cpu tensors, and makes it the default backend for tpu, so that
`dist.init_process_group()` on a tpu machine, `init_process_group("tpu_dist")`
and `init_device_mesh("tpu", ...)` reach it. Each group's backend runs an inner
gloo: CPU tensors go to it unchanged, tpu tensors as their buffers' host memory."""
import datetime

import torch
import torch.distributed as dist

from . import _C

NAME = "tpu_dist"


def _create(store, group_rank, group_size, timeout):
    if not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(seconds=float(timeout))
    # The process's device starts with its group: DeviceMesh then takes it as
    # chosen (is_initialized) instead of set_device(LOCAL_RANK), which one
    # device per process (tpu:0) would refuse.
    torch.tpu._lazy_init()
    gloo = dist.ProcessGroupGloo(store, group_rank, group_size, timeout)
    return _C._ProcessGroupTpu(group_rank, group_size, gloo)


def enable():
    if not dist.is_available() or NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(NAME, _create, devices=["tpu", "cpu"])
