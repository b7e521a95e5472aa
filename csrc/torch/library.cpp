// torchtpu's own ops: forms of aten ops that eager runs where the aten
// schema does not suit a cached program (sdpa.cpp, ctc.cpp, ops.cpp say why). Their
// rules live in csrc/lower like any other and are registered here, after the
// schemas, in this one translation unit: registration needs the schema to
// exist already, and static initialization is ordered only within a file.
#include <torch/library.h>

#include "torch/dispatch.h"

TORCH_LIBRARY(torchtpu, m) {
  m.def("attention(Tensor query, Tensor key, Tensor value, Tensor? attn_bias=None, float dropout_p=0., "
        "bool is_causal=False, bool return_debug_mask=False, *, float? scale=None) "
        "-> (Tensor output, Tensor logsumexp)");
  m.def("ctc_loss(Tensor log_probs, Tensor targets, Tensor input_lengths, Tensor target_lengths, int blank, "
        "bool zero_infinity, int max_target_length) -> (Tensor neg_log_likelihood, Tensor log_alpha)");
  m.def("ctc_loss_backward(Tensor grad, Tensor log_probs, Tensor targets, Tensor input_lengths, "
        "Tensor target_lengths, Tensor neg_log_likelihood, int blank, bool zero_infinity, "
        "int max_target_length) -> Tensor");
  m.def("lstsq(Tensor self, Tensor b, float rcond, bool gels) "
        "-> (Tensor solution, Tensor residuals, Tensor rank, Tensor singular_values)");
  m.def("ldl_factor(Tensor self, bool hermitian) -> (Tensor LD, Tensor pivots, Tensor info)");
  m.def("paged_attention(Tensor query, Tensor? key, Tensor? value, Tensor(a!) kv_cache, Tensor slot_mapping, "
        "Tensor block_table, Tensor seq_lens, Tensor query_start_loc, int max_query_len, float scale, "
        "int sliding_window=0, float soft_cap=0., Tensor? alibi_slopes=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(torchtpu, PrivateUse1, m) { torchtpu::register_rules(m, "torchtpu"); }
