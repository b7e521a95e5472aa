/* Matrix products: mm, bmm, addmm, baddbmm, dot, and attention. */
#include "lower/rules.h"

#define B (c->b)
#define OUT (&c->out_types[0])

/* mm(self, mat2) */
static tpu_status_t mm_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a = tpu_lower_tensor(c, 0), b = tpu_lower_tensor(c, 1);
  tpu_hlo_dot_dims d = {0};
  d.num_contract = 1;
  d.lhs_contract[0] = 1;
  d.rhs_contract[0] = 0;
  tpu_lower_set_output(c, 0, tpu_hlo_dot_general(B, a, b, &d, tpu_lower_opmath(OUT->dtype), c->precision));
  return NULL;
}

const tpu_lower_rule tpu_rules_linalg[] = {
    {{"mm", "mm.out"}, mm_rule, 0, 0},
};
TPU_COUNT_RULES(linalg);
