// Data movement: copies between the host and tpu storages, tpu-to-tpu
// copies (the internal copy rule: any view, any dtype, broadcasting), and
// reading scalars back (.item(), printing, bool(t)).
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <torch/library.h>

#include "torch/dispatch.h"
#include "torch/tpu_torch.h"

namespace torchtpu {

namespace {

const OpInfo& copy_op() {
  static const OpInfo info = [] {
    OpInfo i;
    i.arg_types = {ArgType::kTensor, ArgType::kTensor, ArgType::kBool};
    i.mutated = {false, true, false};
    i.promotes = {false, false, false};
    int alias = 1;
    tpu_eager_op* op = nullptr;
    TPU_CHECK(tpu_eager_op_new("aten::_copy_from", tpu_lower_find("_copy_from"), 1, 1, &alias, 0, nullptr, &op));
    i.op = op;
    return i;
  }();
  return info;
}

// The tensor is its whole storage, as stored (no lazy conj/neg bits).
bool is_whole(const at::Tensor& t) {
  tpu_storage* s = storage_of(t);
  if (s == nullptr || t.is_conj() || t.is_neg()) return false;
  tpu_tensor_ref r = tensor_ref(t);
  return tpu_view_is_whole(&r.view, s->nbytes);
}

// A buffer of |host|'s (contiguous) contents, of the type a whole write of
// it gives a storage (|*type|).
tpu_buffer* upload(const at::Tensor& host, c10::DeviceIndex device, tpu_hlo_type* type) {
  *type = tpu_storage_dense_type(held_dtype(host.scalar_type()), static_cast<int>(host.dim()), host.sizes().data());
  tpu_buffer* buf = nullptr;
  TPU_CHECK(
      tpu_buffer_from_host(runtime(), device, host.const_data_ptr(), type->dtype, type->dims, type->rank, &buf));
  return buf;
}

// Downloads the dense contents of |t| (whole-storage, same dtype) into |dst|.
void download_whole(const at::Tensor& t, void* dst) {
  tpu_storage* s = storage_of(t);
  TPU_CHECK(tpu_storage_settle(s, TPU_CUT_HOST_READ));
  TPU_CHECK(tpu_storage_read_error(s, tpu_buffer_to_host(runtime(), s->buf, dst, static_cast<size_t>(t.nbytes()))));
}

// Whether |t| downloads as it is stored (runs what fused eager recorded on it).
bool downloadable(const at::Tensor& t) {
  tpu_storage* s = storage_of(t);
  if (s != nullptr) TPU_CHECK(tpu_storage_settle(s, TPU_CUT_HOST_READ));
  return s != nullptr && s->buf != nullptr && is_whole(t) && s->type.dtype == to_tpu(t.scalar_type());
}

}  // namespace

void device_copy(const at::Tensor& dst, const at::Tensor& src) {
  at::assert_no_internal_overlap(dst);
  std::array<c10::IValue, 3> args = {src, dst, false};
  run_rule(copy_op(), args);
}

at::Tensor to_host(const at::Tensor& src) {
  at::Tensor out = at::empty(src.sizes(), src.options().device(at::kCPU));
  if (src.numel() == 0) return out;
  tpu_storage* s = storage_of(src);
  TPU_CHECK(tpu_storage_settle(s, TPU_CUT_HOST_READ));
  if (s->buf == nullptr) return out;  // never written: contents unspecified, as torch.empty
  if (downloadable(src)) {
    download_whole(src, out.mutable_data_ptr());
    return out;
  }
  at::Tensor dense = at::empty(src.sizes(), src.options());
  device_copy(dense, src);
  download_whole(dense, out.mutable_data_ptr());
  return out;
}

namespace {

// copy_'s checks as the CPU's TensorIterator makes them (PyTorch sends a
// copy that involves tpu here before building one): the written tensor's
// overlap, then the source broadcast to the destination's shape.
void check_copy(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.device().type() == c10::DeviceType::PrivateUse1) {
    at::assert_no_internal_overlap(dst);
    if (src.device() == dst.device() && !src.is_same(dst)) at::assert_no_partial_overlap(dst, src);
  }
  at::DimVector shape = at::infer_size_dimvector(dst.sizes(), src.sizes());
  TORCH_CHECK(c10::IntArrayRef(shape) == dst.sizes(), "output with shape ", dst.sizes(),
              " doesn't match the broadcast shape ", c10::IntArrayRef(shape));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const bool src_tpu = self.device().type() == c10::DeviceType::PrivateUse1;
  const bool dst_tpu = dst.device().type() == c10::DeviceType::PrivateUse1;
  check_copy(dst, self);
  if (dst.numel() == 0) return dst;
  check_rank(dst.dim());
  if (src_tpu && dst_tpu) {
    device_copy(dst, self);
  } else if (dst_tpu) {
    TORCH_CHECK(self.device().is_cpu(), "tpu can copy only from cpu or tpu tensors, got ", self.device());
    at::assert_no_internal_overlap(dst);
    at::Tensor host = self;
    if (host.scalar_type() != dst.scalar_type()) host = host.to(dst.scalar_type());
    if (host.sizes() != dst.sizes()) host = host.expand(dst.sizes());
    host = host.contiguous();
    c10::DeviceIndex device = dst.device().index();
    tpu_hlo_type type;
    tpu_buffer* buf = upload(host, device, &type);
    if (is_whole(dst)) {
      TPU_CHECK(tpu_storage_settle(storage_of(dst), TPU_CUT_HOST_WRITE));
      tpu_storage_set(storage_of(dst), buf, &type);
    } else {
      device_copy(dst, tensor_from_buffer(buf, dst.scalar_type(), dst.sizes(), device));
    }
  } else {
    TORCH_CHECK(dst.device().is_cpu(), "tpu can copy only to cpu or tpu tensors, got ", dst.device());
    if (dst.is_contiguous() && dst.scalar_type() == self.scalar_type() && dst.sizes() == self.sizes() &&
        downloadable(self)) {
      download_whole(self, dst.mutable_data_ptr());
    } else {
      dst.copy_(to_host(self));
    }
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(), " elements cannot be converted to Scalar");
  return to_host(self).item();
}

}  // namespace
}  // namespace torchtpu

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", TORCH_FN(torchtpu::copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(torchtpu::copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(torchtpu::local_scalar_dense));
}

// Lazy conjugate/negative views: PyTorch resolves them for most ops by
// cloning, and clone copies through _copy_from, which would resolve them
// again, forever. Our copies honour the bits themselves (the storage model
// applies them when reading a view), so the copy falls through.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}
