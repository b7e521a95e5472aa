/* Reductions: sum, mean, prod, amax/amin, max/min with indices, argmax/argmin,
 * var/std, logsumexp, norms, softmax/log_softmax and their backwards. */
#include "lower/rules.h"

#define B (c->b)
#define OUT (&c->out_types[0])

/* sum.dim_IntList(self, dim?, keepdim, *, dtype?) */
static tpu_status_t sum_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  int rank = c->args[0].rank;
  tpu_dtype_t acc = tpu_lower_opmath(OUT->dtype);
  if (acc == TPU_BOOL) acc = TPU_S64;
  x = tpu_hlo_convert(B, x, acc);
  int64_t dims[TPU_HLO_MAX_RANK];
  int nd = 0;
  if (tpu_lower_is_none(c, 1) || (c->args[1].kind == TPU_ARG_INT_LIST && c->args[1].n == 0)) {
    for (int i = 0; i < rank; i++) dims[nd++] = i;
  } else {
    for (int i = 0; i < c->args[1].n; i++) dims[nd++] = tpu_lower_wrap_dim(c->args[1].ints[i], rank);
  }
  tpu_hlo_value r = tpu_hlo_reduce_simple(B, x, tpu_hlo_scalar_f64(B, acc, 0.0), TPU_HLO_ADD, dims, nd);
  tpu_lower_set_output(c, 0, r);
  return NULL;
}

const tpu_lower_rule tpu_rules_reduce[] = {
    {{"sum.dim_IntList", "sum.IntList_out"}, sum_rule, 0, 0},
};
TPU_COUNT_RULES(reduce);
