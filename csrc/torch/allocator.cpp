// The tpu allocator: a storage's data pointer is its storage box (see
// eager.h), a unique, stable, non-dereferenceable identity. Device memory is
// the PJRT buffer inside the box, created when the storage is first written.
#include "torch/tpu_torch.h"

namespace torchtpu {
namespace {

void delete_box(void* ctx) { tpu_storage_free(static_cast<tpu_storage*>(ctx)); }

struct TpuAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex device = current_device();
    c10::Device dev(c10::DeviceType::PrivateUse1, device);
    if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &delete_box, dev);
    tpu_storage* box = tpu_storage_new(device, static_cast<int64_t>(nbytes));
    TORCH_CHECK_WITH(OutOfMemoryError, box != nullptr, "tpu: out of host memory");
    return c10::DataPtr(box, box, &delete_box, dev);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &delete_box; }

  // Storages hold opaque buffers, not bytes: PyTorch paths that memcpy
  // between storages (CPU-style resize, copy-on-write) must not reach here.
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "tpu storages cannot be copied byte-wise; use tensor.copy_()");
  }
};

TpuAllocator g_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace

c10::Allocator* allocator() { return &g_allocator; }

}  // namespace torchtpu
