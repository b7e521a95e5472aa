// torch.compile's path into C: a GraphBuilder turns an FX graph into one
// program by applying, node after node, the same C rules eager uses
// (eager/program.h); a GraphProgram runs it on the graph's input tensors.
// The Python backend (torchtpu/compile.py) walks the graph; this file only
// translates its node arguments.
#include <torch/extension.h>

#include <memory>
#include <string>
#include <vector>

#include "torch/dispatch.h"
#include "torch/generator.h"
#include "torch/tpu_torch.h"

extern "C" {
#include "eager/program.h"
}

namespace py = pybind11;

namespace torchtpu {
namespace {

// Python passes graph inputs as a list whose non-tensor entries (symbolic
// sizes, None) are None.
using Inputs = std::vector<std::optional<at::Tensor>>;

std::vector<at::Tensor> tensors_of(const Inputs& inputs) {
  std::vector<at::Tensor> out;
  out.reserve(inputs.size());
  for (const auto& t : inputs) out.push_back(t.has_value() ? *t : at::Tensor());
  return out;
}

// The graph's inputs described as a call: one tensor argument per input.
struct InputCall {
  std::vector<at::Tensor> tensors;
  std::vector<tpu_eager_arg> args;
  tpu_eager_call call{};

  InputCall(const std::vector<at::Tensor>& inputs, const std::vector<bool>& mutated) : tensors(inputs) {
    args.resize(inputs.size());
    c10::DeviceIndex device = -1;
    for (size_t i = 0; i < inputs.size(); i++) {
      tpu_eager_arg& a = args[i];
      a = tpu_eager_arg{};
      a.mutated = i < mutated.size() && mutated[i];
      const at::Tensor& t = inputs[i];
      if (!t.defined()) {
        a.lower.kind = TPU_ARG_NONE;
        continue;
      }
      TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1 || (t.device().is_cpu() && t.dim() == 0),
                  "a compiled tpu graph got an input on ", t.device());
      if (t.device().is_cpu()) {
        a.tensor.view.dtype = to_tpu(t.scalar_type());
        a.tensor.host_scalar = t.const_data_ptr();
      } else {
        if (device < 0) device = t.device().index();
        a.tensor = tensor_ref(t);
        TORCH_CHECK(a.tensor.storage != nullptr || t.numel() == 0,
                    "a compiled tpu graph got an input without data (a fake tensor?)");
      }
      a.lower.kind = TPU_ARG_TENSOR;
      a.lower.dtype = a.tensor.view.dtype;
      a.lower.rank = a.tensor.view.rank;
      a.lower.sizes = a.tensor.view.sizes;
    }
    call.op = nullptr;
    call.num_args = static_cast<int>(args.size());
    call.args = args.data();
    call.device = device < 0 ? current_device() : device;
  }
};

// Decoded arguments of one node, and the fetch function reading them.
struct NodeArgs {
  std::vector<tpu_lower_arg> args;
  std::vector<tpu_hlo_value> values;                    // per argument (tensors)
  std::vector<std::vector<tpu_hlo_value>> list_values;  // per argument (tensor lists)
  std::vector<std::vector<int64_t>> ints;
  std::vector<std::vector<double>> floats;
  std::vector<std::unique_ptr<bool[]>> bools;
  std::vector<std::string> strings;
  std::vector<std::vector<tpu_dtype_t>> item_dtypes;
  std::vector<std::vector<int>> item_ranks;
  std::vector<std::vector<const int64_t*>> item_sizes;
  std::vector<std::vector<int64_t>> sizes;  // per tensor argument

