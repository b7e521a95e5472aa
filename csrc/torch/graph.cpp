// torch.compile's path into C: a GraphBuilder turns an FX graph into one
// program by applying, node after node, the same C rules eager uses
// (eager/program.h); a GraphProgram runs it on the graph's input tensors.
// The Python walker (torchtpu/_fx_program.py) walks the graph and passes each
// node's argument values; this file describes them for the rule by the op's
// schema, as the eager kernel describes its calls (describe.h).
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "torch/call.h"
#include "torch/describe.h"
#include "torch/dispatch.h"
#include "torch/kernel.h"
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
      describe_tensor(t, device, a.tensor);
      describe_tensor_arg(a.tensor, a.lower);
      TORCH_CHECK(a.tensor.storage != nullptr || a.tensor.host_scalar != nullptr || t.numel() == 0 || !t.defined(),
                  "a compiled tpu graph got an input without data (a fake tensor?)");
    }
    call.op = nullptr;
    call.num_args = static_cast<int>(args.size());
    call.args = args.data();
    call.device = device < 0 ? current_device() : device;
    call.precision = matmul_precision();  // keyed: the graph's matmuls are built with it
  }
};

// A value of the program being built, as Python holds it: what
// GraphBuilder.input and .apply return and its other methods take.
struct GraphValue {
  tpu_hlo_value v;
};

py::object wrap(tpu_hlo_value v) { return v == TPU_HLO_NONE ? py::none() : py::cast(GraphValue{v}); }

tpu_dtype_t dtype_of(py::handle h) {
  return held_dtype(reinterpret_cast<THPDtype*>(h.ptr())->scalar_type);
}

// The arguments of an op ("add.Tensor"): each one's kind and type.
struct OpArgs {
  std::vector<ArgType> kinds;
  std::vector<c10::TypePtr> types;
};

const OpArgs& op_args(const std::string& op) {
  static std::unordered_map<std::string, OpArgs> cache;
  auto it = cache.find(op);
  if (it != cache.end()) return it->second;
  auto dot = op.find('.');
  auto handle = c10::Dispatcher::singleton().findSchema(
      {"aten::" + op.substr(0, dot), dot == std::string::npos ? "" : op.substr(dot + 1)});
  TORCH_CHECK(handle.has_value(), "no operator aten::", op);
  OpArgs args;
  for (const c10::Argument& a : handle->schema().arguments()) {
    args.kinds.push_back(classify(a));
    args.types.push_back(a.real_type());
  }
  return cache.emplace(op, std::move(args)).first->second;
}

// The arguments of one node described for its rule (describe.h), and the
// fetch function reading its tensors.
struct NodeArgs {
  std::vector<tpu_lower_arg> args;
  std::vector<c10::IValue> ivalues;                     // per argument: what a string points into
  std::vector<tpu_hlo_value> values;                    // per argument (tensors)
  std::vector<std::vector<tpu_hlo_value>> list_values;  // per argument (tensor lists)
  std::vector<std::vector<tpu_dtype_t>> item_dtypes;
  std::vector<std::vector<int>> item_ranks;
  std::vector<std::vector<const int64_t*>> item_sizes;
  std::vector<std::vector<int64_t>> sizes;  // per tensor argument
  ArgLists lists;
  std::vector<int> source;  // per argument the rule sees: the described one

  explicit NodeArgs(size_t n)
      : args(n), ivalues(n), values(n, TPU_HLO_NONE), list_values(n), item_dtypes(n), item_ranks(n),
        item_sizes(n), sizes(n) {
    lists.reset(n);
  }

  static tpu_hlo_value fetch(tpu_lower_ctx* c, int arg, int item) {
    auto* self = static_cast<NodeArgs*>(c->user);
    arg = self->source[arg];
    if (item < 0) return self->values[arg];
    return self->list_values[arg][item];
  }
};

