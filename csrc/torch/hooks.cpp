// PrivateUse1 hooks: availability, generators, storage resizing, device
// queries that PyTorch makes through the accelerator interface.
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "base/pinned.h"
#include "torch/generator.h"
#include "torch/tpu_torch.h"

namespace torchtpu {
namespace {

void free_pinned(void* block) { tpu_pinned_free(block); }

// pin_memory() for tpu (a tensor's, DataLoader's pin thread's): CPU memory
// from base/pinned.c, which is_pinned() then recognises, as CUDA's host
// allocator's blocks are. On the CPU plugin device memory is host memory, so
// the block is ordinary page-aligned memory with nothing to lock. It is also
// tpu's host allocator (torch.accelerator.empty_host_cache and the host
// memory stats ask for one; without it they crash): blocks are freed at
// once, so there is no cache to empty and no stream use to wait for.
struct PinnedAllocator final : public at::HostAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* block = tpu_pinned_alloc(nbytes);
    TORCH_CHECK_WITH(OutOfMemoryError, block != nullptr, "tpu: out of host memory pinning ", nbytes, " bytes");
    return c10::DataPtr(block, block, &free_pinned, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override { return {}; }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};

PinnedAllocator g_pinned;

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count_or_zero() > 0; }
  // Like CUDA's: whether tpu was used (the runtime started), not whether it could be.
  bool hasPrimaryContext(c10::DeviceIndex) const override { return runtime_started() && device_count_or_zero() > 0; }
  void init() const override { runtime(); }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override { return new_generator(device); }

  // Data pointers are storage boxes plus offsets: they do not say where they
  // live, and every storage of this process is on a tpu device.
  at::Device getDeviceFromPtr(void*) const override {
    return at::Device(c10::DeviceType::PrivateUse1, current_device());
  }
  bool isPinnedPtr(const void* ptr) const override { return tpu_pinned_contains(ptr); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned; }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    tpu_storage* old = storage_of(storage);
    c10::DeviceGuard guard(storage.device());
    c10::DataPtr fresh = allocator()->allocate(newsize);
    tpu_storage* box = static_cast<tpu_storage*>(fresh.get());
    // (copy_prefix runs fused eager's recorded calls on |old| first: before
    // them it has no buffer yet, and the value they give it is kept)
    if (old != nullptr && box != nullptr) TPU_CHECK(tpu_storage_copy_prefix(box, old));
    storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
    storage.unsafeGetStorageImpl()->set_nbytes(newsize);
  }

  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(device_count_or_zero()); }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_current_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    c10::DeviceIndex old = current_device();
    set_current_device(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override { return exchangeDevice(device); }
};

struct Registrar {
  Registrar() {
    at::RegisterPrivateUse1HooksInterface(new TpuHooks());
    at::setHostAllocator(c10::DeviceType::PrivateUse1, &g_pinned);
  }
} g_registrar;

}  // namespace
}  // namespace torchtpu
