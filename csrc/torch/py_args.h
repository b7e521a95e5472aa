// A boxed call's arguments as Python sees them, for the glue that hands a
// call to Python (tpu's meta functions, the decompositions).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/utils/pybind.h>

#include <utility>

namespace torchtpu {

// |ivs| (the call's arguments, in |schema|'s order) as Python's (args,
// kwargs). An IValue holds a ScalarType, Layout or MemoryFormat as an int,
// which Python code would take for a number (`a.to(7)` is a device index):
// the schema says which they are, and they become torch.dtype,
// torch.layout and torch.memory_format. The caller holds the GIL.
std::pair<pybind11::tuple, pybind11::dict> py_args(const c10::FunctionSchema& schema,
                                                    c10::ArrayRef<c10::IValue> ivs);

}  // namespace torchtpu
