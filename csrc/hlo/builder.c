/* StableHLO text builder: value table, type inference, generic-form printing.
 *
 * Text is written as ops are added: level 0 of |levels| is @main's body, each
 * open region pushes a level. Values are printed %vN (or %vN#i for the i-th
 * result of a multi-result op). */
#include "hlo/builder.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"

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

/* --- lifetime and errors ------------------------------------------------------ */

tpu_status_t tpu_hlo_builder_create(tpu_hlo_builder **out_b) {
  *out_b = calloc(1, sizeof **out_b);
  return *out_b ? NULL : tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
}

void tpu_hlo_builder_reset(tpu_hlo_builder *b) {
  b->num_values = 0;
  b->next_ssa = 0;
  b->num_params = 0;
  b->max_rank = 0;
  for (int i = 0; i < MAX_LEVELS; i++) tpu_strbuf_clear(&b->levels[i]);
  b->depth = 0;
  b->err_code = TPU_OK;
  free(b->err_message);
  b->err_message = NULL;
}

void tpu_hlo_builder_destroy(tpu_hlo_builder *b) {
  if (b == NULL) return;
  free(b->values);
  free(b->params);
  free(b->param_alias);
  for (int i = 0; i < MAX_LEVELS; i++) tpu_strbuf_release(&b->levels[i]);
  free(b->err_message);
  free(b);
}

bool tpu_hlo_failed(const tpu_hlo_builder *b) { return b->err_code != TPU_OK; }

tpu_status_t tpu_hlo_status(const tpu_hlo_builder *b) {
  if (b->err_code == TPU_OK) return NULL;
  return tpu_status_new(b->err_code, "%s", b->err_message ? b->err_message : "out of memory");
}

tpu_hlo_value tpu_hlo_fail(tpu_hlo_builder *b, tpu_code_t code, const char *fmt, ...) {
  if (b->err_code != TPU_OK) return TPU_HLO_NONE;
  b->err_code = code == TPU_OK ? TPU_ERR_RUNTIME : code;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  b->err_message = malloc((size_t)(n > 0 ? n : 0) + 1);
  if (b->err_message != NULL) {
    va_start(ap, fmt);
    vsnprintf(b->err_message, (size_t)(n > 0 ? n : 0) + 1, fmt, ap);
    va_end(ap);
  }
  return TPU_HLO_NONE;
}

static bool valid(const tpu_hlo_builder *b, tpu_hlo_value v) {
  return v >= 0 && v < b->num_values;
}

/* Checks operands; records an error naming |what| if one is bad. */
static bool check_operands(tpu_hlo_builder *b, const char *what, const tpu_hlo_value *vs, int n) {
  if (tpu_hlo_failed(b)) return false;
  for (int i = 0; i < n; i++)
    if (!valid(b, vs[i])) {
      tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: %s got an invalid operand", what);
      return false;
    }
  return true;
}

/* --- types -------------------------------------------------------------------- */

tpu_hlo_type tpu_hlo_make_type(tpu_dtype_t dtype, int rank, const int64_t *dims) {
  tpu_hlo_type t;
  memset(&t, 0, sizeof t);
  t.dtype = dtype;
  t.rank = rank;
  for (int i = 0; i < rank && i < TPU_HLO_MAX_RANK; i++) t.dims[i] = dims[i];
  return t;
}

int64_t tpu_hlo_type_numel(const tpu_hlo_type *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i];
  return n;
}

