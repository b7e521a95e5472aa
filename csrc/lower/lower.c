/* The rule registry and the helpers every rule uses. */
#include "lower/lower.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "kernels/kernels.h"
#include "lower/rules.h"

typedef struct rule_table {
  const tpu_lower_rule *rules;
  const int *count;
} rule_table;

static const rule_table tables[] = {
    {tpu_rules_elementwise, &tpu_rules_elementwise_count},
    {tpu_rules_activation, &tpu_rules_activation_count},
    {tpu_rules_reduce, &tpu_rules_reduce_count},
    {tpu_rules_shape, &tpu_rules_shape_count},
    {tpu_rules_linalg, &tpu_rules_linalg_count},
    {tpu_rules_nn, &tpu_rules_nn_count},
    {tpu_rules_norm, &tpu_rules_norm_count},
    {tpu_rules_loss, &tpu_rules_loss_count},
    {tpu_rules_index, &tpu_rules_index_count},
    {tpu_rules_random, &tpu_rules_random_count},
    {tpu_rules_conv, &tpu_rules_conv_count},
    {tpu_rules_pool, &tpu_rules_pool_count},
    {tpu_rules_resample, &tpu_rules_resample_count},
    {tpu_rules_view, &tpu_rules_view_count},
    {tpu_rules_fft, &tpu_rules_fft_count},
    {tpu_rules_sort, &tpu_rules_sort_count},
    {tpu_rules_special, &tpu_rules_special_count},
    {tpu_rules_factor, &tpu_rules_factor_count},
    {tpu_rules_svd, &tpu_rules_svd_count},
    {tpu_rules_ldl, &tpu_rules_ldl_count},
    {tpu_rules_qr, &tpu_rules_qr_count},
    {tpu_rules_eig, &tpu_rules_eig_count},
    {tpu_rules_attention, &tpu_rules_attention_count},
    {tpu_rules_paged_attention, &tpu_rules_paged_attention_count},
    {tpu_rules_rnn, &tpu_rules_rnn_count},
    {tpu_rules_ctc, &tpu_rules_ctc_count},
    {tpu_rules_optim, &tpu_rules_optim_count},
};

int tpu_lower_rule_count(void) {
  int n = 0;
  for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) n += *tables[t].count;
  return n;
}

const tpu_lower_rule *tpu_lower_rule_at(int i) {
  for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
    if (i < *tables[t].count) return &tables[t].rules[i];
    i -= *tables[t].count;
  }
  return NULL;
}

const tpu_lower_rule *tpu_lower_find(const char *name) {
  if (strncmp(name, "aten::", 6) == 0) name += 6;
  int n = tpu_lower_rule_count();
  for (int i = 0; i < n; i++) {
    const tpu_lower_rule *r = tpu_lower_rule_at(i);
    for (int k = 0; k < 4 && r->names[k] != NULL; k++)
      if (strcmp(r->names[k], name) == 0) return r;
  }
  return NULL;
}

tpu_status_t tpu_lower_run(const tpu_lower_rule *rule, tpu_lower_ctx *c) {
  for (int i = 0; i < c->num_outputs; i++) c->outputs[i] = TPU_HLO_NONE;
  c->data = rule->data;
  c->num_checks = 0;
  const tpu_lower_admit *admit = &rule->admit;
  if (admit->dtypes != 0) {
    tpu_dtype_t t = admit->arg == TPU_ADMIT_OUTPUT ? c->out_types[0].dtype
                    : admit->arg < c->num_args ? c->args[admit->arg].dtype
                                               : TPU_INVALID;
    if (!(admit->dtypes & TPU_DT(t))) return tpu_lower_not_implemented(admit->kernel, t);
  }
  tpu_status_t st = rule->fn(c);
  if (st != NULL) return st;
  TPU_RETURN_IF_ERROR(tpu_hlo_status(c->b));
  for (int i = 0; i < c->num_outputs; i++)
    if (c->outputs[i] == TPU_HLO_NONE && c->out_types[i].dtype != TPU_INVALID)
      return tpu_status_new(TPU_ERR_RUNTIME, "%s: internal: the lowering left output %d unset", c->op, i);
  return NULL;
}

