// torch.profiler for tpu: a Kineto child activity profiler, registered with
// libkineto::api() when the extension loads, for the PrivateUse1 activity
// (profile(activities=[CPU, PrivateUse1])). Kineto queues the factory until
// its activity profiler starts; PyTorch 2.13's REGISTER_PRIVATEUSE1_PROFILER
// does the same through a header that PyTorch 2.11 does not ship.
// A session turns the runtime's trace buffer (base/profile.h) into Kineto
// activities: each program's device span a kernel on the device's row,
// linked to the ATen op that launched it (its correlation id), and the
// host's compile / execute / instant events on the launching thread.
// Memory events come from the allocator (allocator.cpp).
#include <unistd.h>

#include <memory>
#include <set>
#include <string>
#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include <GenericTraceActivity.h>
#include <IActivityProfiler.h>
#include <libkineto.h>
#include <output_base.h>

#include "base/profile.h"
#include "torch/tpu_torch.h"

namespace torchtpu {
namespace {

// Device spans of programs still running at stop are waited for this long.
constexpr int64_t kStopWaitNs = 10LL * 1000 * 1000 * 1000;
// The device rows' resource: programs run in launch order, one queue a device.
constexpr int32_t kQueueResource = 0;
// Launch ids (a launch's execute event and its program) start here, above
// any correlation id of PyTorch's ops in one trace.
constexpr int32_t kLaunchIdBase = 1 << 30;

std::string host_name(const tpu_profile_event& e) {
  switch (e.kind) {
    case TPU_PROFILE_COMPILE:
      return std::string("tpu::compile (") + e.detail + ")";
    case TPU_PROFILE_EXECUTE:
      return "tpu::execute";
    case TPU_PROFILE_INSTANT:
      return std::string("tpu::") + e.name;
    case TPU_PROFILE_DEVICE:
      break;
  }
  return e.name;
}

class TpuProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  explicit TpuProfilerSession(const std::set<libkineto::ActivityType>& types)
      : kernels_(types.count(libkineto::ActivityType::CONCURRENT_KERNEL) > 0),
        runtime_(types.count(libkineto::ActivityType::PRIVATEUSE1_RUNTIME) > 0) {}

  ~TpuProfilerSession() override {
    if (status_ == libkineto::TraceStatus::RECORDING) tpu_profile_stop(0);
  }

