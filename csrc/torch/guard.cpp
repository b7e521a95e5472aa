// The device guard: a thread-local current device and one in-order queue per
// device (PJRT orders work by data dependencies), so every stream is the
// default stream and events complete with the work launched before them.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "torch/tpu_torch.h"

namespace torchtpu {
namespace {

struct TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (d.index() >= 0 && d.index() != old.index()) set_current_device(d.index());
    return old;
  }

  c10::Device getDevice() const override { return c10::Device(c10::DeviceType::PrivateUse1, current_device()); }

  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == c10::DeviceType::PrivateUse1, "expected a tpu device, got ", d);
    if (d.index() >= 0) set_current_device(d.index());
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    try {
      if (d.index() >= 0) set_current_device(d.index());
    } catch (...) {
    }
  }

  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream getNewStream(c10::Device d, int priority) const override { return getStream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return getStream(s.device()); }

  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count_or_zero());
  }

  // Events: recording marks a point in the device's queue; waiting on one
  // synchronizes the device, which covers everything launched before it.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    *event = reinterpret_cast<void*>(static_cast<intptr_t>(stream.device_index()) + 1);
  }
  void block(void* event, const c10::Stream& stream) const override {}
  bool queryEvent(void* event) const override { return true; }
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {}
  void synchronizeEvent(void* event) const override {
    if (event == nullptr) return;
    synchronizeDevice(static_cast<c10::DeviceIndex>(reinterpret_cast<intptr_t>(event) - 1));
  }
  bool queryStream(const c10::Stream& stream) const override { return true; }
  void synchronizeStream(const c10::Stream& stream) const override { synchronizeDevice(stream.device_index()); }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    TPU_CHECK(tpu_runtime_synchronize(runtime(), device_index));
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  double elapsedTime(void* a, void* b, const c10::DeviceIndex) const override {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "tpu events do not record timestamps");
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace
}  // namespace torchtpu
