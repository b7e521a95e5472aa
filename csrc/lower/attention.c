/* Scaled dot-product attention: the fused forward that
 * F.scaled_dot_product_attention reaches on tpu (PyTorch's "overrideable"
 * backend, torchtpu::attention in eager) and its gradients.
 *
 * Where the device can run the hand-written kernel (kernels/attention.h, on
 * the CPU plugin) each pass is one custom call; elsewhere it is XLA's
 * composite: one batched product for the scores, a softmax that also yields
 * the log-sum-exp, one product with the values, and the backward from the
 * saved log-sum-exp. Both compute in float32 (half inputs are converted and
 * the result rounded once) and give a query that sees no key a zero row, as
 * PyTorch's safe softmax does. A boolean mask is additive (True keeps, False
 * is -inf); a mask of fewer dims broadcasts as PyTorch broadcasts it. */
#include <math.h>
#include <stdio.h>

#include "kernels/kernels.h"
#include "lower/rules.h"

/* The attention operands as [B, H, T, D] float32; k and v come with |kh|
 * heads, each serving h / kh query heads (grouped-query attention), and are
 * expanded to h heads, so kernel and composite see one head per query head. */
typedef struct attn {
  tpu_hlo_value q, k, v, bias; /* bias: [B, H, T, S] or NONE */
  int64_t b, h, kh, t, s, d, e;
  bool causal;
  double scale;
} attn;

static tpu_hlo_value as_4d(tpu_lower_ctx *c, int arg, const attn *a, int64_t heads, int64_t len, int64_t width) {
  int64_t dims[4] = {a->b, heads, len, width};
  return tpu_hlo_reshape(B, tpu_hlo_convert(B, tpu_lower_tensor(c, arg), TPU_F32), 4, dims);
}

static const int64_t swap_perm[4] = {0, 2, 1, 3}; /* [B, H, L, W] <-> [B, L, H, W] */

/* The head dim of [B, L, H, W] (token-major) or [B, H, L, W]. */
static int head_dim_of(bool token_major) { return token_major ? 2 : 1; }

/* |t|'s 4-d shape with head dim |hd| split into (kh, h / kh): each key
 * head followed by its group of query heads. */
static void grouped_shape(const tpu_hlo_type *t, int hd, const attn *a, int64_t out[5]) {
  for (int i = 0, j = 0; i < 4; i++) {
    out[j++] = i == hd ? a->kh : t->dims[i];
    if (i == hd) out[j++] = a->h / a->kh;
  }
}

/* [B, kh, L, W] -> [B, h, L, W], key head j serving query heads j * g ..
 * j * g + g - 1 (PyTorch's repeat_interleave). Heads transposed out of a
 * token-major projection are expanded in that layout and stay a transpose
 * of it, which the kernel reads as it lies. */
static tpu_hlo_value expand_heads(tpu_lower_ctx *c, tpu_hlo_value x, const attn *a) {
  if (a->kh == a->h) return x;
  const bool tm = tpu_hlo_is_transpose(B, x, swap_perm);
  tpu_hlo_value src = tm ? tpu_hlo_transpose(B, x, swap_perm) : x;
  const int hd = head_dim_of(tm);
  int64_t grouped[5], keep[4], dims[4];
  grouped_shape(tpu_hlo_type_of(B, src), hd, a, grouped);
  for (int i = 0; i < 4; i++) {
    keep[i] = i <= hd ? i : i + 1; /* every dim but the group's */
    dims[i] = i == hd ? a->h : grouped[keep[i]];
  }
  tpu_hlo_type gt = tpu_hlo_make_type(TPU_F32, 5, grouped);
  tpu_hlo_value y = tpu_hlo_reshape(B, tpu_hlo_broadcast_in_dim(B, src, &gt, keep), 4, dims);
  return tm ? tpu_hlo_transpose(B, y, swap_perm) : y;
}

/* The gradient of expanded heads, summed over each group: [B, h, L, W] ->
 * [B, kh, L, W]. */
