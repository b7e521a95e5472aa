// torchtpu._C: the Python face of the C runtime (configuration, device
// queries, stats, generators). Thin: each function forwards to C.
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include "torch/dispatch.h"
#include "torch/generator.h"
#include "torch/tpu_torch.h"

extern "C" {
#include "base/compiles.h"
#include "base/pinned.h"
#include "base/stats.h"
#include "eager/eager.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "runtime/compile_cache.h"
}

namespace py = pybind11;
using namespace torchtpu;

namespace torchtpu {
void bind_graph(py::module& m);  // graph.cpp
void bind_compiles(py::module& m);  // compiles.cpp
void init_distributed(py::module& m);  // distributed.cpp
}

namespace {

py::dict info() {
  tpu_runtime* rt = runtime();
  py::dict d;
  int major = 0, minor = 0;
  tpu_runtime_api_version(rt, &major, &minor);
  d["platform"] = tpu_runtime_platform_name(rt);
  d["platform_version"] = tpu_runtime_platform_version(rt);
  d["plugin_path"] = tpu_runtime_plugin_path(rt);
  d["pjrt_api_version"] = py::make_tuple(major, minor);
  py::list devices;
  for (int i = 0; i < tpu_runtime_device_count(rt); i++) devices.append(tpu_runtime_device_kind(rt, i));
  d["devices"] = devices;
  char kernels[256];  // the hand-written kernels programs call
  tpu_kernels_describe(tpu_eager_context_get()->options.kernels, kernels, sizeof kernels);
  d["kernels"] = kernels;
  return d;
}

// The per-op counters of |kind| as a dict (name -> count).
py::dict op_counts(tpu_op_counter_kind_t kind) {
  py::dict out;
  tpu_stats_op_each(
      kind, [](void* ctx, const char* name, uint64_t count) { (*static_cast<py::dict*>(ctx))[name] = count; }, &out);
  return out;
}

py::dict stats() {
  py::dict d;
  for (int c = 0; c < TPU_STAT_COUNT_; c++) {
    auto counter = static_cast<tpu_counter_t>(c);
    if (counter == TPU_STAT_COMPILE_NS) d["compile_seconds"] = tpu_stats_get(counter) / 1e9;
    else d[tpu_stats_name(counter)] = tpu_stats_get(counter);
  }
  d["fallbacks"] = op_counts(TPU_OPSTAT_FALLBACK);
  d["decompositions"] = op_counts(TPU_OPSTAT_DECOMPOSITION);
  d["cuts"] = op_counts(TPU_OPSTAT_CUT);
  d["cached_programs"] = tpu_eager_cache_size();
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torchtpu native extension";
  // |settings|: torchtpu._settings.Settings, the one reader of the
  // environment; the plugin as _plugin.resolve found it.
  m.def("_configure", [](py::object settings, const std::string& plugin, const std::string& platform,
                         const std::string& error) {
    Config c;
    c.plugin_path = plugin;
    c.platform = platform;
    c.error = error;
    c.cpu_devices = settings.attr("cpu_devices").cast<int>();
    c.cache_dir = settings.attr("cache_dir").cast<std::string>();
    c.cache_max_bytes = settings.attr("cache_max_bytes").cast<int64_t>();
    c.kernels = settings.attr("kernels").cast<std::string>();
    py::object flags = settings.attr("xla_flags");
    c.has_xla_flags = !flags.is_none();
    if (c.has_xla_flags) c.xla_flags = flags.cast<std::string>();
    tpu_eager_options_init(&c.eager);
    c.eager.fused_max_ops = settings.attr("fused_max_ops").cast<int>();
    c.eager.fused_exact = settings.attr("fused_exact").cast<bool>();
    c.eager.max_cached_programs = settings.attr("max_cached_programs").cast<size_t>();
    configure(c);
    tpu_matmul_set_isa_cap(static_cast<tpu_matmul_isa_cap>(settings.attr("matmul_isa_cap").cast<int>()));
    tpu_compiles_set_limit(settings.attr("compile_limit").cast<int>());
  });
  m.def("_cache_dir", []() {
    runtime();
    return std::string(tpu_compile_cache_dir());
  });
  m.def("_start", []() { runtime(); });
  m.def("_started", []() { return runtime_started(); });
  m.def("_is_in_bad_fork", []() { return tpu_runtime_in_forked_child(); });
  m.def("_device_count", []() { return device_count_or_zero(); });
  m.def("_current_device", []() { return static_cast<int>(current_device()); });
  m.def("_set_device", [](int index) { set_current_device(static_cast<c10::DeviceIndex>(index)); });
  m.def("_synchronize", [](int device) {
    py::gil_scoped_release release;
    TPU_CHECK(tpu_eager_flush(TPU_CUT_SYNC));
    TPU_CHECK(tpu_runtime_synchronize(runtime(), device));
  });
  // Eager modes (eager.h): 0 strict, 1 fused, 2 blocking; a thread's -1
  // follows the default. Leaving fused mode runs what the thread recorded.
  m.def("_set_default_eager_mode", [](int mode) { tpu_eager_set_default_mode(static_cast<tpu_eager_mode>(mode)); });
  m.def("_set_thread_eager_mode", [](int mode) {
    tpu_eager_mode before = tpu_eager_current_mode();
    int old = tpu_eager_set_thread_mode(mode);
    if (before == TPU_EAGER_FUSED && tpu_eager_current_mode() != TPU_EAGER_FUSED) {
      py::gil_scoped_release release;
      TPU_CHECK(tpu_eager_flush(TPU_CUT_MODE));
    }
    return old;
  });
  m.def("_eager_mode", []() { return static_cast<int>(tpu_eager_current_mode()); });
  m.def("_flush", []() {
    py::gil_scoped_release release;
    TPU_CHECK(tpu_eager_flush(TPU_CUT_SYNC));
  });
  m.def("_set_fused_max_ops", [](int n) { tpu_eager_set_fused_max_ops(n); });
  m.def("_set_fused_loop_detection", [](bool on) { tpu_eager_set_fused_loop_detection(on); });
  m.def("_fused_last_failure", []() {
    char text[1024];
    tpu_eager_fused_last_failure(text, sizeof text);
    return std::string(text);
  });
  m.def("_info", &info);
  m.def("_stats", &stats);
  m.def("_is_pinned", [](uintptr_t ptr) { return tpu_pinned_contains(reinterpret_cast<const void*>(ptr)); });
  m.def("_live_storages", [](int device) {
    // (address, bytes, has a buffer) of each live storage, oldest first.
    std::vector<std::tuple<uintptr_t, int64_t, bool>> live;
    tpu_storage_each_live(device, [](void* ctx, const tpu_storage* s) {
      static_cast<decltype(live)*>(ctx)->emplace_back(reinterpret_cast<uintptr_t>(s), s->nbytes, s->buf != nullptr);
    }, &live);
    return live;
  });
  m.def("_reset_stats", []() { tpu_stats_reset(); });
  m.def("_set_memory_fraction", [](int device, double fraction) {
    TPU_CHECK(tpu_storage_set_memory_fraction(tpu_eager_context_get(), device, fraction));
  });
  m.def("_memory_fraction", [](int device) { return tpu_storage_memory_fraction(device); });
  m.def("_progress_start", &progress_start);
  m.def("_progress_finish", &progress_finish, py::call_guard<py::gil_scoped_release>());
  m.def("_set_fallback_mode", [](const std::string& mode) {
    if (mode == "warn") set_fallback_mode(FallbackMode::kWarn);
    else if (mode == "error") set_fallback_mode(FallbackMode::kError);
    else if (mode == "silent") set_fallback_mode(FallbackMode::kSilent);
    else TORCH_CHECK_VALUE(false, "TORCHTPU_FALLBACK must be warn, error or silent, got '", mode, "'");
  });
  m.def("_set_decomposer", [](py::object fn) { set_decomposer(fn.ptr()); });
  m.def("_set_meta_functions", [](py::object fn, const std::vector<std::string>& names) {
    set_tpu_meta(fn.ptr(), names);
  });
  m.def("_set_dump_dir", [](const std::string& dir) { TPU_CHECK(tpu_eager_set_dump_dir(dir.c_str())); });
  m.def("_cache_clear", []() { TPU_CHECK(tpu_eager_cache_clear()); });
  m.def("_default_generator", [](int device) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(device))));
  });
  m.def("_rule_ops", []() {
    std::vector<std::string> names;
    for (int i = 0; i < tpu_lower_rule_count(); i++) {
      const tpu_lower_rule* r = tpu_lower_rule_at(i);
      for (int k = 0; k < 4 && r->names[k] != nullptr; k++) names.emplace_back(r->names[k]);
    }
    return names;
  });
  m.def("_unregistered_rules", []() { return unregistered_rule_names(); });
  m.def("_unboxed_rules", []() { return unboxed_rule_names(); });
  bind_graph(m);
  bind_compiles(m);
  init_distributed(m);
}
