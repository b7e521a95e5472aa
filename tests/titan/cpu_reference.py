"""TorchTitan's trainer on the CPU over gloo: the reference that tpu runs
are compared with (`python cpu_reference.py <torchtitan.train's args>`,
under torchrun). TorchTitan has no CPU device option, so only this
reference is adapted: torchtpu is not loaded, the device is "cpu", and
FSDP2 reduces with SUM for gloo."""
import os
import runpy
import types

os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # plain `import torch` would load torchtpu

import torch  # noqa: E402

torch._utils._get_available_device_type = lambda: "cpu"
# what TorchTitan's metrics read from the device module (torch.cpu lacks them)
torch.cpu.get_device_name = lambda device=None: "cpu"
torch.cpu.get_device_properties = lambda device=None: types.SimpleNamespace(total_memory=1 << 34)
torch.cpu.memory_stats = lambda device=None: {}
torch.cpu.reset_peak_memory_stats = lambda device=None: None
torch.cpu.empty_cache = lambda: None
torch.cpu.current_device = lambda: 0  # an index, as barrier(device_ids=) takes it
# gloo refuses FSDP2's PREMUL_SUM: reduce with SUM, then divide (what FSDP2
# does for devices that only sum)
from torch.distributed.fsdp._fully_shard import _fsdp_collectives  # noqa: E402

_divide_factors = _fsdp_collectives._get_gradient_divide_factors
_fsdp_collectives._get_gradient_divide_factors = lambda *a: _divide_factors(*a[:5], True)
runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)