static tpu_hlo_value reduce_heads(tpu_lower_ctx *c, tpu_hlo_value dx, const attn *a) {
  if (a->kh == a->h) return dx;
  const bool tm = tpu_hlo_is_transpose(B, dx, swap_perm);
  tpu_hlo_value src = tm ? tpu_hlo_transpose(B, dx, swap_perm) : dx;
  const int hd = head_dim_of(tm);
  const int64_t group_dim = hd + 1;
  int64_t grouped[5];
  grouped_shape(tpu_hlo_type_of(B, src), hd, a, grouped);
  tpu_hlo_value r = tpu_lower_reduce(B, tpu_hlo_reshape(B, src, 5, grouped), TPU_HLO_ADD, &group_dim, 1);
  return tm ? tpu_hlo_transpose(B, r, swap_perm) : r;
}

/* Reads q, k, v (arguments |qi| .. |qi| + 2), the mask (argument |bi|) and
 * the flags; a rule error for shapes the fused path does not take. */
static tpu_status_t attn_read(tpu_lower_ctx *c, int qi, int bi, int causal_arg, int scale_arg, attn *a) {
  const tpu_lower_arg *q = &c->args[qi], *k = &c->args[qi + 1], *v = &c->args[qi + 2];
  if (q->rank != 4 || k->rank != 4 || v->rank != 4)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "query, key and value must be 4-d");
  a->b = q->sizes[0];
  a->h = q->sizes[1];
  a->kh = k->sizes[1];
  a->t = q->sizes[2];
  a->d = q->sizes[3];
  a->s = k->sizes[2];
  a->e = v->sizes[3];
  if (k->sizes[0] != a->b || v->sizes[0] != a->b || v->sizes[1] != a->kh || a->kh < 1 || a->h % a->kh != 0)
    return tpu_lower_error(c, TPU_ERR_RUNTIME,
                           "query, key and value must have the same batch, and key and value the same heads, "
                           "a divisor of the query's");
  if (k->sizes[3] != a->d || v->sizes[2] != a->s)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "key must match query's head size and value key's length");
  a->causal = tpu_lower_bool(c, causal_arg, false);
  a->scale = tpu_lower_is_none(c, scale_arg) ? 1.0 / sqrt((double)a->d) : tpu_lower_float(c, scale_arg, 1.0);
  a->q = as_4d(c, qi, a, a->h, a->t, a->d);
  a->k = expand_heads(c, as_4d(c, qi + 1, a, a->kh, a->s, a->d), a);
  a->v = expand_heads(c, as_4d(c, qi + 2, a, a->kh, a->s, a->e), a);
  a->bias = TPU_HLO_NONE;
  if (!tpu_lower_is_none(c, bi) && c->args[bi].kind == TPU_ARG_TENSOR) {
    int64_t dims[4] = {a->b, a->h, a->t, a->s};
    tpu_hlo_type full = tpu_hlo_make_type(TPU_F32, 4, dims);
    tpu_hlo_value m = tpu_lower_tensor(c, bi);
    if (tpu_hlo_dtype(B, m) == TPU_BOOL) { /* True keeps */
      tpu_hlo_type mt = *tpu_hlo_type_of(B, m);
      mt.dtype = TPU_F32;
      m = sel(c, m, tpu_hlo_const_f64(B, &mt, 0.0), tpu_hlo_const_f64(B, &mt, -INFINITY));
    }
    a->bias = tpu_hlo_broadcast_to(B, m, &full);
  }
  return NULL;
}

static bool use_kernel(const tpu_lower_ctx *c) { return (c->kernels & TPU_KERNEL_ATTENTION) != 0; }

/* The kernel's layout for these operands: token-major ([B, T, H, D]) when
 * q, k and v are heads transposed out of it (a projection viewed as heads,
 * as models write attention): the kernel then reads them as they lie and
 * the transposes cancel, where head-major operands would be transposed
 * into copies on the way in and out. */
static bool token_major(const attn *a, const tpu_lower_ctx *c) {
  return tpu_hlo_is_transpose(B, a->q, swap_perm) && tpu_hlo_is_transpose(B, a->k, swap_perm) &&
         tpu_hlo_is_transpose(B, a->v, swap_perm);
}

/* |x| ([B, H, L, W]) in the kernel's layout, or back from it. */
static tpu_hlo_value kernel_layout(tpu_lower_ctx *c, tpu_hlo_value x, bool tm) {
  return tm ? tpu_hlo_transpose(B, x, swap_perm) : x;
}

