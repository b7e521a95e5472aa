// The tpu allocator: a storage's data pointer is its storage box (see
// eager.h), a unique, stable, non-dereferenceable identity. Device memory is
// the PJRT buffer inside the box, created when the storage is first written.
// It is PyTorch's DeviceAllocator for tpu, so torch.accelerator's memory
// functions report the live storages' statistics (eager/storage.c). PJRT
// allocates and frees device memory itself, so nothing is cached: reserved
// equals allocated, and emptyCache has nothing to release. While
// torch.profiler records memory, each storage made and freed is reported to
// it (the "TPU Mem" columns) with the live bytes after the change.
#include <c10/core/CachingDeviceAllocator.h>

#include "torch/tpu_torch.h"

namespace torchtpu {
namespace {

// |delta| bytes of storage |box| on |device| were made (> 0) or freed (< 0).
void report_memory(void* box, int64_t delta, c10::DeviceIndex device) {
  tpu_memory_stat bytes, count;
  tpu_storage_memory(device, TPU_MEMORY_ALL, &bytes, &count);
  auto live = static_cast<size_t>(bytes.current);
  c10::reportMemoryUsageToProfiler(box, delta, live, live, c10::Device(c10::DeviceType::PrivateUse1, device));
}

void delete_box(void* ctx) {
  auto* box = static_cast<tpu_storage*>(ctx);
  if (box != nullptr && c10::memoryProfilingEnabled()) {
    int64_t nbytes = box->nbytes;
    auto device = static_cast<c10::DeviceIndex>(box->device);
    tpu_storage_free(box);
    report_memory(ctx, -nbytes, device);
    return;
  }
  tpu_storage_free(box);
}

void fill(c10::CachingAllocator::Stat& out, const tpu_memory_stat& in) {
  out.current = in.current;
  out.peak = in.peak;
  out.allocated = in.allocated;
  out.freed = in.freed;
}

struct TpuAllocator final : public c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex device = current_device();
    c10::Device dev(c10::DeviceType::PrivateUse1, device);
    if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &delete_box, dev);
    tpu_storage* box = nullptr;
    TPU_CHECK(tpu_storage_new(tpu_eager_context_get(), device, static_cast<int64_t>(nbytes), &box));
    if (c10::memoryProfilingEnabled()) report_memory(box, static_cast<int64_t>(nbytes), device);
    return c10::DataPtr(box, box, &delete_box, dev);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &delete_box; }

  // Storages hold opaque buffers, not bytes: PyTorch paths that memcpy
  // between storages (CPU-style resize, copy-on-write) must not reach here.
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "tpu storages cannot be copied byte-wise; use tensor.copy_()");
  }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}
  // One stream per device, and PJRT keeps a buffer alive while a program reads it.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats stats;
    for (int pool = 0; pool < TPU_MEMORY_POOLS; pool++) {
      tpu_memory_stat bytes, count;
      tpu_storage_memory(device, pool, &bytes, &count);
      // Each storage is its own PJRT buffer: one segment, one active block.
      for (auto* s : {&stats.allocation, &stats.segment, &stats.active}) fill((*s)[pool], count);
      for (auto* s : {&stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes, &stats.requested_bytes})
        fill((*s)[pool], bytes);
    }
    stats.num_device_alloc = stats.segment[TPU_MEMORY_ALL].allocated;
    stats.num_device_free = stats.segment[TPU_MEMORY_ALL].freed;
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override { tpu_storage_reset_memory(device, false, true); }
  void resetPeakStats(c10::DeviceIndex device) override { tpu_storage_reset_memory(device, true, false); }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    int64_t free = 0, total = 0;
    TPU_CHECK(tpu_runtime_memory_info(runtime(), device, &free, &total));
    return {static_cast<size_t>(free), static_cast<size_t>(total)};
  }
};

TpuAllocator g_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace

c10::Allocator* allocator() { return &g_allocator; }

}  // namespace torchtpu
