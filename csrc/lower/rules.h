/* The rule tables, one per op family (one source file each), and the
 * helpers the families share. Private to csrc/lower. */
#ifndef TPU_LOWER_RULES_H_
#define TPU_LOWER_RULES_H_

#include "lower/lower.h"

#define TPU_RULE_TABLE(family)                  \
  extern const tpu_lower_rule tpu_rules_##family[]; \
  extern const int tpu_rules_##family##_count

TPU_RULE_TABLE(elementwise);
TPU_RULE_TABLE(reduce);
TPU_RULE_TABLE(shape);
TPU_RULE_TABLE(linalg);
TPU_RULE_TABLE(nn);
TPU_RULE_TABLE(index);
TPU_RULE_TABLE(random);
TPU_RULE_TABLE(conv);
TPU_RULE_TABLE(view);

#define TPU_COUNT_RULES(family) \
  const int tpu_rules_##family##_count = (int)(sizeof tpu_rules_##family / sizeof tpu_rules_##family[0])

#endif /* TPU_LOWER_RULES_H_ */
