/* special rules. */
#include "lower/rules.h"

static tpu_status_t placeholder_rule(tpu_lower_ctx *c) {
  return tpu_lower_error(c, TPU_ERR_NOT_IMPLEMENTED, "%s: no lowering yet", c->op);
}

const tpu_lower_rule tpu_rules_special[] = {
    {{"tpu_placeholder_special"}, placeholder_rule, TPU_RULE_INTERNAL, 0},
};
TPU_COUNT_RULES(special);