  void start() override {
    tpu_profile_start();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    tpu_profile_stop(kStopWaitNs);
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override { processTrace(logger, nullptr, 0, 0); }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                    int64_t start_ns, int64_t end_ns) override {
    tpu_profile_event* events = nullptr;
    uint64_t dropped = 0;
    size_t n = tpu_profile_take(&events, &dropped);
    if (dropped > 0)
      errors_.push_back("tpu profiler: " + std::to_string(dropped) + " events not recorded (trace buffer full)");
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_ns, end_ns, "tpu");
    buffer_->gpuOpCount = 0;
    // A launch's execute event and its program's span share their thread and
    // start (runtime.c stamps both with the launch's time): one launch id.
    std::vector<int32_t> ids(n, 0);
    {
      std::map<std::pair<int32_t, int64_t>, int32_t> launch_of;
      int32_t launches = 0;
      for (size_t i = 0; i < n; i++)
        if (events[i].kind == TPU_PROFILE_EXECUTE)
          launch_of[{events[i].thread, events[i].start_ns}] = ids[i] = kLaunchIdBase + ++launches;
      for (size_t i = 0; i < n; i++)
        if (events[i].kind == TPU_PROFILE_DEVICE) {
          auto it = launch_of.find({events[i].thread, events[i].start_ns});
          if (it != launch_of.end()) ids[i] = it->second;
        }
    }
    std::set<int> devices;
    const int32_t pid = static_cast<int32_t>(getpid());
    for (size_t i = 0; i < n; i++) {
      const tpu_profile_event& e = events[i];
      bool device = e.kind == TPU_PROFILE_DEVICE;
      if (device ? !kernels_ : !runtime_) continue;
      auto type = device ? libkineto::ActivityType::CONCURRENT_KERNEL : libkineto::ActivityType::PRIVATEUSE1_RUNTIME;
      buffer_->emplace_activity(buffer_->span, type, device ? std::string(e.name) + " (program)" : host_name(e));
      libkineto::GenericTraceActivity& a = *buffer_->activities.back();
      a.startTime = e.start_ns;
      a.endTime = e.end_ns;
      a.threadId = e.thread;
      if (device) {
        a.device = e.device;
        a.resource = kQueueResource;
        devices.insert(e.device);
        buffer_->gpuOpCount++;
      } else {
        a.device = pid;
        a.resource = e.thread;
      }
      // |linked| is the ATen op that was running (Kineto's activity of that
      // correlation id): PyTorch adds a kernel's time to it and keeps host
      // events on its thread. Activity ids stay apart from the ops' ids,
      // which PyTorch matches against the linked ones: a launch and its
      // program share one id, which is also their flow arrow's.
      if (e.correlation != 0 && linked) a.linked = linked(static_cast<int32_t>(e.correlation));
      if (ids[i] != 0) {
        a.id = ids[i];
        a.flow.id = static_cast<uint32_t>(ids[i]);
        a.flow.type = libkineto::kLinkAsyncCpuGpu;
        a.flow.start = !device;
      }
      if (e.kind != TPU_PROFILE_DEVICE || e.device >= 0) a.addMetadata("device", e.device);
      if (e.kind != TPU_PROFILE_INSTANT) a.addMetadataQuoted("program", e.name);
      if (e.kind == TPU_PROFILE_INSTANT) a.addMetadataQuoted("reason", e.detail);
      if (e.kind == TPU_PROFILE_EXECUTE && e.detail[0] != '\0') a.addMetadataQuoted("status", e.detail);
      if (e.correlation != 0) a.addMetadata("correlation", e.correlation);
      a.log(logger);
    }
    free(events);
    for (int d : devices) {  // device 0 is getDeviceInfo's
      if (d == 0) continue;
      libkineto::DeviceInfo info{d, d, "TPU " + std::to_string(d), "tpu"};
      logger.handleDeviceInfo(info, start_ns);
      logger.handleResourceInfo(libkineto::ResourceInfo{kQueueResource, kQueueResource, d, "programs"}, start_ns);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{0, 0, "TPU 0", "tpu"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    return {libkineto::ResourceInfo{kQueueResource, kQueueResource, 0, "programs"}};
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  // Where device times come from, in the trace's metadata.
  std::unordered_map<std::string, std::string> getMetadata() override {
    std::string extension = "unknown (the runtime had not started)";
    if (runtime_started()) {
      try {
        extension = tpu_runtime_has_profiler_extension(runtime()) ? "present, its device trace not collected" : "absent";
      } catch (const std::exception&) {  // a forked child: no plugin calls
      }
    }
    return {{"tpu_device_timing", "\"program launch to completion event\""},
            {"tpu_pjrt_profiler_extension", "\"" + extension + "\""}};
  }

  void pushCorrelationId(uint64_t id) override { tpu_profile_push_correlation(id); }
  void popCorrelationId() override { tpu_profile_pop_correlation(); }

 private:
  bool kernels_, runtime_;
  std::vector<std::string> errors_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

class TpuActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<libkineto::ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<libkineto::ActivityType>& types,
                                                                 const libkineto::Config&) override {
    std::set<libkineto::ActivityType> ours;
    for (auto t : types)
      if (activities_.count(t)) ours.insert(t);
    if (ours.empty()) return nullptr;
    return std::make_unique<TpuProfilerSession>(ours);
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                 const std::set<libkineto::ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_{"tpu"};
  std::set<libkineto::ActivityType> activities_{libkineto::ActivityType::CONCURRENT_KERNEL,
                                                libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
};

const bool registered = [] {
  libkineto::api().registerProfilerFactory([] { return std::make_unique<TpuActivityProfiler>(); });
  return true;
}();

}  // namespace
}  // namespace torchtpu