tpu_status_t tpu_lower_not_implemented(const char *kernel, tpu_dtype_t t) {
  return tpu_status_new(TPU_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s'", kernel, tpu_dtype_scalar_type(t));
}

tpu_status_t tpu_lower_error(tpu_lower_ctx *c, tpu_code_t code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return tpu_status_new(code, "%s", msg);
}

tpu_hlo_value tpu_lower_all_or_first(tpu_lower_ctx *c, tpu_hlo_value ok, tpu_hlo_value x, tpu_hlo_value *out_value) {
  tpu_hlo_builder *b = c->b;
  int64_t n = tpu_hlo_type_numel(tpu_hlo_type_of(b, ok)), axis = 0;
  tpu_hlo_value good = tpu_hlo_reshape(b, ok, 1, &n), f = tpu_hlo_reshape(b, tpu_hlo_convert(b, x, TPU_S64), 1, &n);
  tpu_hlo_type t = *tpu_hlo_type_of(b, f);
  tpu_hlo_value pos = tpu_hlo_iota(b, &t, 0), none = tpu_hlo_const_i64(b, &t, n);
  tpu_hlo_value first = tpu_lower_reduce(b, tpu_hlo_select(b, good, none, pos), TPU_HLO_MIN, &axis, 1);
  tpu_hlo_value at_first = tpu_hlo_compare(b, TPU_HLO_EQ, pos, tpu_hlo_broadcast_to(b, first, &t));
  *out_value = tpu_lower_reduce(b, tpu_hlo_select(b, at_first, f, tpu_hlo_const_i64(b, &t, 0)), TPU_HLO_ADD, &axis, 1);
  /* GE: an empty |ok|'s minimum is the reduction's identity, past n */
  return tpu_hlo_compare(b, TPU_HLO_GE, first, tpu_hlo_scalar_i64(b, TPU_S64, n));
}

void tpu_lower_require_values(tpu_lower_ctx *c, tpu_hlo_value ok, int n, const tpu_hlo_value *values, tpu_code_t code,
                              const char *format) {
  if (c->num_checks == TPU_LOWER_MAX_CHECKS || n > TPU_LOWER_CHECK_VALUES) {
    tpu_hlo_fail(c->b, TPU_ERR_RUNTIME, "%s: internal: too many runtime checks", c->op);
    return;
  }
  const tpu_hlo_type *t = tpu_hlo_type_of(c->b, ok);
  if (!tpu_hlo_failed(c->b) && (t->dtype != TPU_BOOL || t->rank != 0)) {
    tpu_hlo_fail(c->b, TPU_ERR_RUNTIME, "%s: internal: a check must be a boolean scalar", c->op);
    return;
  }
  tpu_lower_check *k = &c->checks[c->num_checks++];
  *k = (tpu_lower_check){.ok = ok, .code = code, .message = format, .num_values = n};
  for (int i = 0; i < n; i++) k->values[i] = tpu_hlo_convert(c->b, values[i], TPU_S64);
}

void tpu_lower_require(tpu_lower_ctx *c, tpu_hlo_value ok, tpu_code_t code, const char *message) {
  tpu_lower_require_values(c, ok, 0, NULL, code, message);
}

bool tpu_lower_is_none(const tpu_lower_ctx *c, int arg) {
  return arg >= c->num_args || c->args[arg].kind == TPU_ARG_NONE;
}

tpu_hlo_value tpu_lower_tensor(tpu_lower_ctx *c, int arg) {
  if (arg >= c->num_args) return tpu_hlo_fail(c->b, TPU_ERR_RUNTIME, "%s: internal: missing argument %d", c->op, arg);
  const tpu_lower_arg *a = &c->args[arg];
  if (a->kind == TPU_ARG_SCALAR && a->is_const) {
    if (tpu_dtype_is_complex(a->dtype)) return tpu_hlo_scalar_complex(c->b, a->dtype, a->f, a->fi);
    if (tpu_dtype_is_float(a->dtype)) return tpu_hlo_scalar_f64(c->b, a->dtype, a->f);
    return tpu_hlo_scalar_i64(c->b, a->dtype, a->i);
  }
  if (a->kind != TPU_ARG_TENSOR && a->kind != TPU_ARG_SCALAR)
    return tpu_hlo_fail(c->b, TPU_ERR_RUNTIME, "%s: internal: argument %d is not a tensor", c->op, arg);
  return c->fetch(c, arg, -1);
}

tpu_hlo_value tpu_lower_list_item(tpu_lower_ctx *c, int arg, int item) {
  if (arg >= c->num_args || c->args[arg].kind != TPU_ARG_TENSOR_LIST || item >= c->args[arg].n)
    return tpu_hlo_fail(c->b, TPU_ERR_RUNTIME, "%s: internal: bad list item %d of argument %d", c->op, item, arg);
  return c->fetch(c, arg, item);
}

/* The C++ type PyTorch's checked scalar conversions name (c10::demangle). */
static const char *cpp_type_name(tpu_dtype_t t) {
  switch (t) {
    case TPU_F32: return "float";
    case TPU_F64: return "double";
    case TPU_F16: return "c10::Half";
    case TPU_BF16: return "c10::BFloat16";
    case TPU_S64: return "int64_t";
    case TPU_S32: return "int";
    case TPU_S16: return "int16_t";
    case TPU_S8: return "int8_t";
    case TPU_U8: return "uint8_t";
    default: return tpu_dtype_name(t);
  }
}

/* A complex number that a CPU kernel converts to a real |dtype| (a value, a
 * weight, a bound: Scalar::to<T>, checked) must have no imaginary part;
 * eager's key says whether it has one (the number itself is a runtime
 * value). */
static bool real_enough(const tpu_lower_ctx *c, const tpu_lower_arg *a, tpu_dtype_t dtype) {
  if (a->kind != TPU_ARG_SCALAR || a->dtype != TPU_C128 || a->fi == 0 || tpu_dtype_is_complex(dtype) ||
      dtype == TPU_BOOL)
    return true;
  tpu_hlo_fail(c->b, TPU_ERR_RUNTIME, "value cannot be converted to type %s without overflow", cpp_type_name(dtype));
  return false;
}

/* A Scalar argument as |dtype|: a complex number's real part where
 * real_enough allows it. */
static tpu_hlo_value scalar_as(tpu_lower_ctx *c, int arg, tpu_hlo_value v, tpu_dtype_t dtype) {
  if (!real_enough(c, &c->args[arg], dtype)) return TPU_HLO_NONE;
  if (tpu_dtype_is_complex(tpu_hlo_dtype(c->b, v)) && !tpu_dtype_is_complex(dtype)) v = tpu_hlo_unary(c->b, TPU_HLO_REAL, v);
  return v;
}

tpu_hlo_value tpu_lower_operand(tpu_lower_ctx *c, int arg, tpu_dtype_t dtype, const tpu_hlo_type *to) {
  tpu_hlo_value v = scalar_as(c, arg, tpu_lower_tensor(c, arg), dtype);
  tpu_hlo_type t = *to;
  t.dtype = dtype;
  return tpu_hlo_broadcast_to(c->b, v, &t);
}

tpu_hlo_value tpu_lower_scalar(tpu_lower_ctx *c, int arg, tpu_dtype_t dtype) {
  tpu_hlo_value v = tpu_lower_tensor(c, arg);
  if (tpu_hlo_rank(c->b, v) != 0 && !tpu_hlo_failed(c->b))
    return tpu_hlo_fail(c->b, TPU_ERR_RUNTIME, "%s: internal: argument %d is not a scalar", c->op, arg);
  return tpu_hlo_convert(c->b, scalar_as(c, arg, v, dtype), dtype);
}

int64_t tpu_lower_int(const tpu_lower_ctx *c, int arg, int64_t if_none) {
  if (tpu_lower_is_none(c, arg)) return if_none;
  const tpu_lower_arg *a = &c->args[arg];
  if (a->kind == TPU_ARG_BOOL) return a->b;
  if (a->kind == TPU_ARG_FLOAT) return (int64_t)a->f;
  return a->i;
}

double tpu_lower_float(const tpu_lower_ctx *c, int arg, double if_none) {
  if (tpu_lower_is_none(c, arg)) return if_none;
  const tpu_lower_arg *a = &c->args[arg];
  (void)real_enough(c, a, TPU_F64); /* Scalar::toDouble, checked */
  if (a->kind == TPU_ARG_INT) return (double)a->i;
  if (a->kind == TPU_ARG_SCALAR && a->is_const && !tpu_dtype_is_float(a->dtype)) return (double)a->i;
  return a->f;
}

bool tpu_lower_bool(const tpu_lower_ctx *c, int arg, bool if_none) {
  if (tpu_lower_is_none(c, arg)) return if_none;
  const tpu_lower_arg *a = &c->args[arg];
  return a->kind == TPU_ARG_BOOL ? a->b : a->i != 0;
}

int tpu_lower_wrap_dim(const tpu_lower_ctx *c, int64_t dim, int rank) {
  int64_t r = rank > 0 ? rank : 1;
  if (dim < -r || dim >= r) {
    tpu_hlo_fail(c->b, TPU_ERR_INDEX, "Dimension out of range (expected to be in range of [%lld, %lld], but got %lld)",
                 (long long)-r, (long long)(r - 1), (long long)dim);
    return 0;
  }
  return (int)(dim < 0 ? dim + r : dim);
}

tpu_dtype_t tpu_lower_opmath(tpu_dtype_t t) {
  return t == TPU_F16 || t == TPU_BF16 ? TPU_F32 : t;
}

int tpu_lower_reduce_dims(const tpu_lower_ctx *c, int arg, int rank, int64_t *out_dims) {
  bool seen[TPU_HLO_MAX_RANK] = {false};
  const tpu_lower_arg *a = arg < c->num_args ? &c->args[arg] : NULL;
  if (a == NULL || a->kind == TPU_ARG_NONE || (a->kind == TPU_ARG_INT_LIST && a->n == 0)) {
    for (int i = 0; i < rank; i++) seen[i] = true;
  } else if (a->kind == TPU_ARG_INT) {
    seen[tpu_lower_wrap_dim(c, a->i, rank)] = true;
  } else {
    for (int i = 0; i < a->n; i++) seen[tpu_lower_wrap_dim(c, a->ints[i], rank)] = true;
  }
  int n = 0;
  for (int i = 0; i < rank; i++)
    if (seen[i]) out_dims[n++] = i;
  return n;
}

/* A floating sum over one dim. Over the last (minor) dim, in 8 lanes, as
 * PyTorch's CPU kernel sums a row (8-wide vector accumulators): the row as
 * [.., n/8, 8], summed over n/8, then over the 8 lanes, a barrier between
 * (XLA would merge the two reduces back into one). XLA's CPU emitter sums
 * a row into one accumulator: a row of 32 came out 1.6x further from the
 * exact sum than the CPU's, a [64, 32] tensor's whole sum 4x, a row of 512
 * 1.4x; in lanes each is as close as the CPU's. A row that is no multiple
 * of 8 is padded with -0.0, which adds nothing (-0.0 + -0.0 stays -0.0). */
#define SUM_LANES 8

static tpu_hlo_value sum_dim(tpu_hlo_builder *b, tpu_hlo_value x, tpu_hlo_value init, int64_t dim) {
  const tpu_hlo_type *t = tpu_hlo_type_of(b, x);
  if (!t || dim != t->rank - 1 || t->dims[dim] <= SUM_LANES || !tpu_dtype_is_float(t->dtype))
    return tpu_hlo_reduce_simple(b, x, init, TPU_HLO_ADD, &dim, 1);
  int rank = t->rank;
  int64_t n = t->dims[dim], rows = (n + SUM_LANES - 1) / SUM_LANES;
  int64_t dims[TPU_HLO_MAX_RANK];
  memcpy(dims, t->dims, (size_t)rank * sizeof *dims);
  tpu_dtype_t dtype = t->dtype;
  if (n % SUM_LANES) {
    int64_t low[TPU_HLO_MAX_RANK] = {0}, high[TPU_HLO_MAX_RANK] = {0}, interior[TPU_HLO_MAX_RANK] = {0};
    high[dim] = rows * SUM_LANES - n;
    x = tpu_hlo_pad(b, x, tpu_hlo_scalar_f64(b, dtype, -0.0), low, high, interior);
  }
  dims[dim] = rows;
  dims[rank] = SUM_LANES;
  x = tpu_hlo_reshape(b, x, rank + 1, dims);
  x = tpu_hlo_barrier(b, tpu_hlo_reduce_simple(b, x, init, TPU_HLO_ADD, &dim, 1));
  return tpu_hlo_reduce_simple(b, x, init, TPU_HLO_ADD, &dim, 1);
}

tpu_hlo_value tpu_lower_reduce(tpu_hlo_builder *b, tpu_hlo_value x, tpu_hlo_binary_t op,
                               const int64_t *dims, int n) {
  tpu_dtype_t t = tpu_hlo_dtype(b, x);
  tpu_hlo_value init;
  switch (op) {
    case TPU_HLO_MUL: init = tpu_hlo_scalar_i64(b, t, 1); break;
    case TPU_HLO_MAX: init = tpu_hlo_scalar_min(b, t); break;
    case TPU_HLO_MIN: init = tpu_hlo_scalar_max(b, t); break;
    case TPU_HLO_AND: init = tpu_hlo_scalar_i64(b, t, t == TPU_BOOL ? 1 : -1); break;
    default: init = tpu_hlo_scalar_i64(b, t, 0); break; /* ADD, OR, XOR */
  }
  /* A floating sum over several dims, one dim at a time from the innermost
   * out, each partial result behind a barrier (XLA merges a chain of
   * reduces into one). XLA's CPU emitter sums several dims as one loop
   * nest into one accumulator: the sum of a [64, 256, 256] float32 tensor
   * came out 25x further from the exact sum than PyTorch's CPU kernel (and
   * 1.8x slower). Each dim that is the last when its turn comes is summed
   * in lanes (sum_dim). */
  if (op == TPU_HLO_ADD && n >= 1 && (tpu_dtype_is_float(t) || tpu_dtype_is_complex(t))) {
    int64_t sorted[TPU_HLO_MAX_RANK];
    memcpy(sorted, dims, (size_t)n * sizeof *sorted);
    for (int i = 1; i < n; i++)
      for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
        int64_t tmp = sorted[j];
        sorted[j] = sorted[j - 1];
        sorted[j - 1] = tmp;
      }
    for (int i = n - 1; i >= 0; i--) {
      x = sum_dim(b, x, init, sorted[i]);
      if (i > 0) x = tpu_hlo_barrier(b, x);
    }
    return x;
  }
  return tpu_hlo_reduce_simple(b, x, init, op, dims, n);
}