bool tpu_hlo_type_equal(const tpu_hlo_type *a, const tpu_hlo_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

static bool same_shape(const tpu_hlo_type *a, const tpu_hlo_type *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

static const tpu_hlo_type invalid_type = {TPU_INVALID, 0, {0}};

const tpu_hlo_type *tpu_hlo_type_of(const tpu_hlo_builder *b, tpu_hlo_value v) {
  return valid(b, v) ? &b->values[v].type : &invalid_type;
}

tpu_dtype_t tpu_hlo_dtype(const tpu_hlo_builder *b, tpu_hlo_value v) {
  return tpu_hlo_type_of(b, v)->dtype;
}

int tpu_hlo_rank(const tpu_hlo_builder *b, tpu_hlo_value v) { return tpu_hlo_type_of(b, v)->rank; }

int tpu_hlo_max_rank(const tpu_hlo_builder *b) { return b->max_rank; }

static void put_type(tpu_strbuf *sb, const tpu_hlo_type *t) {
  tpu_strbuf_puts(sb, "tensor<");
  for (int i = 0; i < t->rank; i++) tpu_strbuf_printf(sb, "%lldx", (long long)t->dims[i]);
  tpu_strbuf_puts(sb, tpu_dtype_mlir(t->dtype));
  tpu_strbuf_puts(sb, ">");
}

static void put_value(tpu_strbuf *sb, const tpu_hlo_builder *b, tpu_hlo_value v) {
  const value_info *vi = &b->values[v];
  if (vi->index < 0) tpu_strbuf_printf(sb, "%%v%d", vi->ssa);
  else tpu_strbuf_printf(sb, "%%v%d#%d", vi->ssa, vi->index);
}

void tpu_hlo_format_i64_array(char *buf, size_t cap, const int64_t *v, int n) {
  size_t used = (size_t)snprintf(buf, cap, "array<i64");
  for (int i = 0; i < n && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : ": ", (long long)v[i]);
  if (used < cap) snprintf(buf + used, cap - used, ">");
}

static void put_i64_array(tpu_strbuf *sb, const int64_t *v, int n) {
  tpu_strbuf_puts(sb, "array<i64");
  for (int i = 0; i < n; i++) tpu_strbuf_printf(sb, "%s%lld", i ? ", " : ": ", (long long)v[i]);
  tpu_strbuf_puts(sb, ">");
}

static void put_i64_list(tpu_strbuf *sb, const int64_t *v, int n) {
  tpu_strbuf_puts(sb, "[");
  for (int i = 0; i < n; i++) tpu_strbuf_printf(sb, "%s%lld", i ? ", " : "", (long long)v[i]);
  tpu_strbuf_puts(sb, "]");
}

/* --- value allocation ------------------------------------------------------------ */

static tpu_hlo_value new_value(tpu_hlo_builder *b, const tpu_hlo_type *t, int ssa, int index) {
  tpu_hlo_type type = *t; /* |t| may point into b->values, which the realloc moves */
  if (b->num_values == b->cap_values) {
    int cap = b->cap_values ? b->cap_values * 2 : 64;
    value_info *v = realloc(b->values, (size_t)cap * sizeof *v);
    if (v == NULL) return tpu_hlo_fail(b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    b->values = v;
    b->cap_values = cap;
  }
  value_info *vi = &b->values[b->num_values];
  vi->type = type;
  if (type.rank > b->max_rank) b->max_rank = type.rank;
  vi->ssa = ssa;
  vi->index = index;
  vi->transposed = TPU_HLO_NONE;
  return b->num_values++;
}

tpu_hlo_value tpu_hlo_param(tpu_hlo_builder *b, const tpu_hlo_type *t, int alias_output) {
  if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
  if (b->num_params == b->cap_params) {
    int cap = b->cap_params ? b->cap_params * 2 : 16;
    tpu_hlo_value *p = realloc(b->params, (size_t)cap * sizeof *p);
    if (p != NULL) b->params = p;
    int *a = realloc(b->param_alias, (size_t)cap * sizeof *a);
    if (a != NULL) b->param_alias = a;
    if (p == NULL || a == NULL) return tpu_hlo_fail(b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    b->cap_params = cap;
  }
  tpu_hlo_value v = new_value(b, t, b->next_ssa++, -1);
  if (v == TPU_HLO_NONE) return v;
  b->params[b->num_params] = v;
  b->param_alias[b->num_params] = alias_output;
  b->num_params++;
  return v;
}

int tpu_hlo_num_params(const tpu_hlo_builder *b) { return b->num_params; }

const tpu_hlo_type *tpu_hlo_param_type(const tpu_hlo_builder *b, int param_index) {
  return param_index < b->num_params ? tpu_hlo_type_of(b, b->params[param_index]) : &invalid_type;
}

void tpu_hlo_param_set_alias(tpu_hlo_builder *b, int param_index, int alias_output) {
  if (param_index >= 0 && param_index < b->num_params) b->param_alias[param_index] = alias_output;
}

/* --- the generic op ----------------------------------------------------------------- */

static tpu_strbuf *cur(tpu_hlo_builder *b) { return &b->levels[b->depth]; }

static void indent(tpu_hlo_builder *b) {
  for (int i = 0; i <= b->depth + 1; i++) tpu_strbuf_puts(cur(b), "  ");
}

void tpu_hlo_op(tpu_hlo_builder *b, const char *name, const tpu_hlo_value *operands, int n,
                tpu_hlo_region *regions, int num_regions, const char *attrs,
                const tpu_hlo_type *result_types, int num_results, tpu_hlo_value *out) {
  for (int i = 0; i < num_results; i++) out[i] = TPU_HLO_NONE;
  bool ok = check_operands(b, name, operands, n);
  for (int i = 0; i < num_results && ok; i++)
    if (result_types[i].rank > TPU_HLO_MAX_RANK) {
      for (int r = 0; r < num_regions; r++) tpu_hlo_region_release(&regions[r]);
      tpu_hlo_fail(b, TPU_ERR_NOT_IMPLEMENTED, "%s: a value of %d dimensions, more than tpu supports (%d)", name,
                   result_types[i].rank, TPU_HLO_MAX_RANK);
      return;
    }
  for (int i = 0; i < num_regions; i++)
    if (regions[i].text == NULL) ok = false;
  if (!ok) {
    for (int i = 0; i < num_regions; i++) tpu_hlo_region_release(&regions[i]);
    if (!tpu_hlo_failed(b)) tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: %s got a bad region", name);
    return;
  }
  int ssa = b->next_ssa++;
  tpu_strbuf *sb = cur(b);
  indent(b);
  if (num_results == 1) tpu_strbuf_printf(sb, "%%v%d = ", ssa);
  else if (num_results > 1) tpu_strbuf_printf(sb, "%%v%d:%d = ", ssa, num_results);
  tpu_strbuf_printf(sb, "\"%s\"(", name);
  for (int i = 0; i < n; i++) {
    if (i) tpu_strbuf_puts(sb, ", ");
    put_value(sb, b, operands[i]);
  }
  tpu_strbuf_puts(sb, ")");
  if (num_regions > 0) {
    tpu_strbuf_puts(sb, " (");
    for (int i = 0; i < num_regions; i++) {
      tpu_strbuf_puts(sb, i ? ", {\n" : "{\n");
      tpu_strbuf_puts(sb, regions[i].text);
      indent(b);
      tpu_strbuf_puts(sb, "}");
      tpu_hlo_region_release(&regions[i]);
    }
    tpu_strbuf_puts(sb, ")");
  }
  if (attrs != NULL && attrs[0] != '\0') tpu_strbuf_printf(sb, " {%s}", attrs);
  tpu_strbuf_puts(sb, " : (");
  for (int i = 0; i < n; i++) {
    if (i) tpu_strbuf_puts(sb, ", ");
    put_type(sb, &b->values[operands[i]].type);
  }
  tpu_strbuf_puts(sb, ") -> ");
  if (num_results != 1) tpu_strbuf_puts(sb, "(");
  for (int i = 0; i < num_results; i++) {
    if (i) tpu_strbuf_puts(sb, ", ");
    put_type(sb, &result_types[i]);
  }
  if (num_results != 1) tpu_strbuf_puts(sb, ")");
  tpu_strbuf_puts(sb, "\n");
  if (sb->failed) {
    tpu_hlo_fail(b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    return;
  }
  for (int i = 0; i < num_results; i++)
    out[i] = new_value(b, &result_types[i], ssa, num_results == 1 ? -1 : i);
}

/* The text of an attribute buffer, or NULL with the builder failed when
 * building it ran out of memory (an op without its attributes would be a
 * different, or invalid, program). */
static const char *attr_text(tpu_hlo_builder *b, const tpu_strbuf *a) {
  if (!a->failed) return a->data;
  tpu_hlo_fail(b, TPU_ERR_OUT_OF_MEMORY, "out of host memory building an attribute");
  return NULL;
}

static tpu_hlo_value op1(tpu_hlo_builder *b, const char *name, const tpu_hlo_value *operands, int n,
                         const char *attrs, const tpu_hlo_type *result) {
  tpu_hlo_value out;
  tpu_hlo_op(b, name, operands, n, NULL, 0, attrs, result, 1, &out);
  return out;
}

/* op1 with one attribute, |key| = array<i64: |v|>. */
static tpu_hlo_value op1_array(tpu_hlo_builder *b, const char *name, const tpu_hlo_value *operands, int n,
                               const char *key, const int64_t *v, int count, const tpu_hlo_type *result) {
  tpu_hlo_type t = *result; /* |result| may point into b->values */
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  tpu_strbuf_printf(&attrs, "%s = ", key);
  put_i64_array(&attrs, v, count);
  tpu_hlo_value out = op1(b, name, operands, n, attr_text(b, &attrs), &t);
  tpu_strbuf_release(&attrs);
  return out;
}

/* --- regions ---------------------------------------------------------------------- */

void tpu_hlo_region_begin(tpu_hlo_builder *b, int n, const tpu_hlo_type *arg_types,
                          tpu_hlo_value *out_args) {
  for (int i = 0; i < n; i++) out_args[i] = TPU_HLO_NONE;
  if (tpu_hlo_failed(b)) return;
  if (b->depth + 1 >= MAX_LEVELS) {
    tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: regions nested too deeply");
    return;
  }
  b->depth++;
  tpu_strbuf *sb = cur(b);
  tpu_strbuf_clear(sb);
  if (n == 0) return;
  for (int i = 0; i <= b->depth; i++) tpu_strbuf_puts(sb, "  ");
  tpu_strbuf_puts(sb, "^bb0(");
  for (int i = 0; i < n; i++) {
    int ssa = b->next_ssa++;
    out_args[i] = new_value(b, &arg_types[i], ssa, -1);
    tpu_strbuf_printf(sb, "%s%%v%d: ", i ? ", " : "", ssa);
    put_type(sb, &arg_types[i]);
  }
  tpu_strbuf_puts(sb, "):\n");
}

void tpu_hlo_region_end(tpu_hlo_builder *b, const tpu_hlo_value *results, int n,
                        tpu_hlo_region *out_region) {
  out_region->text = NULL;
  if (b->depth == 0) {
    tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: region_end without region_begin");
    return;
  }
  if (!tpu_hlo_failed(b)) tpu_hlo_op(b, "stablehlo.return", results, n, NULL, 0, NULL, NULL, 0, NULL);
  tpu_strbuf *sb = cur(b);
  if (!tpu_hlo_failed(b)) {
    out_region->text = strdup(sb->data ? sb->data : "");
    if (out_region->text == NULL) tpu_hlo_fail(b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  tpu_strbuf_clear(sb);
  b->depth--;
}

void tpu_hlo_region_release(tpu_hlo_region *r) {
  free(r->text);
  r->text = NULL;
}

static const char *const binary_names[TPU_HLO_BINARY_COUNT_] = {
    [TPU_HLO_ADD] = "stablehlo.add",
    [TPU_HLO_SUB] = "stablehlo.subtract",
    [TPU_HLO_MUL] = "stablehlo.multiply",
    [TPU_HLO_DIV] = "stablehlo.divide",
    [TPU_HLO_REM] = "stablehlo.remainder",
    [TPU_HLO_MAX] = "stablehlo.maximum",
    [TPU_HLO_MIN] = "stablehlo.minimum",
    [TPU_HLO_POW] = "stablehlo.power",
    [TPU_HLO_ATAN2] = "stablehlo.atan2",
    [TPU_HLO_AND] = "stablehlo.and",
    [TPU_HLO_OR] = "stablehlo.or",
    [TPU_HLO_XOR] = "stablehlo.xor",
    [TPU_HLO_SHL] = "stablehlo.shift_left",
    [TPU_HLO_SHR_ARITH] = "stablehlo.shift_right_arithmetic",
    [TPU_HLO_SHR_LOGIC] = "stablehlo.shift_right_logical",
    [TPU_HLO_COMPLEX] = "stablehlo.complex",
    [TPU_HLO_NEXTAFTER] = "chlo.next_after",
    [TPU_HLO_POLYGAMMA] = "chlo.polygamma",
    [TPU_HLO_ZETA] = "chlo.zeta",
};

void tpu_hlo_region_binary(tpu_hlo_builder *b, tpu_hlo_binary_t op, tpu_dtype_t dtype,
                           tpu_hlo_region *out_region) {
  tpu_hlo_type s = tpu_hlo_make_type(dtype, 0, NULL);
  tpu_hlo_type ts[2] = {s, s};
  tpu_hlo_value args[2];
  tpu_hlo_region_begin(b, 2, ts, args);
  tpu_hlo_value r = tpu_hlo_binary(b, op, args[0], args[1]);
  tpu_hlo_region_end(b, &r, 1, out_region);
}

/* --- finishing ---------------------------------------------------------------------- */

tpu_status_t tpu_hlo_finish(tpu_hlo_builder *b, const tpu_hlo_value *results, int num_results,
                            char **out_text) {
  *out_text = NULL;
  if (b->depth != 0) tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: unclosed region");
  check_operands(b, "func.return", results, num_results);
  if (tpu_hlo_failed(b)) return tpu_hlo_status(b);
  tpu_strbuf text = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&text, "module @torchtpu attributes {mhlo.num_partitions = 1 : i32, "
                         "mhlo.num_replicas = 1 : i32} {\n  func.func public @main(");
  for (int i = 0; i < b->num_params; i++) {
    if (i) tpu_strbuf_puts(&text, ", ");
    put_value(&text, b, b->params[i]);
    tpu_strbuf_puts(&text, ": ");
    put_type(&text, &b->values[b->params[i]].type);
    if (b->param_alias[i] >= 0)
      tpu_strbuf_printf(&text, " {tf.aliasing_output = %d : i32}", b->param_alias[i]);
  }
  tpu_strbuf_puts(&text, ") -> (");
  for (int i = 0; i < num_results; i++) {
    if (i) tpu_strbuf_puts(&text, ", ");
    put_type(&text, &b->values[results[i]].type);
  }
  tpu_strbuf_puts(&text, ") {\n");
  tpu_strbuf *body = &b->levels[0];
  if (body->len) tpu_strbuf_append(&text, body->data, body->len);
  tpu_strbuf_puts(&text, "    \"func.return\"(");
  for (int i = 0; i < num_results; i++) {
    if (i) tpu_strbuf_puts(&text, ", ");
    put_value(&text, b, results[i]);
  }
  tpu_strbuf_puts(&text, ") : (");
  for (int i = 0; i < num_results; i++) {
    if (i) tpu_strbuf_puts(&text, ", ");
    put_type(&text, &b->values[results[i]].type);
  }
  tpu_strbuf_puts(&text, ") -> ()\n  }\n}\n");
  tpu_status_t st = tpu_strbuf_status(&text);
  if (st != NULL) {
    tpu_strbuf_release(&text);
    return st;
  }
  *out_text = tpu_strbuf_take(&text);
  return NULL;
}

/* --- constants ---------------------------------------------------------------------- */

static uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)((u + rounding) >> 16);
}

static uint16_t f32_to_f16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow to inf */
  if (absu < 0x33000001u) return (uint16_t)sign;              /* underflow to zero */
  int exp = (int)(absu >> 23) - 127;
  uint32_t mant = (absu & 0x7fffffu) | 0x800000u;
  if (exp < -14) { /* subnormal half */
    int shift = -14 - exp + 13;
    uint32_t r = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ((uint32_t)(exp + 15) << 10) | ((mant >> 13) & 0x3ffu);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
  return (uint16_t)(sign | r);
}

/* Prints one element of |dtype| equal to |v| (or |iv| for integers). Floats
 * are printed as their exact bit pattern. */
static void put_element(tpu_strbuf *sb, tpu_dtype_t dtype, double v, int64_t iv, bool is_int) {
  if (dtype == TPU_BOOL) {
    tpu_strbuf_puts(sb, (is_int ? iv != 0 : v != 0) ? "true" : "false");
  } else if (tpu_dtype_is_int(dtype)) {
    int64_t x = is_int ? iv : (int64_t)v;
    if (tpu_dtype_is_unsigned_int(dtype)) {
      uint64_t mask = tpu_dtype_size(dtype) == 8 ? ~0ULL : ((1ULL << (8 * tpu_dtype_size(dtype))) - 1);
      tpu_strbuf_printf(sb, "%llu", (unsigned long long)((uint64_t)x & mask));
    } else {
      int bits = 8 * (int)tpu_dtype_size(dtype);
      if (bits < 64) { /* wrap like a C cast */
        uint64_t m = (1ULL << bits) - 1;
        uint64_t ux = (uint64_t)x & m;
        if (ux >> (bits - 1)) x = (int64_t)(ux | ~m);
        else x = (int64_t)ux;
      }
      tpu_strbuf_printf(sb, "%lld", (long long)x);
    }
  } else {
    double d = is_int ? (double)iv : v;
    tpu_dtype_t real = tpu_dtype_real(dtype);
    bool cplx = tpu_dtype_is_complex(dtype);
    if (cplx) tpu_strbuf_puts(sb, "(");
    for (int part = 0; part < (cplx ? 2 : 1); part++) {
      double x = part == 0 ? d : 0.0;
      if (part) tpu_strbuf_puts(sb, ", ");
      if (real == TPU_F64) {
        uint64_t u;
        memcpy(&u, &x, 8);
        tpu_strbuf_printf(sb, "0x%016llX", (unsigned long long)u);
      } else if (real == TPU_F32) {
        float f = (float)x;
        uint32_t u;
        memcpy(&u, &f, 4);
        tpu_strbuf_printf(sb, "0x%08X", u);
      } else if (real == TPU_BF16) {
        /* Round f64 -> bf16 without double rounding through f32 where it
         * matters: values are exact in f32 for all constants we emit. */
        tpu_strbuf_printf(sb, "0x%04X", f32_to_bf16_bits((float)x));
      } else if (real == TPU_F16) {
        tpu_strbuf_printf(sb, "0x%04X", f32_to_f16_bits((float)x));
      } else {
        tpu_strbuf_printf(sb, "%.17g", x); /* f8 types: the plugin rounds */
        if (isfinite(x) && floor(x) == x) tpu_strbuf_puts(sb, ".0");
      }
    }
    if (cplx) tpu_strbuf_puts(sb, ")");
  }
}

static tpu_hlo_value constant(tpu_hlo_builder *b, const tpu_hlo_type *t, double v, int64_t iv,
                              bool is_int) {
  if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
  if (t->dtype == TPU_F8E5M2 || t->dtype == TPU_F8E4M3FN || t->dtype == TPU_F8E5M2FNUZ ||
      t->dtype == TPU_F8E4M3FNUZ) {
    /* f8 literals: build in f32 and convert, which rounds like PyTorch. */
    tpu_hlo_type t32 = *t;
    t32.dtype = TPU_F32;
    return tpu_hlo_convert(b, constant(b, &t32, v, iv, is_int), t->dtype);
  }
  tpu_strbuf attr = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&attr, "value = dense<");
  put_element(&attr, t->dtype, v, iv, is_int);
  tpu_strbuf_puts(&attr, "> : ");
  put_type(&attr, t);
  tpu_hlo_value out = TPU_HLO_NONE;
  if (attr.failed) tpu_hlo_fail(b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  else out = op1(b, "stablehlo.constant", NULL, 0, attr.data, t);
  tpu_strbuf_release(&attr);
  return out;
}

tpu_hlo_value tpu_hlo_const_f64(tpu_hlo_builder *b, const tpu_hlo_type *t, double v) {
  return constant(b, t, v, 0, false);
}

tpu_hlo_value tpu_hlo_const_i64(tpu_hlo_builder *b, const tpu_hlo_type *t, int64_t v) {
  return constant(b, t, 0.0, v, true);
}

tpu_hlo_value tpu_hlo_scalar_f64(tpu_hlo_builder *b, tpu_dtype_t dtype, double v) {
  tpu_hlo_type t = tpu_hlo_make_type(dtype, 0, NULL);
  return constant(b, &t, v, 0, false);
}

tpu_hlo_value tpu_hlo_scalar_i64(tpu_hlo_builder *b, tpu_dtype_t dtype, int64_t v) {
  tpu_hlo_type t = tpu_hlo_make_type(dtype, 0, NULL);
  return constant(b, &t, 0.0, v, true);
}

static tpu_hlo_value scalar_limit(tpu_hlo_builder *b, tpu_dtype_t dtype, bool max) {
  if (tpu_dtype_is_float(dtype)) return tpu_hlo_scalar_f64(b, dtype, max ? INFINITY : -INFINITY);
  if (dtype == TPU_BOOL) return tpu_hlo_scalar_i64(b, dtype, max ? 1 : 0);
  int bits = 8 * (int)tpu_dtype_size(dtype);
  if (tpu_dtype_is_unsigned_int(dtype))
    return tpu_hlo_scalar_i64(b, dtype, max ? (int64_t)(bits == 64 ? ~0ULL : (1ULL << bits) - 1) : 0);
  int64_t hi = bits == 64 ? INT64_MAX : (int64_t)((1ULL << (bits - 1)) - 1);
  return tpu_hlo_scalar_i64(b, dtype, max ? hi : -hi - 1);
}

tpu_hlo_value tpu_hlo_scalar_max(tpu_hlo_builder *b, tpu_dtype_t dtype) {
  return scalar_limit(b, dtype, true);
}

tpu_hlo_value tpu_hlo_scalar_min(tpu_hlo_builder *b, tpu_dtype_t dtype) {
  return scalar_limit(b, dtype, false);
}

/* Emits "|attr| > : type" as a stablehlo.constant of type |t| (|attr| holds
 * "value = dense<" and the elements) and releases |attr|. */
static tpu_hlo_value dense_constant(tpu_hlo_builder *b, tpu_strbuf *attr, const tpu_hlo_type *t) {
  tpu_strbuf_puts(attr, "> : ");
  put_type(attr, t);
  tpu_hlo_value out = TPU_HLO_NONE;
  if (attr->failed) tpu_hlo_fail(b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  else out = op1(b, "stablehlo.constant", NULL, 0, attr->data, t);
  tpu_strbuf_release(attr);
  return out;
}

tpu_hlo_value tpu_hlo_const_i64_list(tpu_hlo_builder *b, const int64_t *v, int n) {
  if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
  int64_t dim = n;
  tpu_hlo_type t = tpu_hlo_make_type(TPU_S64, 1, &dim);
  tpu_strbuf attr = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&attr, "value = dense<");
  put_i64_list(&attr, v, n);
  return dense_constant(b, &attr, &t);
}

tpu_hlo_value tpu_hlo_const_f64_list(tpu_hlo_builder *b, tpu_dtype_t dtype, const double *v, int64_t n) {
  if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
  tpu_hlo_type t = tpu_hlo_make_type(dtype, 1, &n);
  tpu_strbuf attr = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&attr, "value = dense<[");
  for (int64_t i = 0; i < n; i++) {
    if (i) tpu_strbuf_puts(&attr, ", ");
    put_element(&attr, dtype, v[i], 0, false);
  }
  tpu_strbuf_puts(&attr, "]");
  return dense_constant(b, &attr, &t);
}

/* --- elementwise ----------------------------------------------------------------------- */

static const char *const unary_names[TPU_HLO_UNARY_COUNT_] = {
    [TPU_HLO_ABS] = "stablehlo.abs",
    [TPU_HLO_NEG] = "stablehlo.negate",
    [TPU_HLO_EXP] = "stablehlo.exponential",
    [TPU_HLO_EXPM1] = "stablehlo.exponential_minus_one",
    [TPU_HLO_LOG] = "stablehlo.log",
    [TPU_HLO_LOG1P] = "stablehlo.log_plus_one",
    [TPU_HLO_SQRT] = "stablehlo.sqrt",
    [TPU_HLO_RSQRT] = "stablehlo.rsqrt",
    [TPU_HLO_CBRT] = "stablehlo.cbrt",
    [TPU_HLO_TANH] = "stablehlo.tanh",
    [TPU_HLO_LOGISTIC] = "stablehlo.logistic",
    [TPU_HLO_SIN] = "stablehlo.sine",
    [TPU_HLO_COS] = "stablehlo.cosine",
    [TPU_HLO_TAN] = "stablehlo.tan",
    [TPU_HLO_FLOOR] = "stablehlo.floor",
    [TPU_HLO_CEIL] = "stablehlo.ceil",
    [TPU_HLO_ROUND_EVEN] = "stablehlo.round_nearest_even",
    [TPU_HLO_ROUND_AFZ] = "stablehlo.round_nearest_afz",
    [TPU_HLO_SIGN] = "stablehlo.sign",
    [TPU_HLO_NOT] = "stablehlo.not",
    [TPU_HLO_POPCNT] = "stablehlo.popcnt",
    [TPU_HLO_CLZ] = "stablehlo.count_leading_zeros",
    [TPU_HLO_REAL] = "stablehlo.real",
    [TPU_HLO_IMAG] = "stablehlo.imag",
    [TPU_HLO_ERF] = "chlo.erf",
    [TPU_HLO_ERF_INV] = "chlo.erf_inv",
    [TPU_HLO_ERFC] = "chlo.erfc",
    [TPU_HLO_LGAMMA] = "chlo.lgamma",
    [TPU_HLO_DIGAMMA] = "chlo.digamma",
    [TPU_HLO_ASIN] = "chlo.asin",
    [TPU_HLO_ACOS] = "chlo.acos",
    [TPU_HLO_ATAN] = "chlo.atan",
    [TPU_HLO_SINH] = "chlo.sinh",
    [TPU_HLO_COSH] = "chlo.cosh",
    [TPU_HLO_ASINH] = "chlo.asinh",
    [TPU_HLO_ACOSH] = "chlo.acosh",
    [TPU_HLO_ATANH] = "chlo.atanh",
    [TPU_HLO_IS_INF] = "chlo.is_inf",
    [TPU_HLO_IS_NEG_INF] = "chlo.is_neg_inf",
    [TPU_HLO_IS_POS_INF] = "chlo.is_pos_inf",
    [TPU_HLO_IS_FINITE] = "stablehlo.is_finite",
};

tpu_hlo_value tpu_hlo_unary(tpu_hlo_builder *b, tpu_hlo_unary_t op, tpu_hlo_value x) {
  if (!check_operands(b, "unary op", &x, 1)) return TPU_HLO_NONE;
  tpu_hlo_type t = b->values[x].type;
  if (op == TPU_HLO_REAL || op == TPU_HLO_IMAG || op == TPU_HLO_ABS) t.dtype = tpu_dtype_real(t.dtype);
  if (op == TPU_HLO_IS_INF || op == TPU_HLO_IS_NEG_INF || op == TPU_HLO_IS_POS_INF ||
      op == TPU_HLO_IS_FINITE)
    t.dtype = TPU_BOOL;
  return op1(b, unary_names[op], &x, 1, NULL, &t);
}

tpu_hlo_value tpu_hlo_binary(tpu_hlo_builder *b, tpu_hlo_binary_t op, tpu_hlo_value x,
                             tpu_hlo_value y) {
  tpu_hlo_value xy[2] = {x, y};
  if (!check_operands(b, binary_names[op], xy, 2)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type, *ty = &b->values[y].type;
  if (!tpu_hlo_type_equal(tx, ty))
    return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: %s operands differ in type (%s[%d] vs %s[%d])",
                        binary_names[op], tpu_dtype_name(tx->dtype), tx->rank,
                        tpu_dtype_name(ty->dtype), ty->rank);
  tpu_hlo_type t = *tx;
  if (op == TPU_HLO_COMPLEX) t.dtype = t.dtype == TPU_F64 ? TPU_C128 : TPU_C64;
  return op1(b, binary_names[op], xy, 2, NULL, &t);
}

tpu_hlo_value tpu_hlo_compare(tpu_hlo_builder *b, tpu_hlo_cmp_t dir, tpu_hlo_value x,
                              tpu_hlo_value y) {
  static const char *const dirs[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  tpu_hlo_value xy[2] = {x, y};
  if (!check_operands(b, "stablehlo.compare", xy, 2)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type;
  if (!tpu_hlo_type_equal(tx, &b->values[y].type))
    return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: compare operands differ in type");
  const char *ct = "FLOAT";
  if (tpu_dtype_is_signed_int(tx->dtype)) ct = "SIGNED";
  else if (tpu_dtype_is_unsigned_int(tx->dtype) || tx->dtype == TPU_BOOL) ct = "UNSIGNED";
  char attrs[160];
  snprintf(attrs, sizeof attrs,
           "comparison_direction = #stablehlo<comparison_direction %s>, "
           "compare_type = #stablehlo<comparison_type %s>",
           dirs[dir], ct);
  tpu_hlo_type t = *tx;
  t.dtype = TPU_BOOL;
  return op1(b, "stablehlo.compare", xy, 2, attrs, &t);
}

tpu_hlo_value tpu_hlo_select(tpu_hlo_builder *b, tpu_hlo_value pred, tpu_hlo_value on_true,
                             tpu_hlo_value on_false) {
  tpu_hlo_value ops[3] = {pred, on_true, on_false};
  if (!check_operands(b, "stablehlo.select", ops, 3)) return TPU_HLO_NONE;
  const tpu_hlo_type *tp = &b->values[pred].type, *tt = &b->values[on_true].type;
  if (!tpu_hlo_type_equal(tt, &b->values[on_false].type) || tp->dtype != TPU_BOOL ||
      (tp->rank != 0 && !same_shape(tp, tt)))
    return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: select operands do not match");
  return op1(b, "stablehlo.select", ops, 3, NULL, tt);
}

tpu_hlo_value tpu_hlo_clamp(tpu_hlo_builder *b, tpu_hlo_value lo, tpu_hlo_value x,
                            tpu_hlo_value hi) {
  tpu_hlo_value ops[3] = {lo, x, hi};
  if (!check_operands(b, "stablehlo.clamp", ops, 3)) return TPU_HLO_NONE;
  return op1(b, "stablehlo.clamp", ops, 3, NULL, &b->values[x].type);
}

tpu_hlo_value tpu_hlo_convert(tpu_hlo_builder *b, tpu_hlo_value x, tpu_dtype_t to) {
  if (!check_operands(b, "stablehlo.convert", &x, 1)) return TPU_HLO_NONE;
  tpu_hlo_type t = b->values[x].type;
  if (t.dtype == to) return x;
  tpu_dtype_t from = t.dtype;
  t.dtype = to;
  if (to == TPU_BOOL) { /* PyTorch: nonzero -> true (NaN too) */
    tpu_hlo_value zero = tpu_hlo_const_f64(b, &b->values[x].type, 0.0);
    return tpu_hlo_compare(b, TPU_HLO_NE, x, zero);
  }
  if (tpu_dtype_is_complex(from) && !tpu_dtype_is_complex(to)) /* drops the imaginary part */
    return tpu_hlo_convert(b, tpu_hlo_unary(b, TPU_HLO_REAL, x), to);
  return op1(b, "stablehlo.convert", &x, 1, NULL, &t);
}

tpu_hlo_value tpu_hlo_barrier(tpu_hlo_builder *b, tpu_hlo_value x) {
  if (!check_operands(b, "stablehlo.optimization_barrier", &x, 1)) return TPU_HLO_NONE;
  tpu_hlo_type t = b->values[x].type;
  return op1(b, "stablehlo.optimization_barrier", &x, 1, NULL, &t);
}

tpu_hlo_value tpu_hlo_bitcast(tpu_hlo_builder *b, tpu_hlo_value x, const tpu_hlo_type *to) {
  if (!check_operands(b, "stablehlo.bitcast_convert", &x, 1)) return TPU_HLO_NONE;
  if (tpu_hlo_type_equal(&b->values[x].type, to)) return x;
  return op1(b, "stablehlo.bitcast_convert", &x, 1, NULL, to);
}

/* --- shapes ------------------------------------------------------------------------------ */

tpu_hlo_value tpu_hlo_reshape(tpu_hlo_builder *b, tpu_hlo_value x, int rank, const int64_t *dims) {
  if (!check_operands(b, "stablehlo.reshape", &x, 1)) return TPU_HLO_NONE;
  tpu_hlo_type t = tpu_hlo_make_type(b->values[x].type.dtype, rank, dims);
  if (rank > TPU_HLO_MAX_RANK) return tpu_hlo_fail(b, TPU_ERR_NOT_IMPLEMENTED, "tensors of more than %d dimensions are not supported", TPU_HLO_MAX_RANK);
  if (tpu_hlo_type_numel(&t) != tpu_hlo_type_numel(&b->values[x].type))
    return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: reshape changes the element count");
  if (tpu_hlo_type_equal(&t, &b->values[x].type)) return x;
  return op1(b, "stablehlo.reshape", &x, 1, NULL, &t);
}

tpu_hlo_value tpu_hlo_broadcast_in_dim(tpu_hlo_builder *b, tpu_hlo_value x, const tpu_hlo_type *to,
                                       const int64_t *bdims) {
  if (!check_operands(b, "stablehlo.broadcast_in_dim", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type;
  bool identity = tx->rank == to->rank;
  for (int i = 0; i < tx->rank; i++) {
    if (bdims[i] < 0 || bdims[i] >= to->rank ||
        (tx->dims[i] != 1 && tx->dims[i] != to->dims[bdims[i]]))
      return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: bad broadcast_in_dim");
    if (bdims[i] != i || tx->dims[i] != to->dims[i]) identity = false;
  }
  tpu_hlo_type t = *to;
  t.dtype = tx->dtype;
  if (identity) return x;
  return op1_array(b, "stablehlo.broadcast_in_dim", &x, 1, "broadcast_dimensions", bdims, tx->rank, &t);
}

tpu_hlo_value tpu_hlo_broadcast_to(tpu_hlo_builder *b, tpu_hlo_value x, const tpu_hlo_type *to) {
  if (!check_operands(b, "broadcast", &x, 1)) return TPU_HLO_NONE;
  x = tpu_hlo_convert(b, x, to->dtype);
  if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type;
  if (tx->rank > to->rank)
    return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: cannot broadcast rank %d to rank %d",
                        tx->rank, to->rank);
  int64_t bdims[TPU_HLO_MAX_RANK];
  for (int i = 0; i < tx->rank; i++) bdims[i] = to->rank - tx->rank + i;
  return tpu_hlo_broadcast_in_dim(b, x, to, bdims);
}

tpu_hlo_value tpu_hlo_transpose(tpu_hlo_builder *b, tpu_hlo_value x, const int64_t *perm) {
  if (!check_operands(b, "stablehlo.transpose", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type;
  tpu_hlo_type t = *tx;
  bool identity = true;
  for (int i = 0; i < tx->rank; i++) {
    if (perm[i] < 0 || perm[i] >= tx->rank) return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: bad permutation");
    t.dims[i] = tx->dims[perm[i]];
    if (perm[i] != i) identity = false;
  }
  if (identity) return x;
  const value_info *vx = &b->values[x];
  if (vx->transposed != TPU_HLO_NONE && vx->depth == b->depth) { /* a transpose of a transpose: one */
    int64_t both[TPU_HLO_MAX_RANK];
    for (int i = 0; i < tx->rank; i++) both[i] = vx->perm[perm[i]];
    return tpu_hlo_transpose(b, vx->transposed, both);
  }
  const int rank = tx->rank;
  tpu_hlo_value y = op1_array(b, "stablehlo.transpose", &x, 1, "permutation", perm, rank, &t); /* may move b->values */
  if (valid(b, y)) {
    value_info *vy = &b->values[y];
    vy->transposed = x;
    vy->depth = (int8_t)b->depth;
    for (int i = 0; i < rank; i++) vy->perm[i] = (int8_t)perm[i];
  }
  return y;
}

bool tpu_hlo_is_transpose(const tpu_hlo_builder *b, tpu_hlo_value v, const int64_t *perm) {
  if (!valid(b, v) || b->values[v].transposed == TPU_HLO_NONE || b->values[v].depth != b->depth) return false;
  for (int i = 0; i < b->values[v].type.rank; i++)
    if (b->values[v].perm[i] != perm[i]) return false;
  return true;
}

tpu_hlo_value tpu_hlo_slice(tpu_hlo_builder *b, tpu_hlo_value x, const int64_t *start,
                            const int64_t *limit, const int64_t *stride) {
  if (!check_operands(b, "stablehlo.slice", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type;
  tpu_hlo_type t = *tx;
  bool identity = true;
  for (int i = 0; i < tx->rank; i++) {
    int64_t st = stride ? stride[i] : 1;
    if (st < 1 || start[i] < 0 || limit[i] > tx->dims[i] || start[i] > limit[i])
      return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: bad slice of dim %d", i);
    t.dims[i] = (limit[i] - start[i] + st - 1) / st;
    if (t.dims[i] != tx->dims[i]) identity = false;
  }
  if (identity) return x;
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  int64_t ones[TPU_HLO_MAX_RANK];
  for (int i = 0; i < tx->rank; i++) ones[i] = 1;
  tpu_strbuf_puts(&attrs, "start_indices = ");
  put_i64_array(&attrs, start, tx->rank);
  tpu_strbuf_puts(&attrs, ", limit_indices = ");
  put_i64_array(&attrs, limit, tx->rank);
  tpu_strbuf_puts(&attrs, ", strides = ");
  put_i64_array(&attrs, stride ? stride : ones, tx->rank);
  tpu_hlo_value out = op1(b, "stablehlo.slice", &x, 1, attr_text(b, &attrs), &t);
  tpu_strbuf_release(&attrs);
  return out;
}

tpu_hlo_value tpu_hlo_slice_dim(tpu_hlo_builder *b, tpu_hlo_value x, int dim, int64_t start,
                                int64_t limit, int64_t stride) {
  if (!check_operands(b, "stablehlo.slice", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type;
  if (dim < 0 || dim >= tx->rank) return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: bad slice dim");
  int64_t s[TPU_HLO_MAX_RANK], l[TPU_HLO_MAX_RANK], st[TPU_HLO_MAX_RANK];
  for (int i = 0; i < tx->rank; i++) {
    s[i] = 0;
    l[i] = tx->dims[i];
    st[i] = 1;
  }
  s[dim] = start;
  l[dim] = limit;
  st[dim] = stride;
  return tpu_hlo_slice(b, x, s, l, st);
}

tpu_hlo_value tpu_hlo_dynamic_slice(tpu_hlo_builder *b, tpu_hlo_value x, const tpu_hlo_value *starts,
                                    const int64_t *sizes) {
  if (!check_operands(b, "stablehlo.dynamic_slice", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type;
  int r = tx->rank;
  tpu_hlo_value ops[TPU_HLO_MAX_RANK + 1];
  ops[0] = x;
  for (int i = 0; i < r; i++) ops[i + 1] = starts[i];
  tpu_hlo_type t = *tx;
  for (int i = 0; i < r; i++) t.dims[i] = sizes[i];
  return op1_array(b, "stablehlo.dynamic_slice", ops, r + 1, "slice_sizes", sizes, r, &t);
}

tpu_hlo_value tpu_hlo_dynamic_update_slice(tpu_hlo_builder *b, tpu_hlo_value x, tpu_hlo_value update,
                                           const tpu_hlo_value *starts) {
  if (!check_operands(b, "stablehlo.dynamic_update_slice", &x, 1)) return TPU_HLO_NONE;
  int r = b->values[x].type.rank;
  tpu_hlo_value ops[TPU_HLO_MAX_RANK + 2];
  ops[0] = x;
  ops[1] = update;
  for (int i = 0; i < r; i++) ops[i + 2] = starts[i];
  return op1(b, "stablehlo.dynamic_update_slice", ops, r + 2, NULL, &b->values[x].type);
}

tpu_hlo_value tpu_hlo_concatenate(tpu_hlo_builder *b, const tpu_hlo_value *xs, int n, int dim) {
  if (n <= 0 || !check_operands(b, "stablehlo.concatenate", xs, n)) {
    if (n <= 0) tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: concatenate of nothing");
    return TPU_HLO_NONE;
  }
  if (n == 1) return xs[0];
  tpu_hlo_type t = b->values[xs[0]].type;
  t.dims[dim] = 0;
  for (int i = 0; i < n; i++) t.dims[dim] += b->values[xs[i]].type.dims[dim];
  char attrs[64];
  snprintf(attrs, sizeof attrs, "dimension = %d : i64", dim);
  return op1(b, "stablehlo.concatenate", xs, n, attrs, &t);
}

tpu_hlo_value tpu_hlo_pad(tpu_hlo_builder *b, tpu_hlo_value x, tpu_hlo_value pad_value,
                          const int64_t *low, const int64_t *high, const int64_t *interior) {
  tpu_hlo_value ops[2] = {x, pad_value};
  if (!check_operands(b, "stablehlo.pad", ops, 2)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type;
  tpu_hlo_type t = *tx;
  int64_t zeros[TPU_HLO_MAX_RANK] = {0};
  bool identity = true;
  for (int i = 0; i < tx->rank; i++) {
    int64_t in = interior ? interior[i] : 0;
    int64_t base = tx->dims[i] == 0 ? 0 : tx->dims[i] + (tx->dims[i] - 1) * in;
    t.dims[i] = base + low[i] + high[i];
    if (t.dims[i] < 0) return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: pad gives a negative size");
    if (low[i] || high[i] || in) identity = false;
  }
  if (identity) return x;
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&attrs, "edge_padding_low = ");
  put_i64_array(&attrs, low, tx->rank);
  tpu_strbuf_puts(&attrs, ", edge_padding_high = ");
  put_i64_array(&attrs, high, tx->rank);
  tpu_strbuf_puts(&attrs, ", interior_padding = ");
  put_i64_array(&attrs, interior ? interior : zeros, tx->rank);
  tpu_hlo_value out = op1(b, "stablehlo.pad", ops, 2, attr_text(b, &attrs), &t);
  tpu_strbuf_release(&attrs);
  return out;
}

tpu_hlo_value tpu_hlo_iota(tpu_hlo_builder *b, const tpu_hlo_type *t, int dim) {
  if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
  if (dim < 0 || dim >= t->rank) return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: bad iota dim");
  char attrs[64];
  snprintf(attrs, sizeof attrs, "iota_dimension = %d : i64", dim);
  return op1(b, "stablehlo.iota", NULL, 0, attrs, t);
}

tpu_hlo_value tpu_hlo_reverse(tpu_hlo_builder *b, tpu_hlo_value x, const int64_t *dims, int n) {
  if (!check_operands(b, "stablehlo.reverse", &x, 1)) return TPU_HLO_NONE;
  if (n == 0) return x;
  return op1_array(b, "stablehlo.reverse", &x, 1, "dimensions", dims, n, &b->values[x].type);
}

/* --- linear algebra ------------------------------------------------------------------- */

static const char *precision_name(tpu_hlo_precision_t p) {
  return p == TPU_HLO_PRECISION_HIGHEST ? "HIGHEST" : p == TPU_HLO_PRECISION_HIGH ? "HIGH" : "DEFAULT";
}

static bool contains(const int64_t *v, int n, int64_t x) {
  for (int i = 0; i < n; i++)
    if (v[i] == x) return true;
  return false;
}

tpu_hlo_value tpu_hlo_dot_general(tpu_hlo_builder *b, tpu_hlo_value lhs, tpu_hlo_value rhs,
                                  const tpu_hlo_dot_dims *d, tpu_dtype_t out,
                                  tpu_hlo_precision_t precision) {
  tpu_hlo_value ops[2] = {lhs, rhs};
  if (!check_operands(b, "stablehlo.dot_general", ops, 2)) return TPU_HLO_NONE;
  const tpu_hlo_type *tl = &b->values[lhs].type, *tr = &b->values[rhs].type;
  if (tl->rank + tr->rank - d->num_batch - 2 * d->num_contract > TPU_HLO_MAX_RANK)
    return tpu_hlo_fail(b, TPU_ERR_NOT_IMPLEMENTED, "a dot product of more than %d dimensions", TPU_HLO_MAX_RANK);
  tpu_hlo_type t = tpu_hlo_make_type(out, 0, NULL);
  for (int i = 0; i < d->num_batch; i++) {
    if (tl->dims[d->lhs_batch[i]] != tr->dims[d->rhs_batch[i]])
      return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: dot batch dims differ");
    t.dims[t.rank++] = tl->dims[d->lhs_batch[i]];
  }
  for (int i = 0; i < d->num_contract; i++)
    if (tl->dims[d->lhs_contract[i]] != tr->dims[d->rhs_contract[i]])
      return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: dot contracting dims differ");
  for (int i = 0; i < tl->rank; i++)
    if (!contains(d->lhs_batch, d->num_batch, i) && !contains(d->lhs_contract, d->num_contract, i))
      t.dims[t.rank++] = tl->dims[i];
  for (int i = 0; i < tr->rank; i++)
    if (!contains(d->rhs_batch, d->num_batch, i) && !contains(d->rhs_contract, d->num_contract, i))
      t.dims[t.rank++] = tr->dims[i];
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&attrs, "dot_dimension_numbers = #stablehlo.dot<");
  bool first = true;
  if (d->num_batch) {
    tpu_strbuf_puts(&attrs, "lhs_batching_dimensions = ");
    put_i64_list(&attrs, d->lhs_batch, d->num_batch);
    tpu_strbuf_puts(&attrs, ", rhs_batching_dimensions = ");
    put_i64_list(&attrs, d->rhs_batch, d->num_batch);
    first = false;
  }
  if (d->num_contract) {
    tpu_strbuf_puts(&attrs, first ? "lhs_contracting_dimensions = " : ", lhs_contracting_dimensions = ");
    put_i64_list(&attrs, d->lhs_contract, d->num_contract);
    tpu_strbuf_puts(&attrs, ", rhs_contracting_dimensions = ");
    put_i64_list(&attrs, d->rhs_contract, d->num_contract);
  }
  tpu_strbuf_printf(&attrs, ">, precision_config = [#stablehlo<precision %s>, #stablehlo<precision %s>]",
                    precision_name(precision), precision_name(precision));
  tpu_hlo_value r = op1(b, "stablehlo.dot_general", ops, 2, attr_text(b, &attrs), &t);
  tpu_strbuf_release(&attrs);
  return r;
}

void tpu_hlo_conv_init(tpu_hlo_conv *c, int spatial) {
  memset(c, 0, sizeof *c);
  c->spatial = spatial;
  c->feature_groups = c->batch_groups = 1;
  c->lhs_batch = 0;
  c->lhs_feature = 1;
  c->rhs_out = 0;
  c->rhs_in = 1;
  c->out_batch = 0;
  c->out_feature = 1;
  for (int i = 0; i < spatial; i++) {
    c->stride[i] = c->lhs_dilation[i] = c->rhs_dilation[i] = 1;
    c->lhs_spatial[i] = c->rhs_spatial[i] = c->out_spatial[i] = 2 + i;
  }
}

static void put_conv_layout(tpu_strbuf *sb, int rank, int64_t a, char ca, int64_t f, char cf,
                            const int64_t *spatial) {
  char letters[TPU_HLO_MAX_RANK][12];
  for (int i = 0; i < rank; i++) letters[i][0] = '\0';
  if (a < rank) snprintf(letters[a], sizeof letters[a], "%c", ca);
  if (f < rank) snprintf(letters[f], sizeof letters[f], "%c", cf);
  for (int i = 0; i < rank - 2; i++)
    if (spatial[i] < rank) snprintf(letters[spatial[i]], sizeof letters[0], "%d", i);
  tpu_strbuf_puts(sb, "[");
  for (int i = 0; i < rank; i++) tpu_strbuf_printf(sb, "%s%s", i ? ", " : "", letters[i]);
  tpu_strbuf_puts(sb, "]");
}

tpu_hlo_value tpu_hlo_convolution(tpu_hlo_builder *b, tpu_hlo_value lhs, tpu_hlo_value rhs,
                                  const tpu_hlo_conv *c, const tpu_hlo_type *out,
                                  tpu_hlo_precision_t precision) {
  tpu_hlo_value ops[2] = {lhs, rhs};
  if (!check_operands(b, "stablehlo.convolution", ops, 2)) return TPU_HLO_NONE;
  int rank = c->spatial + 2;
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  tpu_strbuf_printf(&attrs, "batch_group_count = %lld : i64, dimension_numbers = #stablehlo.conv<",
                    (long long)c->batch_groups);
  put_conv_layout(&attrs, rank, c->lhs_batch, 'b', c->lhs_feature, 'f', c->lhs_spatial);
  tpu_strbuf_puts(&attrs, "x");
  put_conv_layout(&attrs, rank, c->rhs_out, 'o', c->rhs_in, 'i', c->rhs_spatial);
  tpu_strbuf_puts(&attrs, "->");
  put_conv_layout(&attrs, rank, c->out_batch, 'b', c->out_feature, 'f', c->out_spatial);
  tpu_strbuf_printf(&attrs, ">, feature_group_count = %lld : i64, lhs_dilation = ",
                    (long long)c->feature_groups);
  put_i64_array(&attrs, c->lhs_dilation, c->spatial);
  tpu_strbuf_puts(&attrs, ", padding = dense<[");
  for (int i = 0; i < c->spatial; i++)
    tpu_strbuf_printf(&attrs, "%s[%lld, %lld]", i ? ", " : "", (long long)c->pad_lo[i],
                      (long long)c->pad_hi[i]);
  tpu_strbuf_printf(&attrs, "]> : tensor<%dx2xi64>, precision_config = [#stablehlo<precision %s>, "
                            "#stablehlo<precision %s>], rhs_dilation = ",
                    c->spatial, precision_name(precision), precision_name(precision));
  put_i64_array(&attrs, c->rhs_dilation, c->spatial);
  tpu_strbuf_puts(&attrs, ", window_strides = ");
  put_i64_array(&attrs, c->stride, c->spatial);
  tpu_hlo_value r = op1(b, "stablehlo.convolution", ops, 2, attr_text(b, &attrs), out);
  tpu_strbuf_release(&attrs);
  return r;
}

/* --- reductions, windows, gather/scatter, sort, rng ---------------------------------- */

void tpu_hlo_reduce(tpu_hlo_builder *b, const tpu_hlo_value *xs, const tpu_hlo_value *inits, int n,
                    const int64_t *dims, int num_dims, tpu_hlo_region *body, tpu_hlo_value *out) {
  tpu_hlo_value ops[2 * 8];
  tpu_hlo_type types[8];
  if (n > 8 || !check_operands(b, "stablehlo.reduce", xs, n) ||
      !check_operands(b, "stablehlo.reduce", inits, n)) {
    tpu_hlo_region_release(body);
    for (int i = 0; i < n; i++) out[i] = TPU_HLO_NONE;
    return;
  }
  for (int i = 0; i < n; i++) {
    ops[i] = xs[i];
    ops[n + i] = inits[i];
    const tpu_hlo_type *tx = &b->values[xs[i]].type;
    types[i] = tpu_hlo_make_type(tx->dtype, 0, NULL);
    for (int d = 0; d < tx->rank; d++)
      if (!contains(dims, num_dims, d)) types[i].dims[types[i].rank++] = tx->dims[d];
  }
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&attrs, "dimensions = ");
  put_i64_array(&attrs, dims, num_dims);
  tpu_hlo_op(b, "stablehlo.reduce", ops, 2 * n, body, 1, attr_text(b, &attrs), types, n, out);
  tpu_strbuf_release(&attrs);
}

tpu_hlo_value tpu_hlo_reduce_simple(tpu_hlo_builder *b, tpu_hlo_value x, tpu_hlo_value init,
                                    tpu_hlo_binary_t op, const int64_t *dims, int num_dims) {
  if (!check_operands(b, "stablehlo.reduce", &x, 1)) return TPU_HLO_NONE;
  if (num_dims == 0) return x;
  tpu_hlo_region body;
  tpu_hlo_region_binary(b, op, b->values[x].type.dtype, &body);
  tpu_hlo_value out;
  tpu_hlo_reduce(b, &x, &init, 1, dims, num_dims, &body, &out);
  return out;
}

void tpu_hlo_window_init(tpu_hlo_window *w, int rank) {
  memset(w, 0, sizeof *w);
  for (int i = 0; i < rank; i++) w->dims[i] = w->strides[i] = w->base_dilations[i] = w->window_dilations[i] = 1;
}

static void put_window_attrs(tpu_strbuf *sb, const tpu_hlo_window *w, int rank, bool dilations) {
  if (dilations) {
    tpu_strbuf_puts(sb, "base_dilations = ");
    put_i64_array(sb, w->base_dilations, rank);
    tpu_strbuf_puts(sb, ", ");
  }
  tpu_strbuf_puts(sb, "padding = dense<[");
  for (int i = 0; i < rank; i++)
    tpu_strbuf_printf(sb, "%s[%lld, %lld]", i ? ", " : "", (long long)w->pad_lo[i], (long long)w->pad_hi[i]);
  tpu_strbuf_printf(sb, "]> : tensor<%dx2xi64>", rank);
  if (dilations) {
    tpu_strbuf_puts(sb, ", window_dilations = ");
    put_i64_array(sb, w->window_dilations, rank);
  }
  tpu_strbuf_puts(sb, ", window_dimensions = ");
  put_i64_array(sb, w->dims, rank);
  tpu_strbuf_puts(sb, ", window_strides = ");
  put_i64_array(sb, w->strides, rank);
}

void tpu_hlo_reduce_window(tpu_hlo_builder *b, const tpu_hlo_value *xs, const tpu_hlo_value *inits,
                           int n, const tpu_hlo_window *w, tpu_hlo_region *body,
                           tpu_hlo_value *out) {
  tpu_hlo_value ops[2 * 8];
  tpu_hlo_type types[8];
  if (n > 8 || !check_operands(b, "stablehlo.reduce_window", xs, n) ||
      !check_operands(b, "stablehlo.reduce_window", inits, n)) {
    tpu_hlo_region_release(body);
    for (int i = 0; i < n; i++) out[i] = TPU_HLO_NONE;
    return;
  }
  int rank = b->values[xs[0]].type.rank;
  for (int i = 0; i < n; i++) {
    ops[i] = xs[i];
    ops[n + i] = inits[i];
    types[i] = b->values[xs[i]].type;
    for (int d = 0; d < rank; d++) {
      int64_t in = types[i].dims[d];
      int64_t dilated_in = in == 0 ? 0 : (in - 1) * w->base_dilations[d] + 1;
      int64_t padded = dilated_in + w->pad_lo[d] + w->pad_hi[d];
      int64_t win = (w->dims[d] - 1) * w->window_dilations[d] + 1;
      types[i].dims[d] = padded < win ? 0 : (padded - win) / w->strides[d] + 1;
    }
  }
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  put_window_attrs(&attrs, w, rank, true);
  tpu_hlo_op(b, "stablehlo.reduce_window", ops, 2 * n, body, 1, attr_text(b, &attrs), types, n, out);
  tpu_strbuf_release(&attrs);
}

tpu_hlo_value tpu_hlo_select_and_scatter(tpu_hlo_builder *b, tpu_hlo_value operand,
                                         tpu_hlo_value source, tpu_hlo_value init,
                                         const tpu_hlo_window *w, tpu_hlo_region *select,
                                         tpu_hlo_region *scatter) {
  tpu_hlo_value ops[3] = {operand, source, init};
  tpu_hlo_region regions[2] = {*select, *scatter};
  select->text = scatter->text = NULL;
  if (!check_operands(b, "stablehlo.select_and_scatter", ops, 3)) {
    tpu_hlo_region_release(&regions[0]);
    tpu_hlo_region_release(&regions[1]);
    return TPU_HLO_NONE;
  }
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  put_window_attrs(&attrs, w, b->values[operand].type.rank, false);
  tpu_hlo_value out;
  tpu_hlo_op(b, "stablehlo.select_and_scatter", ops, 3, regions, 2, attr_text(b, &attrs),
             &b->values[operand].type, 1, &out);
  tpu_strbuf_release(&attrs);
  return out;
}

tpu_hlo_value tpu_hlo_gather(tpu_hlo_builder *b, tpu_hlo_value operand, tpu_hlo_value indices,
                             const tpu_hlo_gather_dims *d, const int64_t *slice_sizes,
                             const tpu_hlo_type *out) {
  tpu_hlo_value ops[2] = {operand, indices};
  if (!check_operands(b, "stablehlo.gather", ops, 2)) return TPU_HLO_NONE;
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&attrs, "dimension_numbers = #stablehlo.gather<offset_dims = ");
  put_i64_list(&attrs, d->offset_dims, d->num_offset);
  tpu_strbuf_puts(&attrs, ", collapsed_slice_dims = ");
  put_i64_list(&attrs, d->collapsed_slice_dims, d->num_collapsed);
  if (d->num_operand_batch) {
    tpu_strbuf_puts(&attrs, ", operand_batching_dims = ");
    put_i64_list(&attrs, d->operand_batching_dims, d->num_operand_batch);
    tpu_strbuf_puts(&attrs, ", start_indices_batching_dims = ");
    put_i64_list(&attrs, d->start_indices_batching_dims, d->num_indices_batch);
  }
  tpu_strbuf_puts(&attrs, ", start_index_map = ");
  put_i64_list(&attrs, d->start_index_map, d->num_start_map);
  tpu_strbuf_printf(&attrs, ", index_vector_dim = %lld>, indices_are_sorted = false, slice_sizes = ",
                    (long long)d->index_vector_dim);
  put_i64_array(&attrs, slice_sizes, b->values[operand].type.rank);
  tpu_hlo_value r = op1(b, "stablehlo.gather", ops, 2, attr_text(b, &attrs), out);
  tpu_strbuf_release(&attrs);
  return r;
}

tpu_hlo_value tpu_hlo_scatter(tpu_hlo_builder *b, tpu_hlo_value operand, tpu_hlo_value indices,
                              tpu_hlo_value updates, const tpu_hlo_scatter_dims *d,
                              tpu_hlo_region *body, bool unique_indices) {
  tpu_hlo_value ops[3] = {operand, indices, updates};
  tpu_hlo_region region = {NULL};
  if (body != NULL) {
    region = *body;
    body->text = NULL;
  }
  if (!check_operands(b, "stablehlo.scatter", ops, 3)) {
    tpu_hlo_region_release(&region);
    return TPU_HLO_NONE;
  }
  if (region.text == NULL) { /* replace: the update wins */
    tpu_hlo_type s = tpu_hlo_make_type(b->values[operand].type.dtype, 0, NULL);
    tpu_hlo_type ts[2] = {s, s};
    tpu_hlo_value args[2];
    tpu_hlo_region_begin(b, 2, ts, args);
    tpu_hlo_region_end(b, &args[1], 1, &region);
  }
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&attrs, "indices_are_sorted = false, scatter_dimension_numbers = "
                          "#stablehlo.scatter<update_window_dims = ");
  put_i64_list(&attrs, d->update_window_dims, d->num_update_window);
  tpu_strbuf_puts(&attrs, ", inserted_window_dims = ");
  put_i64_list(&attrs, d->inserted_window_dims, d->num_inserted);
  if (d->num_input_batch) {
    tpu_strbuf_puts(&attrs, ", input_batching_dims = ");
    put_i64_list(&attrs, d->input_batching_dims, d->num_input_batch);
    tpu_strbuf_puts(&attrs, ", scatter_indices_batching_dims = ");
    put_i64_list(&attrs, d->scatter_indices_batching_dims, d->num_indices_batch);
  }
  tpu_strbuf_puts(&attrs, ", scatter_dims_to_operand_dims = ");
  put_i64_list(&attrs, d->scatter_dims_to_operand_dims, d->num_to_operand);
  tpu_strbuf_printf(&attrs, ", index_vector_dim = %lld>, unique_indices = %s",
                    (long long)d->index_vector_dim, unique_indices ? "true" : "false");
  tpu_hlo_value out;
  tpu_hlo_op(b, "stablehlo.scatter", ops, 3, &region, 1, attr_text(b, &attrs), &b->values[operand].type, 1,
             &out);
  tpu_strbuf_release(&attrs);
  return out;
}

void tpu_hlo_sort(tpu_hlo_builder *b, const tpu_hlo_value *xs, int n, int dim, bool stable,
                  tpu_hlo_region *cmp, tpu_hlo_value *out) {
  tpu_hlo_type types[8];
  if (n > 8 || !check_operands(b, "stablehlo.sort", xs, n)) {
    tpu_hlo_region_release(cmp);
    for (int i = 0; i < n; i++) out[i] = TPU_HLO_NONE;
    return;
  }
  for (int i = 0; i < n; i++) types[i] = b->values[xs[i]].type;
  char attrs[96];
  snprintf(attrs, sizeof attrs, "dimension = %d : i64, is_stable = %s", dim, stable ? "true" : "false");
  tpu_hlo_op(b, "stablehlo.sort", xs, n, cmp, 1, attrs, types, n, out);
}

void tpu_hlo_rng_bits(tpu_hlo_builder *b, tpu_hlo_value state, const tpu_hlo_type *bits_type,
                      tpu_hlo_value *out_state, tpu_hlo_value *out_bits) {
  tpu_hlo_value outs[2] = {TPU_HLO_NONE, TPU_HLO_NONE};
  if (check_operands(b, "stablehlo.rng_bit_generator", &state, 1)) {
    tpu_hlo_type types[2] = {b->values[state].type, *bits_type};
    tpu_hlo_op(b, "stablehlo.rng_bit_generator", &state, 1, NULL, 0,
               "rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>", types, 2, outs);
  }
  *out_state = outs[0];
  *out_bits = outs[1];
}