  static tpu_hlo_value fetch(tpu_lower_ctx* c, int arg, int item) {
    auto* self = static_cast<NodeArgs*>(c->user);
    if (item < 0) return self->values[arg];
    return self->list_values[arg][item];
  }
};

tpu_dtype_t dtype_of(py::handle h) {
  return to_tpu(reinterpret_cast<THPDtype*>(h.ptr())->scalar_type);
}

// An argument from Python: (kind, payload) as compile.py encodes it.
void decode(tpu_hlo_builder* b, const py::tuple& spec, size_t i, NodeArgs& na) {
  tpu_lower_arg& l = na.args[i];
  l = tpu_lower_arg{};
  std::string kind = spec[0].cast<std::string>();
  if (kind == "none") {
    l.kind = TPU_ARG_NONE;
  } else if (kind == "t") {
    tpu_hlo_value v = spec[1].cast<int>();
    const tpu_hlo_type* t = tpu_hlo_type_of(b, v);
    l.kind = TPU_ARG_TENSOR;
    l.dtype = t->dtype;
    l.rank = t->rank;
    na.sizes[i].assign(t->dims, t->dims + t->rank);
    l.sizes = na.sizes[i].data();
    na.values[i] = v;
  } else if (kind == "tl") {
    l.kind = TPU_ARG_TENSOR_LIST;
    for (py::handle item : spec[1].cast<py::list>()) {
      if (item.is_none()) {
        na.list_values[i].push_back(TPU_HLO_NONE);
        na.item_dtypes[i].push_back(TPU_INVALID);
        na.item_ranks[i].push_back(0);
        na.item_sizes[i].push_back(nullptr);
        continue;
      }
      tpu_hlo_value v = item.cast<int>();
      const tpu_hlo_type* t = tpu_hlo_type_of(b, v);
      na.list_values[i].push_back(v);
      na.item_dtypes[i].push_back(t->dtype);
      na.item_ranks[i].push_back(t->rank);
      na.item_sizes[i].push_back(t->dims);
    }
    l.n = static_cast<int>(na.list_values[i].size());
    l.item_dtypes = na.item_dtypes[i].data();
    l.item_ranks = na.item_ranks[i].data();
    l.item_sizes = na.item_sizes[i].data();
  } else if (kind == "scalar") {  // a Python number: a constant of the graph
    py::object v = spec[1];
    l.kind = TPU_ARG_SCALAR;
    l.is_const = true;
    if (py::isinstance<py::bool_>(v)) {
      l.dtype = TPU_BOOL;
      l.i = v.cast<bool>();
      l.f = static_cast<double>(l.i);
    } else if (py::isinstance<py::int_>(v)) {
      l.dtype = TPU_S64;
      l.i = v.cast<int64_t>();
      l.f = static_cast<double>(l.i);
    } else {
      l.dtype = TPU_F64;
      l.f = v.cast<double>();
      l.i = static_cast<int64_t>(l.f);
    }
  } else if (kind == "i") {
    l.kind = TPU_ARG_INT;
    l.i = spec[1].cast<int64_t>();
  } else if (kind == "il") {
    l.kind = TPU_ARG_INT_LIST;
    na.ints[i] = spec[1].cast<std::vector<int64_t>>();
    l.n = static_cast<int>(na.ints[i].size());
    l.ints = na.ints[i].data();
  } else if (kind == "f") {
    l.kind = TPU_ARG_FLOAT;
    l.f = spec[1].cast<double>();
  } else if (kind == "fl") {
    l.kind = TPU_ARG_FLOAT_LIST;
    na.floats[i] = spec[1].cast<std::vector<double>>();
    l.n = static_cast<int>(na.floats[i].size());
    l.floats = na.floats[i].data();
  } else if (kind == "b") {
    l.kind = TPU_ARG_BOOL;
    l.b = spec[1].cast<bool>();
  } else if (kind == "bl") {
    l.kind = TPU_ARG_BOOL_LIST;
    auto v = spec[1].cast<std::vector<bool>>();
    na.bools[i].reset(new bool[v.size() + 1]);
    for (size_t k = 0; k < v.size(); k++) na.bools[i][k] = v[k];
    l.n = static_cast<int>(v.size());
    l.bools = na.bools[i].get();
  } else if (kind == "s") {
    l.kind = TPU_ARG_STRING;
    na.strings[i] = spec[1].cast<std::string>();
    l.s = na.strings[i].c_str();
  } else if (kind == "dtype") {
    l.kind = TPU_ARG_DTYPE;
    l.dtype = dtype_of(spec[1]);
  } else {
    l.kind = TPU_ARG_OTHER;
  }
}

tpu_eager_out_meta out_meta(tpu_dtype_t dtype, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  tpu_eager_out_meta m{};
  check_rank(static_cast<int64_t>(sizes.size()));
  m.dtype = dtype;
  m.rank = static_cast<int>(sizes.size());
  for (int i = 0; i < m.rank; i++) {
    m.sizes[i] = sizes[i];
    m.strides[i] = strides[i];
  }
  return m;
}

class GraphProgram {
 public:
  GraphProgram(tpu_eager_entry* entry, std::vector<bool> mutated, std::string name)
      : entry_(entry), mutated_(std::move(mutated)), name_(std::move(name)) {}
  ~GraphProgram() { tpu_eager_entry_free(entry_); }