/* The custom call's attribute dictionary. */
static void kernel_attrs(char *buf, size_t cap, const char *target, const attn *a, bool bias_grad, bool tm) {
  snprintf(buf, cap,
           "call_target_name = \"%s\", api_version = 4 : i32, backend_config = {bias_grad = %d : i32, "
           "causal = %d : i32, has_bias = %d : i32, scale = %.9e : f32, token_major = %d : i32}",
           target, bias_grad, a->causal, a->bias != TPU_HLO_NONE, a->scale, tm);
}

static tpu_hlo_type f32_type(int64_t d0, int64_t d1, int64_t d2, int64_t d3, int rank) {
  int64_t dims[4] = {d0, d1, d2, d3};
  return tpu_hlo_make_type(TPU_F32, rank, dims);
}

/* scale * q.k + bias, with keys the causal mask hides at -inf: [B, H, T, S]. */
static tpu_hlo_value scores(tpu_lower_ctx *c, const attn *a) {
  static const tpu_hlo_dot_dims qk = {.num_batch = 2, .lhs_batch = {0, 1}, .rhs_batch = {0, 1},
                                      .num_contract = 1, .lhs_contract = {3}, .rhs_contract = {3}};
  tpu_hlo_value s = tpu_hlo_dot_general(B, a->q, a->k, &qk, TPU_F32, c->precision);
  tpu_hlo_type st = *tpu_hlo_type_of(B, s);
  s = mul(c, s, tpu_hlo_const_f64(B, &st, a->scale));
  if (a->bias != TPU_HLO_NONE) s = add(c, s, a->bias);
  if (a->causal) {
    tpu_hlo_type it = st;
    it.dtype = TPU_S64;
    tpu_hlo_value seen = cmp(c, TPU_HLO_LE, tpu_hlo_iota(B, &it, 3), tpu_hlo_iota(B, &it, 2));
    s = sel(c, seen, s, tpu_hlo_const_f64(B, &st, -INFINITY));
  }
  return s;
}

/* exp(s - lse) per row, 0 for a row that sees nothing (lse -inf). */
static tpu_hlo_value probs(tpu_lower_ctx *c, tpu_hlo_value s, tpu_hlo_value lse) {
  static const int64_t rows[3] = {0, 1, 2};
  const tpu_hlo_type *st = tpu_hlo_type_of(B, s);
  tpu_hlo_value l = tpu_hlo_broadcast_in_dim(B, lse, st, rows);
  tpu_hlo_value none = cmp(c, TPU_HLO_EQ, l, tpu_hlo_const_f64(B, st, -INFINITY));
  return sel(c, none, tpu_hlo_const_f64(B, st, 0.0), un(c, TPU_HLO_EXP, sub(c, s, l)));
}

static tpu_hlo_value product(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value y, int64_t xc, int64_t yc) {
  tpu_hlo_dot_dims d = {.num_batch = 2, .lhs_batch = {0, 1}, .rhs_batch = {0, 1}, .num_contract = 1,
                        .lhs_contract = {xc}, .rhs_contract = {yc}};
  return tpu_hlo_dot_general(B, x, y, &d, TPU_F32, c->precision);
}

/* In the output's shape (lse may come [B, H, T] or as PyTorch lays it out)
 * and dtype. */
static void set_output(tpu_lower_ctx *c, int i, tpu_hlo_value v) {
  if (c->out_types[i].dtype == TPU_INVALID) return;
  tpu_lower_set_output(c, i, tpu_hlo_reshape(B, v, c->out_types[i].rank, c->out_types[i].dims));
}

/* _scaled_dot_product_fused_attention_overrideable and torchtpu::attention
 * (query, key, value, attn_bias?, dropout_p, is_causal, return_debug_mask,
 * *, scale?) -> (output, logsumexp, ...). The remaining outputs of the aten
 * op (sequence offsets, dropout seeds, the debug mask) are zeros. */