tpu_hlo_value tpu_lower_scan(tpu_hlo_builder *b, tpu_hlo_value x, int dim, tpu_hlo_binary_t op) {
  const tpu_hlo_type *t = tpu_hlo_type_of(b, x);
  int rank = t->rank;
  int64_t size = rank > 0 ? t->dims[dim] : 1;
  tpu_dtype_t dtype = t->dtype;
  if (size <= 1 || tpu_hlo_failed(b)) return x; /* nothing to accumulate */
  tpu_hlo_window w;
  tpu_hlo_window_init(&w, rank);
  w.dims[dim] = size;
  w.pad_lo[dim] = size - 1;
  tpu_hlo_value init = tpu_hlo_scalar_i64(b, dtype, op == TPU_HLO_MUL ? 1 : 0);
  tpu_hlo_region body;
  tpu_hlo_region_binary(b, op, dtype, &body);
  tpu_hlo_value r;
  tpu_hlo_reduce_window(b, &x, &init, 1, &w, &body, &r);
  return r;
}

void tpu_lower_extreme_body(tpu_lower_ctx *c, tpu_dtype_t t, bool is_max, bool later_wins, tpu_hlo_region *out) {
  tpu_hlo_type v = tpu_hlo_make_type(t, 0, NULL), i = tpu_hlo_make_type(TPU_S64, 0, NULL);
  tpu_hlo_type types[4] = {v, i, v, i};
  tpu_hlo_value a[4];
  tpu_hlo_region_begin(B, 4, types, a);
  tpu_hlo_value better = cmp(c, is_max ? TPU_HLO_GT : TPU_HLO_LT, a[0], a[2]);
  tpu_hlo_value same = cmp(c, TPU_HLO_EQ, a[0], a[2]);
  if (tpu_dtype_is_float(t)) {
    tpu_hlo_value an = is_nan(c, a[0]), bn = is_nan(c, a[2]);
    better = or_(c, better, and_(c, an, un(c, TPU_HLO_NOT, bn)));
    same = or_(c, same, and_(c, an, bn));
  }
  tpu_hlo_value pick = or_(c, better, and_(c, same, cmp(c, later_wins ? TPU_HLO_GT : TPU_HLO_LT, a[1], a[3])));
  tpu_hlo_value r[2] = {sel(c, pick, a[0], a[2]), sel(c, pick, a[1], a[3])};
  tpu_hlo_region_end(B, r, 2, out);
}