  // Runs on |inputs| (the same signature it was built for); returns the new
  // outputs by index (None where the graph output is not a new tensor).
  py::list run(const Inputs& inputs, int num_outputs) {
    InputCall ic(tensors_of(inputs), mutated_);
    std::vector<at::Tensor> outs(num_outputs);
    std::vector<tpu_storage*> storages(num_outputs, nullptr);
    {
      py::gil_scoped_release release;
      c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, ic.call.device));
      if (tpu_eager_entry_uses_rng(entry_)) {
        at::Generator gen = default_generator(ic.call.device);
        std::lock_guard<std::mutex> lock(gen.mutex());
        auto seed_offset = gen.get<TpuGenerator>()->next(1);
        ic.call.rng_seed = seed_offset.first;
        ic.call.rng_offset = seed_offset.second;
      }
      for (int i = 0; i < num_outputs; i++) {
        const tpu_eager_out_meta* m = tpu_eager_entry_meta(entry_, i);
        if (m->dtype == TPU_INVALID) continue;
        outs[i] = at::detail::empty_strided_generic(
            at::IntArrayRef(m->sizes, m->rank), at::IntArrayRef(m->strides, m->rank), allocator(),
            c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), to_torch(m->dtype));
        storages[i] = storage_of(outs[i]);
      }
      TPU_CHECK(tpu_eager_execute(entry_, &ic.call, storages.data()));
    }
    py::list result;
    for (auto& t : outs) result.append(t.defined() ? py::cast(t) : py::none());
    return result;
  }

 private:
  tpu_eager_entry* entry_;
  std::vector<bool> mutated_;
  std::string name_;
};

class GraphBuilder {
 public:
  GraphBuilder(const std::string& name, const Inputs& inputs, const std::vector<bool>& mutated)
      : name_(name), inputs_(tensors_of(inputs), mutated), mutated_(mutated) {
    runtime();
    TPU_CHECK(tpu_program_new(tpu_eager_context_get(), &inputs_.call, name_.c_str(), &program_));
  }
  // An exporting builder (torchtpu.export_stablehlo): its inputs are
  // module parameters of the given (dtype, sizes), in order.
  GraphBuilder(const std::string& name, const py::list& input_types) : name_(name), inputs_({}, {}) {
    runtime();
    TPU_CHECK(tpu_program_new_export(name_.c_str(), &program_));
    exporting_flag_ = true;
    for (py::handle h : input_types) {
      auto spec = h.cast<py::tuple>();
      auto sizes = spec[1].cast<std::vector<int64_t>>();
      check_rank(static_cast<int64_t>(sizes.size()));
      tpu_hlo_type t = tpu_hlo_make_type(dtype_of(spec[0]), static_cast<int>(sizes.size()), sizes.data());
      export_params_.push_back(tpu_program_export_param(program_, &t));
    }
  }
  ~GraphBuilder() { tpu_program_free(program_); }

  int input(int i) {
    if (exporting()) {
      TORCH_CHECK(i >= 0 && i < static_cast<int>(export_params_.size()), "no exported input ", i);
      return export_params_[i];
    }
    return tpu_program_tensor(program_, i, -1);
  }

  // An exporting builder's module text returning |values| (each converted
  // to its dtype), and how many kinds of runtime checks it leaves out.
  py::tuple export_text(const std::vector<int>& values, const py::list& dtypes) {
    TORCH_CHECK(exporting(), "export_text: not an exporting builder");
    tpu_hlo_builder* b = tpu_program_builder(program_);
    std::vector<tpu_hlo_value> results;
    for (size_t i = 0; i < values.size(); i++)
      results.push_back(tpu_hlo_convert(b, values[i], dtype_of(dtypes[i])));
    char* text = nullptr;
    int checks = 0;
    TPU_CHECK(tpu_program_export_finish(program_, results.data(), static_cast<int>(results.size()), &text, &checks));
    std::string out(text);
    free(text);
    return py::make_tuple(out, checks);
  }

