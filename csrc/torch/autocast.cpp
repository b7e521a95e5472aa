// torch.autocast("tpu"): mixed precision on the tpu device, the
// AutocastPrivateUse1 dispatch key. PyTorch leaves this key empty for an
// out-of-tree device, so without these registrations every op inside an
// autocast region fails to dispatch.
//
// The policy is PyTorch's shared one (the op lists of ATen/autocast_mode.h,
// which CUDA and XPU register): matmuls, convolutions, RNN cells and
// attention run in the autocast dtype; ops that lose range or precision in
// half types (exp, log, pow, norms, softmax, reductions, losses) run in
// float32; ops mixing dtypes run at the widest; every other op passes
// through unchanged. A model autocast on tpu computes in the dtypes it would
// on a GPU, with one addition from PyTorch's CPU policy: the CTC loss runs in
// float32 (CUDA's and CPU's kernels take no half types, and the shared list
// leaves it out). The default dtype is PyTorch's for the device (float16);
// torch.autocast("tpu", dtype=torch.bfloat16) selects bfloat16.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torchtpu {
namespace {

// binary_cross_entropy is refused under autocast, with PyTorch's message.
at::Tensor binary_cross_entropy_refused(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                        int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
              "safe to autocast.");
}

}  // namespace
}  // namespace torchtpu

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  using namespace at::autocast;
  using at::IntArrayRef, at::Scalar, at::ScalarType, at::Tensor;  // named unqualified in the lists
#if __has_include(<ATen/core/Dimname.h>)
  using at::DimnameList;  // PyTorch 2.11's lists name it too (named tensors, gone by 2.13)
#endif
#define TPU_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TPU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(TPU_LOWER_PRECISION)
  AT_FORALL_FP32(TPU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(TPU_PROMOTE)
  KERNEL_PRIVATEUSEONE(ctc_loss, IntList, fp32)
  KERNEL_PRIVATEUSEONE(ctc_loss, Tensor, fp32)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(torchtpu::binary_cross_entropy_refused));
}
