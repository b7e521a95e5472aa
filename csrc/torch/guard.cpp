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

  // A device without an index (torch.Stream(device="tpu")) is the current one.
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d.has_index() ? d : getDevice());
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream getNewStream(c10::Device d, int priority) const override { return getStream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return getStream(s.device()); }

  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count_or_zero());
  }

  // Events are the runtime's markers: a point in the device's queue, reached
  // (with its time) when everything launched before it has finished.
  // Recording again replaces the point; waiting needs no device sync.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TPU_CHECK(tpu_eager_flush(TPU_CUT_SYNC));  // the event follows every call made before it
    tpu_marker* m = tpu_marker_record(runtime(), stream.device_index());
    TORCH_CHECK_WITH(OutOfMemoryError, m != nullptr, "tpu: out of host memory");
    tpu_marker_release(static_cast<tpu_marker*>(*event));
    *event = m;
  }
  void block(void* event, const c10::Stream& stream) const override {}  // one queue: already ordered
  bool queryEvent(void* event) const override {
    return event == nullptr || tpu_marker_done(static_cast<tpu_marker*>(event));
  }
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {
    tpu_marker_release(static_cast<tpu_marker*>(event));
  }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) tpu_marker_wait(static_cast<tpu_marker*>(event));
  }
  // Whether everything launched on the stream's device has finished: a
  // marker at the queue's end, reached or not.
  bool queryStream(const c10::Stream& stream) const override {
    TPU_CHECK(tpu_eager_flush(TPU_CUT_SYNC));
    tpu_marker* m = tpu_marker_record(runtime(), stream.device_index());
    TORCH_CHECK_WITH(OutOfMemoryError, m != nullptr, "tpu: out of host memory");
    bool done = tpu_marker_done(m);
    tpu_marker_release(m);
    return done;
  }
  void synchronizeStream(const c10::Stream& stream) const override { synchronizeDevice(stream.device_index()); }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    TPU_CHECK(tpu_eager_flush(TPU_CUT_SYNC));
    TPU_CHECK(tpu_runtime_synchronize(runtime(), device_index));
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  // Milliseconds from |a| to |b|, as CUDA's elapsed_time.
  double elapsedTime(void* a, void* b, const c10::DeviceIndex) const override {
    TORCH_CHECK(a != nullptr && b != nullptr, "Both events must be recorded before calculating elapsed time.");
    auto* start = static_cast<tpu_marker*>(a);
    auto* end = static_cast<tpu_marker*>(b);
    TORCH_CHECK(tpu_marker_done(start) && tpu_marker_done(end),
                "Both events must be completed before calculating elapsed time.");
    return static_cast<double>(tpu_marker_time_ns(end) - tpu_marker_time_ns(start)) / 1e6;
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace
}  // namespace torchtpu
