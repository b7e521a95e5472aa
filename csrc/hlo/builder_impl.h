/* The builder's internals, shared by builder.c (lifetime, values, the
 * generic op, regions, printing the module) and the op-family files
 * (constants.c, elementwise.c, shapes.c, dot.c, reduce.c). Private to
 * csrc/hlo. */
#ifndef TPU_HLO_BUILDER_IMPL_H_
#define TPU_HLO_BUILDER_IMPL_H_

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "hlo/builder.h"

#define MAX_LEVELS 16

typedef struct value_info {
  tpu_hlo_type type;
  int32_t ssa;   /* printed number */
  int32_t index; /* result index of a multi-result op, -1 otherwise */
  /* A transpose: its operand, the permutation, the region depth it is in. */
  tpu_hlo_value transposed;
  int8_t perm[TPU_HLO_MAX_RANK];
  int8_t depth;
} value_info;

struct tpu_hlo_builder {
  value_info *values;
  int num_values, cap_values;
  int next_ssa;
  tpu_hlo_value *params;
  int *param_alias;
  int num_params, cap_params;
  int max_rank; /* the most dims of any value */
  tpu_strbuf levels[MAX_LEVELS];
  int depth;
  tpu_code_t err_code;
  char *err_message;
};

static inline bool valid(const tpu_hlo_builder *b, tpu_hlo_value v) {
  return v >= 0 && v < b->num_values;
}

/* Checks operands; records an error naming |what| if one is bad. */
static inline bool check_operands(tpu_hlo_builder *b, const char *what, const tpu_hlo_value *vs, int n) {
  if (tpu_hlo_failed(b)) return false;
  for (int i = 0; i < n; i++)
    if (!valid(b, vs[i])) {
      tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: %s got an invalid operand", what);
      return false;
    }
  return true;
}

static inline bool same_shape(const tpu_hlo_type *a, const tpu_hlo_type *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

static inline void put_type(tpu_strbuf *sb, const tpu_hlo_type *t) {
  tpu_strbuf_puts(sb, "tensor<");
  for (int i = 0; i < t->rank; i++) tpu_strbuf_printf(sb, "%lldx", (long long)t->dims[i]);
  tpu_strbuf_puts(sb, tpu_dtype_mlir(t->dtype));
  tpu_strbuf_puts(sb, ">");
}

static inline void put_i64_array(tpu_strbuf *sb, const int64_t *v, int n) {
  tpu_strbuf_puts(sb, "array<i64");
  for (int i = 0; i < n; i++) tpu_strbuf_printf(sb, "%s%lld", i ? ", " : ": ", (long long)v[i]);
  tpu_strbuf_puts(sb, ">");
}

static inline void put_i64_list(tpu_strbuf *sb, const int64_t *v, int n) {
  tpu_strbuf_puts(sb, "[");
  for (int i = 0; i < n; i++) tpu_strbuf_printf(sb, "%s%lld", i ? ", " : "", (long long)v[i]);
  tpu_strbuf_puts(sb, "]");
}

/* The text of an attribute buffer, or NULL with the builder failed when
 * building it ran out of memory (an op without its attributes would be a
 * different, or invalid, program). */
static inline const char *attr_text(tpu_hlo_builder *b, const tpu_strbuf *a) {
  if (!a->failed) return a->data;
  tpu_hlo_fail(b, TPU_ERR_OUT_OF_MEMORY, "out of host memory building an attribute");
  return NULL;
}

static inline tpu_hlo_value op1(tpu_hlo_builder *b, const char *name, const tpu_hlo_value *operands, int n,
                                const char *attrs, const tpu_hlo_type *result) {
  tpu_hlo_value out;
  tpu_hlo_op(b, name, operands, n, NULL, 0, attrs, result, 1, &out);
  return out;
}

/* op1 with one attribute, |key| = array<i64: |v|>. */
static inline tpu_hlo_value op1_array(tpu_hlo_builder *b, const char *name, const tpu_hlo_value *operands, int n,
                                      const char *key, const int64_t *v, int count, const tpu_hlo_type *result) {
  tpu_hlo_type t = *result; /* |result| may point into b->values */
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  tpu_strbuf_printf(&attrs, "%s = ", key);
  put_i64_array(&attrs, v, count);
  tpu_hlo_value out = op1(b, name, operands, n, attr_text(b, &attrs), &t);
  tpu_strbuf_release(&attrs);
  return out;
}

static inline bool contains(const int64_t *v, int n, int64_t x) {
  for (int i = 0; i < n; i++)
    if (v[i] == x) return true;
  return false;
}

#endif /* TPU_HLO_BUILDER_IMPL_H_ */