static tpu_status_t attention_rule(tpu_lower_ctx *c) {
  if (tpu_lower_float(c, 4, 0.0) != 0.0)
    return tpu_lower_error(c, TPU_ERR_NOT_IMPLEMENTED, "the fused attention of tpu has no dropout");
  attn a;
  TPU_RETURN_IF_ERROR(attn_read(c, 0, 3, 5, 7, &a));
  tpu_hlo_value out, lse;
  if (use_kernel(c)) {
    const bool tm = token_major(&a, c);
    tpu_hlo_value ops[4] = {kernel_layout(c, a.q, tm), kernel_layout(c, a.k, tm), kernel_layout(c, a.v, tm),
                            a.bias};
    tpu_hlo_type types[2] = {tm ? f32_type(a.b, a.t, a.h, a.e, 4) : f32_type(a.b, a.h, a.t, a.e, 4),
                             f32_type(a.b, a.h, a.t, 0, 3)};
    tpu_hlo_value res[2];
    char attrs[512];
    kernel_attrs(attrs, sizeof attrs, TPU_KERNEL_ATTENTION_FWD, &a, false, tm);
    tpu_hlo_op(B, "stablehlo.custom_call", ops, a.bias != TPU_HLO_NONE ? 4 : 3, NULL, 0, attrs, types, 2, res);
    out = kernel_layout(c, res[0], tm);
    lse = res[1];
  } else {
    static const int64_t key_dim = 3, rows[3] = {0, 1, 2};
    tpu_hlo_value s = scores(c, &a);
    const tpu_hlo_type *st = tpu_hlo_type_of(B, s);
    tpu_hlo_value m = tpu_lower_reduce(B, s, TPU_HLO_MAX, &key_dim, 1);
    tpu_hlo_type mt = *tpu_hlo_type_of(B, m);
    tpu_hlo_value m_safe = sel(c, cmp(c, TPU_HLO_EQ, m, tpu_hlo_const_f64(B, &mt, -INFINITY)),
                               tpu_hlo_const_f64(B, &mt, 0.0), m);
    tpu_hlo_value p = un(c, TPU_HLO_EXP, sub(c, s, tpu_hlo_broadcast_in_dim(B, m_safe, st, rows)));
    tpu_hlo_value l = tpu_lower_reduce(B, p, TPU_HLO_ADD, &key_dim, 1);
    lse = add(c, m_safe, un(c, TPU_HLO_LOG, l));
    tpu_hlo_value pv = product(c, p, a.v, 3, 2);
    const tpu_hlo_type *ot = tpu_hlo_type_of(B, pv);
    tpu_hlo_value lb = tpu_hlo_broadcast_in_dim(B, l, ot, rows);
    tpu_hlo_value zero = tpu_hlo_const_f64(B, ot, 0.0);
    out = sel(c, cmp(c, TPU_HLO_EQ, lb, zero), zero, dvd(c, pv, lb));
  }
  set_output(c, 0, out);
  set_output(c, 1, lse);
  for (int i = 2; i < c->num_outputs; i++)
    if (c->out_types[i].dtype != TPU_INVALID) tpu_lower_set_output(c, i, tpu_hlo_const_f64(B, &c->out_types[i], 0.0));
  return NULL;
}

/* The gradient of the scores reduced to the mask's own shape (a mask that
 * broadcast gets the sum over the broadcast dims). */
static tpu_hlo_value bias_grad_as(tpu_lower_ctx *c, tpu_hlo_value ds, const tpu_hlo_type *bt) {
  int64_t dims[4], n = 0;
  int lead = 4 - bt->rank;
  for (int i = 0; i < 4; i++)
    if (i < lead || bt->dims[i - lead] == 1) dims[n++] = i;
  tpu_hlo_value r = n > 0 ? tpu_lower_reduce(B, ds, TPU_HLO_ADD, dims, (int)n) : ds;
  return tpu_hlo_reshape(B, r, bt->rank, bt->dims);
}

/* _scaled_dot_product_fused_attention_overrideable_backward(grad_out, query,
 * key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
 * cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
 * philox_offset, *, scale?) -> (grad_query, grad_key, grad_value,
 * grad_attn_bias) */