  // Applies the rule of |op| ("add.Tensor"); |outs| are (dtype, sizes) per
  // output, or None for an output nobody uses and the rule need not make.
  std::vector<int> apply(const std::string& op, const py::list& args, const py::list& outs, py::object common) {
    const tpu_lower_rule* rule = tpu_lower_find(op.c_str());
    TORCH_CHECK(rule != nullptr, "torchtpu has no lowering for ", op);
    tpu_hlo_builder* b = tpu_program_builder(program_);
    size_t n = args.size();
    NodeArgs na;
    na.args.resize(n);
    na.values.assign(n, TPU_HLO_NONE);
    na.list_values.resize(n);
    na.ints.resize(n);
    na.floats.resize(n);
    na.bools.resize(n);
    na.strings.resize(n);
    na.item_dtypes.resize(n);
    na.item_ranks.resize(n);
    na.item_sizes.resize(n);
    na.sizes.resize(n);
    for (size_t i = 0; i < n; i++) decode(b, args[i].cast<py::tuple>(), i, na);
    std::vector<tpu_hlo_type> types;
    for (py::handle o : outs) {
      if (o.is_none()) {
        types.push_back(tpu_hlo_make_type(TPU_INVALID, 0, nullptr));
        continue;
      }
      auto spec = o.cast<py::tuple>();
      auto sizes = spec[1].cast<std::vector<int64_t>>();
      check_rank(static_cast<int64_t>(sizes.size()));
      types.push_back(tpu_hlo_make_type(dtype_of(spec[0]), static_cast<int>(sizes.size()), sizes.data()));
    }
    std::vector<tpu_hlo_value> values(types.size(), TPU_HLO_NONE);
    tpu_dtype_t common_dtype = common.is_none() ? TPU_INVALID : dtype_of(common);
    std::string full = "aten::" + op;
    tpu_program_apply_args apply = {rule, full.c_str(), static_cast<int>(n), na.args.data(), NodeArgs::fetch, &na,
                                    common_dtype, matmul_precision(), static_cast<int>(types.size()), types.data()};
    TPU_CHECK(tpu_program_apply(program_, &apply, values.data(), nullptr));
    return std::vector<int>(values.begin(), values.end());
  }

  // The value of a graph input read with another geometry (as_strided on an
  // input views its storage, not its contiguous value).
  void write(int i, int value, bool donate) { tpu_program_write(program_, i, -1, value, donate, false); }

  void output(int index, int value, py::object dtype, const std::vector<int64_t>& sizes,
              const std::vector<int64_t>& strides) {
    tpu_eager_out_meta m = out_meta(dtype_of(dtype), sizes, strides);
    tpu_program_output(program_, index, value, &m);
  }

  std::unique_ptr<GraphProgram> finish() {
    TORCH_CHECK(!exporting(), "finish: an exporting builder has no program to run (export_text)");
    tpu_eager_entry* entry = nullptr;
    {
      py::gil_scoped_release release;
      TPU_CHECK(tpu_program_finish(program_, &entry));
    }
    return std::make_unique<GraphProgram>(entry, mutated_, name_);
  }

  static tpu_hlo_precision_t matmul_precision() {
    switch (at::globalContext().float32MatmulPrecision()) {
      case at::Float32MatmulPrecision::HIGHEST: return TPU_HLO_PRECISION_HIGHEST;
      case at::Float32MatmulPrecision::HIGH: return TPU_HLO_PRECISION_HIGH;
      default: return TPU_HLO_PRECISION_DEFAULT;
    }
  }

 private:
  std::string name_;
  InputCall inputs_;
  std::vector<bool> mutated_;
  tpu_program* program_ = nullptr;
  std::vector<tpu_hlo_value> export_params_;
  bool exporting() const { return exporting_flag_; }
  bool exporting_flag_ = false;
};

// What a compiled graph program depends on beyond the graph: every input's
// dtype, sizes, strides, offset, storage size and buffer type, and which inputs
// share a storage. Equal signatures can run the same program.
py::bytes signature(const Inputs& inputs) {
  std::vector<int64_t> sig;
  std::vector<const void*> storages;
  for (const at::Tensor& t : tensors_of(inputs)) {
    if (!t.defined()) {
      sig.push_back(-1);
      continue;
    }
    sig.push_back(static_cast<int64_t>(t.scalar_type()));
    sig.push_back(t.dim());
    for (int64_t s : t.sizes()) sig.push_back(s);
    if (t.device().type() != c10::DeviceType::PrivateUse1) {
      sig.push_back(-2);
      continue;
    }
    for (int64_t s : t.strides()) sig.push_back(s);
    sig.push_back(t.storage_offset());
    sig.push_back(static_cast<int64_t>(t.is_conj()) | (static_cast<int64_t>(t.is_neg()) << 1));
    const void* impl = t.storage().unsafeGetStorageImpl();
    int64_t shared = -1;
    for (size_t k = 0; k < storages.size(); k++)
      if (storages[k] == impl) shared = static_cast<int64_t>(k);
    storages.push_back(impl);
    sig.push_back(shared);
    tpu_storage* s = storage_of(t);
    TPU_CHECK(tpu_storage_settle(s, TPU_CUT_GRAPH));  // the buffer's type is part of the signature
    sig.push_back(s == nullptr ? 0 : s->nbytes);
    if (s == nullptr || s->buf == nullptr) {
      sig.push_back(-1);
      continue;
    }
    sig.push_back(s->type.dtype);
    sig.push_back(s->type.rank);
    sig.insert(sig.end(), s->type.dims, s->type.dims + s->type.rank);
  }
  return py::bytes(reinterpret_cast<const char*>(sig.data()), sig.size() * sizeof(int64_t));
}