tpu_hlo_value tpu_lower_keepdim(tpu_hlo_builder *b, tpu_hlo_value x, int rank, const int64_t *dims,
                                int n) {
  const tpu_hlo_type *t = tpu_hlo_type_of(b, x);
  int64_t shape[TPU_HLO_MAX_RANK];
  int k = 0, j = 0;
  for (int i = 0; i < rank; i++) {
    if (j < n && dims[j] == i) {
      shape[i] = 1;
      j++;
    } else {
      shape[i] = t->dims[k++];
    }
  }
  return tpu_hlo_reshape(b, x, rank, shape);
}

void tpu_lower_shape_str(char *buf, size_t cap, int rank, const int64_t *dims) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < rank && n < cap; i++) n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)dims[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

void tpu_lower_set_output(tpu_lower_ctx *c, int i, tpu_hlo_value v) {
  if (i >= c->num_outputs) {
    tpu_hlo_fail(c->b, TPU_ERR_RUNTIME, "%s: internal: output %d out of range", c->op, i);
    return;
  }
  const tpu_hlo_type *want = &c->out_types[i];
  if (want->dtype == TPU_INVALID) return; /* an output nobody asked for */
  v = tpu_hlo_convert(c->b, v, want->dtype);
  const tpu_hlo_type *got = tpu_hlo_type_of(c->b, v);
  if (!tpu_hlo_failed(c->b) && !tpu_hlo_type_equal(got, want)) {
    /* A rank-0 or broadcastable result (e.g. a reduction of a single element)
     * is widened to the shape PyTorch expects; anything else is a bug. */
    if (tpu_hlo_type_numel(got) == tpu_hlo_type_numel(want)) v = tpu_hlo_reshape(c->b, v, want->rank, want->dims);
    else v = tpu_hlo_broadcast_to(c->b, v, want);
  }
  c->outputs[i] = v;
}

/* The while loop of tpu_lower_loop_to and tpu_lower_loop_while: k < count,
 * and |more| of the state where given. */
static void loop(tpu_lower_ctx *c, tpu_hlo_value count, int n, tpu_hlo_value *state, tpu_lower_step_fn step,
                 tpu_lower_more_fn more) {
  if (tpu_hlo_failed(B)) return;
  if (n > TPU_LOWER_LOOP_MAX_STATE) {
    tpu_hlo_fail(B, TPU_ERR_RUNTIME, "%s: internal: a loop of %d state values", c->op, n);
    return;
  }
  tpu_hlo_type types[TPU_LOWER_LOOP_MAX_STATE + 2];
  tpu_hlo_value init[TPU_LOWER_LOOP_MAX_STATE + 2], args[TPU_LOWER_LOOP_MAX_STATE + 2],
      out[TPU_LOWER_LOOP_MAX_STATE + 2];
  init[0] = tpu_hlo_scalar_i64(B, TPU_S64, 0);
  init[1] = count;
  for (int i = 0; i < n; i++) init[i + 2] = state[i];
  /* Copies: the builder's type table moves as it grows. */
  for (int i = 0; i < n + 2; i++) types[i] = *tpu_hlo_type_of(B, init[i]);
  tpu_hlo_region regions[2];
  tpu_hlo_region_begin(B, n + 2, types, args);
  tpu_hlo_value go = cmp(c, TPU_HLO_LT, args[0], args[1]);
  if (more != NULL) go = and_(c, go, more(c, args + 2));
  tpu_hlo_region_end(B, &go, 1, &regions[0]);
  tpu_hlo_region_begin(B, n + 2, types, args);
  step(c, args[0], args + 2);
  args[0] = add(c, args[0], tpu_hlo_scalar_i64(B, TPU_S64, 1));
  tpu_hlo_region_end(B, args, n + 2, &regions[1]);
  tpu_hlo_op(B, "stablehlo.while", init, n + 2, regions, 2, NULL, types, n + 2, out);
  for (int i = 0; i < n; i++) state[i] = out[i + 2];
}

void tpu_lower_loop_to(tpu_lower_ctx *c, tpu_hlo_value count, int n, tpu_hlo_value *state, tpu_lower_step_fn step) {
  loop(c, count, n, state, step, NULL);
}

void tpu_lower_loop_while(tpu_lower_ctx *c, int64_t max, int n, tpu_hlo_value *state, tpu_lower_step_fn step,
                          tpu_lower_more_fn more) {
  if (max > 0) loop(c, tpu_hlo_scalar_i64(B, TPU_S64, max), n, state, step, more);
}

void tpu_lower_loop(tpu_lower_ctx *c, int64_t count, int n, tpu_hlo_value *state, tpu_lower_step_fn step) {
  if (count > 0) tpu_lower_loop_to(c, tpu_hlo_scalar_i64(B, TPU_S64, count), n, state, step);
}

tpu_hlo_value tpu_lower_boundary(tpu_hlo_builder *b, unsigned kernels, tpu_hlo_value v) {
  tpu_lower_boundary_many(b, kernels, &v, 1, NULL, 0);
  return v;
}

void tpu_lower_boundary_many(tpu_hlo_builder *b, unsigned kernels, tpu_hlo_value *vs, int n,
                             const tpu_hlo_value *keep, int num_keep) {
  if (!(kernels & TPU_KERNEL_BOUNDARY) || n == 0) return;
  for (int i = 0; i < n; i++)
    if (vs[i] == TPU_HLO_NONE || tpu_hlo_type_of(b, vs[i]) == NULL) return;
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  tpu_hlo_value small_ops[16];
  tpu_hlo_type small_types[8];
  const size_t num_ops = (size_t)n + (size_t)num_keep;
  tpu_hlo_value *operands = num_ops <= 16 ? small_ops : malloc(num_ops * sizeof *operands);
  tpu_hlo_type *types = n <= 8 ? small_types : malloc((size_t)n * sizeof *types);
  if (operands == NULL || types == NULL) {
    tpu_hlo_fail(b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  tpu_strbuf_printf(&attrs, "call_target_name = \"" TPU_KERNEL_BOUNDARY_CALL "\", api_version = 4 : i32, "
                            "output_operand_aliases = [");
  for (int i = 0; i < n; i++) {
    operands[i] = vs[i];
    types[i] = *tpu_hlo_type_of(b, vs[i]);
    if (n == 1)
      tpu_strbuf_printf(&attrs, "#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 0, "
                                "operand_tuple_indices = []>");
    else
      tpu_strbuf_printf(&attrs, "%s#stablehlo.output_operand_alias<output_tuple_indices = [%d], operand_index = %d, "
                                "operand_tuple_indices = []>", i ? ", " : "", i, i);
  }
  tpu_strbuf_printf(&attrs, "]");
  for (int i = 0; i < num_keep; i++) operands[n + i] = keep[i];
  if (attrs.failed) tpu_hlo_fail(b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  else tpu_hlo_op(b, "stablehlo.custom_call", operands, (int)num_ops, NULL, 0, attrs.data, types, n, vs);
done:
  if (operands != small_ops) free(operands);
  if (types != small_types) free(types);
  tpu_strbuf_release(&attrs);
}
