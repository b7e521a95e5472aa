// The one description of an op's arguments for its rule, keyed by the op's
// schema: each argument's ArgType (classify) says how its value becomes a
// tpu_lower_arg. The eager kernel (dispatch.cpp) describes the dispatcher's
// values with it, compiled graphs (graph.cpp) the values compile.py passes;
// only tensors differ (storages and views in eager, program values in a
// graph), and where a number goes (a runtime operand in eager, unless the
// rule folds it; a constant of a graph's program).
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>

#include <vector>

#include "torch/dispatch.h"

namespace torchtpu {

// The kind of a schema argument.
ArgType classify(const c10::Argument& arg);

// Where a described call's lists live: their items are appended here and
// the arguments point into them once nothing more is added (patch_lists).
struct ArgLists {
  std::vector<int64_t> ints;  // int lists, and Scalar[] items of an int list
  std::vector<double> floats;
  std::vector<uint8_t> bools;
  std::vector<tpu_dtype_t> scalar_dtypes;  // Scalar[] items' types
  // Per argument: where its list starts in the vector of its kind (a
  // Scalar[]: its types; |values|, its numbers in ints or floats).
  struct Span {
    size_t begin = 0, values = 0;
  };
  c10::SmallVector<Span, 8> spans;
  void reset(size_t num_args) { spans.assign(num_args, Span{}); }
};

// Who the description is for: an eager call, whose Python numbers are
// runtime operands unless its rule folds them (TPU_RULE_CONST_SCALARS,
// TPU_RULE_RUNTIME_FLOATS), or a graph's program, whose numbers are constants.
enum class Describe { kEager, kGraph };

// Describes tensor |t| into |r|: a tpu tensor as its storage box and view,
// a 0-dim CPU tensor as a host scalar, an undefined one as TPU_INVALID. The
// tpu tensors of one call share a device (|device|: -1 until the first);
// any other tensor raises PyTorch's device-mismatch error.
void describe_tensor(const at::Tensor& t, c10::DeviceIndex& device, tpu_tensor_ref& r);
// A described tensor |r| as a rule's argument (pointing into |r|).
void describe_tensor_arg(const tpu_tensor_ref& r, tpu_lower_arg& l);

// A Python number as a rule's scalar (|constant|: its value is known).
void describe_scalar(const c10::IValue& v, tpu_lower_arg& l, bool constant);

// Describes argument |i|, a value |v| of kind |type| that is no tensor (nor
// None), into |l|: numbers, ints, floats, bools, their lists, strings,
// dtypes, enums (layout, memory format, device: ints); kOther is
// TPU_ARG_OTHER. A device argument on tpu sets |*device| when it is unset.
void describe_value(ArgType type, const c10::IValue& v, size_t i, unsigned rule_flags, Describe who,
                    tpu_lower_arg& l, ArgLists& lists, c10::DeviceIndex* device);

// Points argument |i|'s list (if it has one) into |lists|: after the last
// describe_value, when the vectors stop growing.
void patch_lists(const ArgLists& lists, size_t i, tpu_lower_arg& l);

}  // namespace torchtpu