// A StableHLO module compiled by the plugin and run on host tensors, as any
// PJRT user runs one (torchtpu.load_stablehlo): the module's arguments are
// buffers made from the tensors, its results copied back; nothing of the
// storage model or the eager caches takes part.
class ModuleExecutable {
 public:
  explicit ModuleExecutable(const std::string& module) {
    tpu_runtime* rt = runtime();
    tpu_compile_options options;
    tpu_compile_options_init(&options);
    options.max_rank = TPU_HLO_MAX_RANK;
    py::gil_scoped_release release;
    TPU_CHECK(tpu_executable_compile(rt, module.data(), module.size(), &options, &exe_));
  }
  ~ModuleExecutable() { tpu_executable_destroy(runtime(), exe_); }

  size_t num_outputs() const { return tpu_executable_num_outputs(exe_); }

  // |inputs|: contiguous CPU tensors, one per module argument; |outs|:
  // (dtype, sizes) per result.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs, const py::list& outs) {
    tpu_runtime* rt = runtime();
    size_t n = tpu_executable_num_outputs(exe_);
    TORCH_CHECK(outs.size() == n, "the module has ", n, " results, ", outs.size(), " were described");
    std::vector<at::Tensor> results;
    std::vector<tpu_dtype_t> dtypes;
    for (py::handle o : outs) {
      auto spec = o.cast<py::tuple>();
      auto sizes = spec[1].cast<std::vector<int64_t>>();
      dtypes.push_back(dtype_of(spec[0]));
      results.push_back(at::empty(sizes, at::TensorOptions().dtype(to_torch(dtypes.back()))));
    }
    std::vector<tpu_buffer*> args(inputs.size(), nullptr), bufs(n, nullptr);
    tpu_status_t st = nullptr;
    {
      py::gil_scoped_release release;
      c10::DeviceIndex device = current_device();
      for (size_t i = 0; i < inputs.size() && st == nullptr; i++) {
        const at::Tensor& t = inputs[i];
        if (!t.device().is_cpu() || !t.is_contiguous()) {
          st = tpu_status_new(TPU_ERR_VALUE, "module argument %zu: expected a contiguous CPU tensor", i);
          break;
        }
        std::vector<int64_t> dims(t.sizes().begin(), t.sizes().end());
        st = tpu_buffer_from_host(rt, device, t.const_data_ptr(), to_tpu(t.scalar_type()), dims.data(),
                                  static_cast<int>(dims.size()), &args[i]);
      }
      if (st == nullptr)
        st = tpu_executable_execute(rt, exe_, device, args.data(), args.size(), nullptr, false, bufs.data());
      for (size_t i = 0; i < n && st == nullptr; i++)
        st = tpu_buffer_to_host(rt, bufs[i], results[i].data_ptr(), static_cast<size_t>(results[i].nbytes()));
      for (tpu_buffer* buf : args) tpu_buffer_destroy(rt, buf);
      for (tpu_buffer* buf : bufs) tpu_buffer_destroy(rt, buf);
    }
    TPU_CHECK(st);
    return results;
  }

 private:
  tpu_executable* exe_ = nullptr;
};

}  // namespace

void bind_graph(py::module& m) {
  py::class_<ModuleExecutable>(m, "ModuleExecutable")
      .def(py::init<const std::string&>())
      .def("num_outputs", &ModuleExecutable::num_outputs)
      .def("run", &ModuleExecutable::run);
  m.def("_export_builder", [](const std::string& name, const py::list& input_types) {
    return std::make_unique<GraphBuilder>(name, input_types);
  });
  py::class_<GraphProgram>(m, "GraphProgram").def("run", &GraphProgram::run);
  py::class_<GraphBuilder>(m, "GraphBuilder")
      .def(py::init<const std::string&, const Inputs&, const std::vector<bool>&>())
      .def("input", &GraphBuilder::input)
      .def("apply", &GraphBuilder::apply)
      .def("write", &GraphBuilder::write)
      .def("output", &GraphBuilder::output)
      .def("finish", &GraphBuilder::finish)
      .def("export_text", &GraphBuilder::export_text);
  m.def("_graph_signature", &signature);
  m.def("_has_rule", [](const std::string& op) { return tpu_lower_find(op.c_str()) != nullptr; });
  m.def("_foreach_item", [](const std::string& name, const std::string& overload) -> py::object {
    auto item = foreach_item(c10::OperatorName(name, overload));
    if (!item) return py::none();
    return py::make_tuple(item->first.name, item->first.overload_name, item->second);
  });
}

}  // namespace torchtpu
