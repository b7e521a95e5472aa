"""DLPack for tpu tensors. PyTorch gives a PrivateUse1 tensor the device type
kDLExtDev only while the backend is still named "privateuse1"; once renamed
"tpu", Tensor.__dlpack_device__ raised "Unknown device type tpu for Dlpack",
and with it torch.from_dlpack(tpu_tensor). The capsule itself (Tensor.__dlpack__,
torch.utils.dlpack.to_dlpack) already says kDLExtDev: its data pointer is the
storage box, which only torchtpu can read, so torch.from_dlpack gives back a
tpu tensor sharing the storage, and other libraries refuse the device. The
memory cannot be shared with them: XLA owns a tpu tensor's buffer and swaps in
a new one when the tensor is written, so an alias would go stale. A consumer
that asks for a CPU copy (numpy.from_dlpack(t, device="cpu"), DLPack's
dl_device) gets one, as from t.cpu(). Memory pinned for tpu is ordinary host
memory (kDLCPU), where PyTorch would call any pinned tensor kDLCUDAHost."""
import torch

from . import _C

_tensor_dlpack_device = torch.Tensor.__dlpack_device__


def _dlpack_device(self):
    if not torch._C._has_torch_function_unary(self):
        from torch.utils.dlpack import DLDeviceType
        if self.device.type == "tpu":
            return (DLDeviceType.kDLExtDev, self.device.index or 0)
        # PyTorch calls every pinned CPU tensor kDLCUDAHost; memory tpu
        # pinned is plain host memory, which CUDA has not registered.
        if self.device.type == "cpu" and _C._is_pinned(self.data_ptr()):
            return (DLDeviceType.kDLCPU, 0)
    return _tensor_dlpack_device(self)


def enable():
    torch.Tensor.__dlpack_device__ = _dlpack_device
