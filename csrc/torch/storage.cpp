// Tensor factories, metadata-only views, resize_ and set_: everything that
// changes what a tensor points at without computing. Views only touch sizes,
// strides and offsets, so they also work on meta storages (fake tensors).
#include <ATen/EmptyTensor.h>
#include <ATen/InferSize.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/expand_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <torch/library.h>

#include "torch/tpu_torch.h"

namespace torchtpu {
namespace {

c10::DeviceIndex device_of(std::optional<c10::Device> device) {
  if (device.has_value() && device->has_index()) return device->index();
  return current_device();
}

void check_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(!layout.has_value() || *layout == c10::kStrided, "tpu supports only strided tensors, got layout ",
              *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "only CPU tensors can be pinned");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  check_options(layout, pin_memory);
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device_of(device)));
  return at::detail::empty_generic(size, allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  check_options(layout, pin_memory);
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device_of(device)));
  return at::detail::empty_strided_generic(size, stride, allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// The zero tensors autograd makes for gradients that are known to be zero
// (the ZeroTensor key: no storage; PyTorch's ZeroTensor kernels and fallback
// materialize zeros where an op needs them), as on the CPU and CUDA.
at::Tensor efficient_zero_tensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                 std::optional<bool> pin_memory) {
  check_options(layout, pin_memory);
  c10::Device dev(c10::DeviceType::PrivateUse1, device_of(device));
  c10::DeviceGuard guard(dev);
  at::native::ZeroTensorAllocator zeros(dev);
  return at::detail::empty_generic(size, &zeros, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1) |
                                                     c10::DispatchKeySet(c10::DispatchKey::ZeroTensor),
                                   c10::dtype_or_default(dtype), std::nullopt);
}

// Sets sizes (and strides, or contiguous ones) and grows the storage when
// the new geometry reaches past it.
void resize_impl(c10::TensorImpl* self, c10::IntArrayRef size, std::optional<c10::IntArrayRef> stride) {
  if (self->sizes() == size && (!stride || self->strides() == *stride)) return;
  const int64_t itemsize = static_cast<int64_t>(self->dtype().itemsize());
  const int64_t offset = self->storage_offset();
  int64_t needed = 0;
  if (stride) {
    self->set_sizes_and_strides(size, *stride);
    needed = static_cast<int64_t>(at::detail::computeStorageNbytes(size, *stride, itemsize, offset));
  } else {
    self->set_sizes_contiguous(size);
    needed = static_cast<int64_t>(at::detail::computeStorageNbytesContiguous(size, itemsize, offset));
  }
  const c10::Storage& storage = self->unsafe_storage();
  if (needed > static_cast<int64_t>(storage.nbytes())) {
    TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
    at::detail::getPrivateUse1Hooks().resizePrivateUse1Bytes(storage, static_cast<size_t>(needed));
  }
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  resize_impl(self.unsafeGetTensorImpl(), size, std::nullopt);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format ", *memory_format);
    self.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t storage_offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, source, storage_offset, size, stride);
  self.unsafeGetTensorImpl()->set_storage_offset(storage_offset);
  std::optional<c10::IntArrayRef> stride_opt =
      stride.data() != nullptr ? std::optional<c10::IntArrayRef>(stride) : std::nullopt;
  resize_impl(self.unsafeGetTensorImpl(), size, stride_opt);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t elems = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {elems}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, allocator(), true);
  return set_storage(self, std::move(storage), 0, {0}, {});
}

// `param.data = tensor` across CPU and tpu (what Module.to() does to keep
// tied weights tied) needs PyTorch to see both as dense tensors whose
// metadata can be swapped; its own list of dense backends lacks PrivateUse1.
// The op is composite: registered where its composite kernel runs
// (AutogradPrivateUse1), ahead of tensor subclasses' Python dispatch, which
// would otherwise see it (a DTensor has no rule for it).
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided &&
           (t.device().type() == c10::DeviceType::PrivateUse1 || t.device().is_cpu() || t.device().is_cuda());
  };
  return self.key_set() == from.key_set() || (dense(self) && dense(from));
}

// PyTorch's expand, with the tensor's type named as PyTorch names a CUDA
// tensor's (legacy_type_name), not "tpuFloatType".
at::Tensor expand(const at::Tensor& self, c10::IntArrayRef size, bool implicit) {
  TORCH_CHECK(size.size() >= static_cast<size_t>(self.dim()), "expand(", legacy_type_name(self), "{", self.sizes(),
              "}, size=", size, "): the number of sizes provided (", size.size(), ") ",
              "must be greater or equal to the number of dimensions in the tensor (", self.dim(), ")");
  return at::native::expand(self, size, implicit);
}

}  // namespace
}  // namespace torchtpu

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(torchtpu::has_compatible_shallow_copy_type));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace torchtpu;
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("_efficientzerotensor", TORCH_FN(efficient_zero_tensor));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  // PyTorch's own view kernels are device-agnostic metadata code.
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("expand", TORCH_FN(expand));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
}