// A Python number (bool, int, float, complex) as an IValue; None if |h| is
// none.
std::optional<c10::IValue> number(py::handle h) {
  if (py::isinstance<py::bool_>(h)) return c10::IValue(h.cast<bool>());
  if (py::isinstance<py::int_>(h)) return c10::IValue(h.cast<int64_t>());
  if (py::isinstance<py::float_>(h)) return c10::IValue(h.cast<double>());
  if (PyComplex_Check(h.ptr()))
    return c10::IValue(c10::complex<double>(PyComplex_RealAsDouble(h.ptr()), PyComplex_ImagAsDouble(h.ptr())));
  return std::nullopt;
}

// Argument |i| of kind |kind| from the value compile.py passes: a
// GraphValue (a tensor), a list of them and None (a tensor list), a Python
// number where the schema says Tensor (a wrapped number: a constant), or the
// argument's own Python value.
void describe_arg(tpu_hlo_builder* b, py::handle h, size_t i, ArgType kind, const c10::TypePtr& type,
                  unsigned rule_flags, NodeArgs& na) {
  tpu_lower_arg& l = na.args[i];
  l = tpu_lower_arg{};
  if (h.is_none()) {
    l.kind = TPU_ARG_NONE;
  } else if (kind == ArgType::kTensor) {
    if (py::isinstance<GraphValue>(h)) {
      tpu_hlo_value v = h.cast<GraphValue>().v;
      const tpu_hlo_type* t = tpu_hlo_type_of(b, v);
      l.kind = TPU_ARG_TENSOR;
      l.dtype = t->dtype;
      l.rank = t->rank;
      na.sizes[i].assign(t->dims, t->dims + t->rank);
      l.sizes = na.sizes[i].data();
      na.values[i] = v;
    } else if (auto n = number(h)) {
      describe_scalar(*n, l, /*constant=*/true);
    } else {
      l.kind = TPU_ARG_OTHER;
    }
  } else if (kind == ArgType::kTensorList) {
    l.kind = TPU_ARG_TENSOR_LIST;
    for (py::handle item : h.cast<py::list>()) {
      if (item.is_none()) {
        na.list_values[i].push_back(TPU_HLO_NONE);
        na.item_dtypes[i].push_back(TPU_INVALID);
        na.item_ranks[i].push_back(0);
        na.item_sizes[i].push_back(nullptr);
        continue;
      }
      tpu_hlo_value v = item.cast<GraphValue>().v;
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
  } else {
    try {
      na.ivalues[i] = torch::jit::toIValue(h, type);
    } catch (const std::exception&) {
      l.kind = TPU_ARG_OTHER;  // not a value of its type: no rule reads it
      return;
    }
    c10::DeviceIndex device = -1;
    describe_value(kind, na.ivalues[i], i, rule_flags, Describe::kGraph, l, na.lists, &device);
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
  GraphProgram(const GraphProgram&) = delete;  // owns its C handle
  GraphProgram& operator=(const GraphProgram&) = delete;

  // Runs on |inputs| (the same signature it was built for); returns the new
  // outputs by index (None where the graph output is not a new tensor).
  py::list run(const Inputs& inputs, int num_outputs) {
    InputCall ic(tensors_of(inputs), mutated_);
    std::vector<at::Tensor> outs;
    {
      py::gil_scoped_release release;
      c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, ic.call.device));
      outs = run_entry(entry_, ic.call, num_outputs, tpu_eager_entry_uses_rng(entry_), at::Generator(),
                       [](int) { return false; }, RunMode::kExecute);
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
  GraphBuilder(const GraphBuilder&) = delete;  // owns its C handle
  GraphBuilder& operator=(const GraphBuilder&) = delete;

  py::object input(int i) {
    if (exporting()) {
      TORCH_CHECK(i >= 0 && i < static_cast<int>(export_params_.size()), "no exported input ", i);
      return wrap(export_params_[i]);
    }
    return wrap(tpu_program_tensor(program_, i, -1));
  }

  // An exporting builder's module text returning |values| (each converted
  // to its dtype), and how many kinds of runtime checks it leaves out.
  py::tuple export_text(const std::vector<GraphValue>& values, const py::list& dtypes) {
    TORCH_CHECK(exporting(), "export_text: not an exporting builder");
    tpu_hlo_builder* b = tpu_program_builder(program_);
    std::vector<tpu_hlo_value> results;
    for (size_t i = 0; i < values.size(); i++)
      results.push_back(tpu_hlo_convert(b, values[i].v, dtype_of(dtypes[i])));
    char* text = nullptr;
    int checks = 0;
    TPU_CHECK(tpu_program_export_finish(program_, results.data(), static_cast<int>(results.size()), &text, &checks));
    std::string out(text);
    free(text);
    return py::make_tuple(out, checks);
  }

  // Applies rule |rule| ("add.Tensor") to |values|, the arguments of op
  // |op| (the rule's own when empty) as describe_arg takes them, less
  // argument |drop| (>= 0: one the rule does not take). |outs| are (dtype,
  // sizes) per output, or None for an output nobody uses and the rule need
  // not make. Returns the outputs' values (None where not made).
  py::list apply(const std::string& rule_name, const py::list& values, const py::list& outs, py::object common,
                 const std::string& op, int drop) {
    const tpu_lower_rule* rule = tpu_lower_find(rule_name.c_str());
    TORCH_CHECK(rule != nullptr, "torchtpu has no lowering for ", rule_name);
    tpu_hlo_builder* b = tpu_program_builder(program_);
    const OpArgs& schema = op_args(op.empty() ? rule_name : op);
    size_t n = values.size();
    TORCH_CHECK(n <= schema.kinds.size(), op, ": ", n, " arguments for a schema of ", schema.kinds.size());
    NodeArgs na(n);
    for (size_t i = 0; i < n; i++) describe_arg(b, values[i], i, schema.kinds[i], schema.types[i], rule->flags, na);
    for (size_t i = 0; i < n; i++) patch_lists(na.lists, i, na.args[i]);
    std::vector<tpu_lower_arg> args;
    for (size_t i = 0; i < n; i++) {
      if (static_cast<int>(i) == drop) continue;
      na.source.push_back(static_cast<int>(i));
      args.push_back(na.args[i]);
    }
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
    std::vector<tpu_hlo_value> results(types.size(), TPU_HLO_NONE);
    tpu_dtype_t common_dtype = common.is_none() ? TPU_INVALID : dtype_of(common);
    std::string full = "aten::" + rule_name;
    tpu_program_apply_args apply = {rule, full.c_str(), static_cast<int>(args.size()), args.data(), NodeArgs::fetch,
                                    &na, common_dtype, matmul_precision(), static_cast<int>(types.size()),
                                    types.data()};
    TPU_CHECK(tpu_program_apply(program_, &apply, results.data(), nullptr));
    py::list out;
    for (tpu_hlo_value v : results) out.append(wrap(v));
    return out;
  }

  // The whole storage input |i| views, as a 1-D value of its dtype (as_strided
  // on an input reads its storage, not its contiguous value); None when
  // exporting (an exported input is a value) or without a storage.
  py::object input_storage(int i) {
    if (exporting()) return py::none();
    tpu_hlo_value v = tpu_program_tensor_storage(program_, i);
    return v == TPU_HLO_NONE ? py::none() : wrap(v);
  }

  void write(int i, GraphValue value, bool donate) { tpu_program_write(program_, i, -1, value.v, donate, false); }

  void output(int index, GraphValue value, py::object dtype, const std::vector<int64_t>& sizes,
              const std::vector<int64_t>& strides) {
    tpu_eager_out_meta m = out_meta(dtype_of(dtype), sizes, strides);
    tpu_program_output(program_, index, value.v, &m);
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

 private:
  std::string name_;
  InputCall inputs_;
  std::vector<bool> mutated_;
  tpu_program* program_ = nullptr;
  std::vector<tpu_hlo_value> export_params_;
  bool exporting() const { return exporting_flag_; }
  bool exporting_flag_ = false;
};

// What a compiled graph program depends on beyond the graph: its inputs
// keyed as one call's arguments by the eager key builder (dtype, sizes,
// strides, offset, storage size and buffer type, shared storages), and the
// matmul precision. Equal signatures can run the same program.
py::bytes signature(const Inputs& inputs) {
  InputCall ic(tensors_of(inputs), {});
  return py::bytes(call_key(ic.call));
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
    TPU_CHECK(tpu_status_annotate(tpu_executable_compile(rt, module.data(), module.size(), &options, &exe_),
                                  "compiling a StableHLO module"));
  }
  ~ModuleExecutable() { tpu_executable_destroy(runtime(), exe_); }
  ModuleExecutable(const ModuleExecutable&) = delete;  // owns its C handle
  ModuleExecutable& operator=(const ModuleExecutable&) = delete;

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
        st = tpu_status_annotate(
            tpu_executable_execute(rt, exe_, device, args.data(), args.size(), nullptr, false, bufs.data()),
            "running a StableHLO module");
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
  py::class_<GraphValue>(m, "GraphValue");
  py::class_<GraphProgram>(m, "GraphProgram").def("run", &GraphProgram::run);
  py::class_<GraphBuilder>(m, "GraphBuilder")
      .def(py::init<const std::string&, const Inputs&, const std::vector<bool>&>())
      .def("input", &GraphBuilder::input)
      .def("input_storage", &GraphBuilder::input_storage)
      .def("apply", &GraphBuilder::apply, py::arg("rule"), py::arg("values"), py::arg("outs"), py::arg("common"),
           py::arg("op") = "", py::arg("drop") = -1)
      .def("write", &GraphBuilder::write)
      .def("output", &GraphBuilder::output)
      .def("finish", &GraphBuilder::finish)
      .def("export_text", &GraphBuilder::export_text);
  m.def("_graph_signature", &signature);
  m.def("_promoting_args", [](const std::string& name, const std::string& overload) {
    auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
    TORCH_CHECK(handle.has_value(), "no operator ", name, ".", overload);
    OpInfo info;
    describe_args(handle->schema(), info);
    return info.promotes;
  });
  m.def("_has_rule", [](const std::string& op) { return tpu_lower_find(op.c_str()) != nullptr; });
  m.def(
      "_foreach_item",
      [](const std::string& name, const std::string& overload, bool lowered) -> py::object {
        auto item = foreach_item(c10::OperatorName(name, overload), lowered);
        if (!item) return py::none();
        return py::make_tuple(item->first.name, item->first.overload_name, item->second);
      },
      py::arg("name"), py::arg("overload"), py::arg("lowered") = true);
  // The dtype eager's kernel promotes these operands to (tensors, fake ones
  // too, and Python numbers; others are skipped), None without any or where
  // they have none (float8 with float32: the op's own checks say so): one
  // implementation of PyTorch's type promotion for both paths.
  m.def("_promoted_dtype", [](const py::list& operands) -> py::object {
    std::vector<c10::IValue> ivs;  // a number promotes by its kind alone
    for (py::handle h : operands) {
      if (THPVariable_Check(h.ptr())) ivs.emplace_back(THPVariable_Unpack(h.ptr()));
      else if (PyBool_Check(h.ptr())) ivs.emplace_back(c10::Scalar(false));
      else if (PyLong_Check(h.ptr())) ivs.emplace_back(c10::Scalar(int64_t{0}));
      else if (PyFloat_Check(h.ptr())) ivs.emplace_back(c10::Scalar(0.0));
      else if (PyComplex_Check(h.ptr())) ivs.emplace_back(c10::Scalar(c10::complex<double>(0, 0)));
    }
    at::ScalarType t = at::ScalarType::Undefined;
    try {
      t = promoted_type(std::vector<bool>(ivs.size(), true), ivs);
    } catch (const c10::Error&) {
      return py::none();
    }
    if (t == at::ScalarType::Undefined) return py::none();
    return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(t)));
  });
}

}  // namespace torchtpu