static tpu_status_t attention_backward_rule(tpu_lower_ctx *c) {
  attn a;
  TPU_RETURN_IF_ERROR(attn_read(c, 1, 4, 13, 16, &a));
  bool want_bias = a.bias != TPU_HLO_NONE && c->num_outputs > 3 && c->out_types[3].dtype != TPU_INVALID;
  const tpu_lower_arg *mask = &c->args[5];
  bool bias_grad = want_bias && (mask->kind != TPU_ARG_BOOL_LIST || mask->n < 4 || mask->bools[3]);
  tpu_hlo_value dout = as_4d(c, 0, &a, a.h, a.t, a.e), out = as_4d(c, 6, &a, a.h, a.t, a.e);
  int64_t lse_dims[3] = {a.b, a.h, a.t};
  tpu_hlo_value lse = tpu_hlo_reshape(B, tpu_hlo_convert(B, tpu_lower_tensor(c, 7), TPU_F32), 3, lse_dims);
  tpu_hlo_value dq, dk, dv, ds = TPU_HLO_NONE;
  if (use_kernel(c)) {
    const bool tm = token_major(&a, c);
    tpu_hlo_value ops[7] = {kernel_layout(c, a.q, tm), kernel_layout(c, a.k, tm), kernel_layout(c, a.v, tm)};
    tpu_hlo_value res[4];
    int n = 3;
    if (a.bias != TPU_HLO_NONE) ops[n++] = a.bias;
    ops[n++] = kernel_layout(c, out, tm);
    ops[n++] = lse;
    ops[n++] = kernel_layout(c, dout, tm);
    tpu_hlo_type types[4] = {*tpu_hlo_type_of(B, ops[0]), *tpu_hlo_type_of(B, ops[1]), *tpu_hlo_type_of(B, ops[2]),
                             f32_type(a.b, a.h, a.t, a.s, 4)};
    char attrs[512];
    kernel_attrs(attrs, sizeof attrs, TPU_KERNEL_ATTENTION_BWD, &a, bias_grad, tm);
    tpu_hlo_op(B, "stablehlo.custom_call", ops, n, NULL, 0, attrs, types, bias_grad ? 4 : 3, res);
    dq = kernel_layout(c, res[0], tm);
    dk = kernel_layout(c, res[1], tm);
    dv = kernel_layout(c, res[2], tm);
    if (bias_grad) ds = res[3];
  } else {
    static const int64_t val_dim = 3, rows[3] = {0, 1, 2};
    tpu_hlo_value p = probs(c, scores(c, &a), lse);
    const tpu_hlo_type *pt = tpu_hlo_type_of(B, p);
    dv = product(c, p, dout, 2, 2);                      /* [B, H, S, E] */
    tpu_hlo_value dp = product(c, dout, a.v, 3, 3);      /* [B, H, T, S] */
    tpu_hlo_value delta = tpu_lower_reduce(B, mul(c, dout, out), TPU_HLO_ADD, &val_dim, 1);
    ds = mul(c, p, sub(c, dp, tpu_hlo_broadcast_in_dim(B, delta, pt, rows)));
    tpu_hlo_value sc = tpu_hlo_const_f64(B, pt, a.scale);
    dq = product(c, mul(c, ds, sc), a.k, 3, 2);          /* [B, H, T, D] */
    dk = product(c, mul(c, ds, sc), a.q, 2, 2);          /* [B, H, S, D] */
  }
  set_output(c, 0, dq);
  set_output(c, 1, reduce_heads(c, dk, &a));
  set_output(c, 2, reduce_heads(c, dv, &a));
  if (want_bias) /* the meta function returns no bias gradient without a bias */
    tpu_lower_set_output(c, 3, bias_grad ? bias_grad_as(c, ds, &c->out_types[3])
                                         : tpu_hlo_const_f64(B, &c->out_types[3], 0.0));
  return NULL;
}

const tpu_lower_rule tpu_rules_attention[] = {
    {{"torchtpu::attention"}, attention_rule, TPU_RULE_MATMUL_PRECISION, 0},
    /* compiled graphs: the aten op, whose eager form torch/sdpa.cpp serves */
    {{"_scaled_dot_product_fused_attention_overrideable"}, attention_rule, TPU_RULE_INTERNAL | TPU_RULE_MATMUL_PRECISION, 0},
    {{"_scaled_dot_product_fused_attention_overrideable_backward"}, attention_backward_rule, TPU_RULE_MATMUL_PRECISION, 0},
};
TPU_COUNT_RULES(attention);
