// PrivateUse1 hooks: availability, generators, storage resizing, device
// queries that PyTorch makes through the accelerator interface.
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include <mutex>
#include <unordered_set>

#include "torch/generator.h"
#include "torch/tpu_torch.h"

namespace torchtpu {
namespace {

// "Pinned" host memory: ordinary host memory (a transfer reads any host
// memory), remembered so that is_pinned() answers true for it, as PyTorch's
// code expects of a tensor it made with pin_memory=True (DDP's
// find_unused_parameters asserts it).
class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr p = at::getCPUAllocator()->allocate(n);
    void* data = p.get();
    if (data == nullptr) return p;
    {
      std::lock_guard<std::mutex> g(mu_);
      live_.insert(data);
    }
    // The CPU allocator's deleter frees |data| itself; ours forgets it first.
    c10::DeleterFnPtr inner = p.get_deleter();
    void* ctx = p.release_context();
    return {data, new Block{ctx, inner, data}, &PinnedAllocator::free_block, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dst, const void* src, std::size_t n) const override { default_copy_data(dst, src, n); }
  bool contains(const void* p) {
    std::lock_guard<std::mutex> g(mu_);
    return live_.count(p) != 0;
  }

 private:
  struct Block {
    void* ctx;
    c10::DeleterFnPtr inner;
    void* data;
  };
  static void free_block(void* b) {
    auto* block = static_cast<Block*>(b);
    {
      std::lock_guard<std::mutex> g(instance().mu_);
      instance().live_.erase(block->data);
    }
    if (block->inner != nullptr) block->inner(block->ctx);
    delete block;
  }

 public:
  static PinnedAllocator& instance() {
    static PinnedAllocator* a = new PinnedAllocator();  // never destroyed: storages may outlive exit hooks
    return *a;
  }

 private:
  std::mutex mu_;
  std::unordered_set<const void*> live_;
};

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count_or_zero() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return device_count_or_zero() > 0; }
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
  bool isPinnedPtr(const void* p) const override { return PinnedAllocator::instance().contains(p); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &PinnedAllocator::instance(); }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    tpu_storage* old = storage_of(storage);
    c10::DeviceGuard guard(storage.device());
    c10::DataPtr fresh = allocator()->allocate(newsize);
    tpu_storage* box = static_cast<tpu_storage*>(fresh.get());
    if (old != nullptr && box != nullptr && old->buf != nullptr)
      TPU_CHECK(tpu_storage_copy_prefix(box, old));
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
  Registrar() { at::RegisterPrivateUse1HooksInterface(new TpuHooks()); }
} g_registrar;

}  // namespace
}  // namespace torchtpu
