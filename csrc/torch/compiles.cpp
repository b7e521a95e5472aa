// The compile log's Python face (base/compiles.c keeps it): the report
// torchtpu.compiles() reads, the warning of an op or compiled function past
// the compile limit (raised as a Python warning by the call that compiled),
// and TORCHTPU_LOG=compiles: a line on stderr for each program built,
// compiled or loaded from the disk cache, as it happens.
#include <pybind11/pybind11.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "torch/tpu_torch.h"

extern "C" {
#include "base/compiles.h"
}

namespace py = pybind11;

namespace torchtpu {

void warn_compiles() {
  while (char* w = tpu_compiles_take_warning()) {
    std::string text(w);
    free(w);
    TORCH_WARN(text);
  }
}

namespace {

void log_compile(const char* owner, const char* signature, tpu_compile_event ev, double seconds) {
  char secs[32];
  snprintf(secs, sizeof secs, "%.3f", seconds);
  std::string line = "torchtpu: ";
  if (ev == TPU_COMPILE_BUILT) line += "built ";
  else line += ev == TPU_COMPILE_LOADED ? "loaded " : "compiled ";
  line += owner;
  line += " (";
  line += signature;
  line += ")";
  if (ev == TPU_COMPILE_BUILT) line += ", compiled when it runs alone";
  else line += std::string(" in ") + secs + " s" + (ev == TPU_COMPILE_LOADED ? " from the disk cache" : "");
  line += "\n";
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace

void bind_compiles(py::module& m) {
  m.def("_compiles", []() {
    py::list out;
    tpu_compiles_each(
        [](void* ctx, const tpu_compiles_entry* e) {
          py::list sigs;
          for (int i = 0; i < e->num_kept; i++) sigs.append(e->signatures[i]);
          static_cast<py::list*>(ctx)->append(
              py::make_tuple(e->owner, e->num_signatures, e->compiled, e->loaded, e->seconds, sigs));
        },
        &out);
    return out;
  });
  m.def("_compiles_reset", []() { tpu_compiles_reset(); });
  m.def("_compiles_set_owner", [](const std::string& prefix, const std::string& owner) {
    tpu_compiles_set_owner(prefix.c_str(), owner.c_str());
  });
  m.def("_compiles_set_limit", [](int n) { tpu_compiles_set_limit(n); });
  m.def("_compiles_limit", []() { return tpu_compiles_limit(); });
  m.def("_compiles_log", [](bool on) { tpu_compiles_set_listener(on ? &log_compile : nullptr); });
  m.def("_compiles_warnings", []() {
    py::list out;
    while (char* w = tpu_compiles_take_warning()) {
      out.append(std::string(w));
      free(w);
    }
    return out;
  });
}

}  // namespace torchtpu
