/* Shape rules: cat, padding (constant, reflection, replication and their
 * backwards), flip, roll, tril/triu, and the range factories PyTorch fills
 * through out= kernels (arange, linspace, logspace, eye).
 *
 * Padding is built from slices, reverses and concatenation rather than
 * gathers: the source of every padded element is known when the program is
 * built. Negative padding crops, as in PyTorch. Ops whose only kernels are
 * composite (stack, repeat, narrow, pad, …) decompose into these and into
 * views, and need no rule. */
#include "lower/rules.h"

/* --- cat ---------------------------------------------------------------------------- */

/* cat(tensors, dim): inputs are converted to the promoted result type;
 * 1-D empty tensors are skipped (PyTorch's legacy rule, whatever their
 * rank relative to the others). */
static tpu_status_t cat_rule(tpu_lower_ctx *c) {
  const tpu_lower_arg *l = &c->args[0];
  int dim = tpu_lower_wrap_dim(c, tpu_lower_int(c, 1, 0), OUT->rank);
  tpu_hlo_value parts[64];
  int k = 0;
  for (int i = 0; i < l->n; i++) {
    if (l->item_ranks[i] == 1 && l->item_sizes[i][0] == 0) continue;
    parts[k++] = tpu_hlo_convert(B, tpu_lower_list_item(c, 0, i), OUT->dtype);
    if (k == (int)(sizeof parts / sizeof parts[0])) { /* long lists: fold as we go */
      parts[0] = tpu_hlo_concatenate(B, parts, k, dim);
      k = 1;
    }
  }
  if (k == 0) return done(c, tpu_hlo_const_f64(B, OUT, 0.0));
  return done(c, tpu_hlo_concatenate(B, parts, k, dim));
}

/* --- padding ---------------------------------------------------------------------- */

/* constant_pad_nd(self, pad, value): pad pairs start at the last dim. */
static tpu_status_t constant_pad_rule(tpu_lower_ctx *c) {
  const tpu_lower_arg *pad = &c->args[1];
  int rank = c->args[0].rank;
  int64_t lo[TPU_HLO_MAX_RANK] = {0}, hi[TPU_HLO_MAX_RANK] = {0};
  for (int i = 0; 2 * i + 1 < pad->n; i++) {
    lo[rank - 1 - i] = pad->ints[2 * i];
    hi[rank - 1 - i] = pad->ints[2 * i + 1];
  }
  tpu_hlo_value x = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), OUT->dtype);
  return done(c, tpu_hlo_pad(B, x, tpu_lower_scalar(c, 2, OUT->dtype), lo, hi, NULL));
}

enum { REFLECT, REPLICATE };

static int64_t positive(int64_t v) { return v > 0 ? v : 0; }

/* |n| copies of |edge| (size 1 along |dim|) along |dim|. */
static tpu_hlo_value repeat_edge(tpu_lower_ctx *c, tpu_hlo_value edge, int dim, int64_t n) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, edge);
  int64_t same[TPU_HLO_MAX_RANK];
  for (int i = 0; i < t.rank; i++) same[i] = i;
  t.dims[dim] = n;
  return tpu_hlo_broadcast_in_dim(B, edge, &t, same);
}

/* |x| padded along |dim| by |lo|/|hi| (negative crops). Reflection
 * mirrors around the edge element; replication repeats it. */
static tpu_hlo_value pad_dim(tpu_lower_ctx *c, tpu_hlo_value x, int dim, int64_t lo, int64_t hi, int mode) {
  int64_t w = tpu_hlo_type_of(B, x)->dims[dim], l = positive(lo), r = positive(hi);
  tpu_hlo_value parts[3];
  int n = 0;
  int64_t d = dim;
  if (l > 0)
    parts[n++] = mode == REFLECT ? tpu_hlo_reverse(B, tpu_hlo_slice_dim(B, x, dim, 1, l + 1, 1), &d, 1)
                                 : repeat_edge(c, tpu_hlo_slice_dim(B, x, dim, 0, 1, 1), dim, l);
  parts[n++] = x;
  if (r > 0)
    parts[n++] = mode == REFLECT ? tpu_hlo_reverse(B, tpu_hlo_slice_dim(B, x, dim, w - 1 - r, w - 1, 1), &d, 1)
                                 : repeat_edge(c, tpu_hlo_slice_dim(B, x, dim, w - 1, w, 1), dim, r);
  tpu_hlo_value y = tpu_hlo_concatenate(B, parts, n, dim);
  return tpu_hlo_slice_dim(B, y, dim, l - lo, l + w + hi, 1);
}

/* |part| placed at [at, at + size) of a zero dim of |w| along |dim|. */
static tpu_hlo_value place(tpu_lower_ctx *c, tpu_hlo_value part, int dim, int64_t at, int64_t w) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, part);
  int64_t lo[TPU_HLO_MAX_RANK] = {0}, hi[TPU_HLO_MAX_RANK] = {0};
  lo[dim] = at;
  hi[dim] = w - at - t.dims[dim];
  return tpu_hlo_pad(B, part, tpu_hlo_scalar_i64(B, t.dtype, 0), lo, hi, NULL);
}

/* The gradient of pad_dim: |g| (the padded size along |dim|) folded back
 * onto the |w| input elements each padded element came from. */
static tpu_hlo_value pad_dim_backward(tpu_lower_ctx *c, tpu_hlo_value g, int dim, int64_t w, int64_t lo,
                                      int64_t hi, int mode) {
  int64_t l = positive(lo), r = positive(hi), d = dim;
  int rank = tpu_hlo_rank(B, g);
  int64_t plo[TPU_HLO_MAX_RANK] = {0}, phi[TPU_HLO_MAX_RANK] = {0};
  plo[dim] = l - lo; /* cropped elements get no gradient */
  phi[dim] = r - hi;
  g = tpu_hlo_pad(B, g, tpu_hlo_scalar_i64(B, tpu_hlo_dtype(B, g), 0), plo, phi, NULL);
  tpu_hlo_value sum = tpu_hlo_slice_dim(B, g, dim, l, l + w, 1);
  if (l > 0) {
    tpu_hlo_value left = tpu_hlo_slice_dim(B, g, dim, 0, l, 1);
    left = mode == REFLECT ? place(c, tpu_hlo_reverse(B, left, &d, 1), dim, 1, w)
                           : place(c, tpu_lower_keepdim(B, tpu_lower_reduce(B, left, TPU_HLO_ADD, &d, 1), rank, &d, 1), dim, 0, w);
    sum = tpu_hlo_binary(B, TPU_HLO_ADD, sum, left);
  }
  if (r > 0) {
    tpu_hlo_value right = tpu_hlo_slice_dim(B, g, dim, l + w, l + w + r, 1);
    right = mode == REFLECT ? place(c, tpu_hlo_reverse(B, right, &d, 1), dim, w - 1 - r, w)
                            : place(c, tpu_lower_keepdim(B, tpu_lower_reduce(B, right, TPU_HLO_ADD, &d, 1), rank, &d, 1), dim, w - 1, w);
    sum = tpu_hlo_binary(B, TPU_HLO_ADD, sum, right);
  }
  return sum;
}

/* reflection_padNd / replication_padNd(self, padding); data: the mode.
 * padding pairs start at the last dim. */
static tpu_status_t pad_rule(tpu_lower_ctx *c) {
  const tpu_lower_arg *pad = &c->args[1];
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  int rank = c->args[0].rank;
  for (int i = 0; 2 * i + 1 < pad->n; i++)
    x = pad_dim(c, x, rank - 1 - i, pad->ints[2 * i], pad->ints[2 * i + 1], (int)c->data);
  return done(c, x);
}

/* reflection_padNd_backward / replication_padNd_backward(grad_output,
 * self, padding), accumulated in float32 for half types. */
static tpu_status_t pad_backward_rule(tpu_lower_ctx *c) {
  const tpu_lower_arg *pad = &c->args[2];
  tpu_hlo_value g = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), tpu_lower_opmath(OUT->dtype));
  int rank = OUT->rank;
  for (int i = 0; 2 * i + 1 < pad->n; i++) {
    int dim = rank - 1 - i;
    g = pad_dim_backward(c, g, dim, OUT->dims[dim], pad->ints[2 * i], pad->ints[2 * i + 1], (int)c->data);
  }
  return done(c, g);
}

/* --- flip, roll, tril/triu --------------------------------------------------------- */

/* flip(self, dims) */
static tpu_status_t flip_rule(tpu_lower_ctx *c) {
  const tpu_lower_arg *a = &c->args[1];
  int64_t dims[TPU_HLO_MAX_RANK];
  int rank = c->args[0].rank;
  for (int i = 0; i < a->n; i++) dims[i] = tpu_lower_wrap_dim(c, a->ints[i], rank);
  return done(c, tpu_hlo_reverse(B, tpu_lower_tensor(c, 0), dims, rank == 0 ? 0 : a->n));
}

static tpu_hlo_value roll_dim(tpu_lower_ctx *c, tpu_hlo_value x, int dim, int64_t shift) {
  int64_t n = tpu_hlo_type_of(B, x)->dims[dim];
  if (n == 0) return x;
  int64_t s = ((shift % n) + n) % n;
  if (s == 0) return x;
  tpu_hlo_value parts[2] = {tpu_hlo_slice_dim(B, x, dim, n - s, n, 1), tpu_hlo_slice_dim(B, x, dim, 0, n - s, 1)};
  return tpu_hlo_concatenate(B, parts, 2, dim);
}

/* roll(self, shifts, dims): no dims rolls the flattened tensor. */
static tpu_status_t roll_rule(tpu_lower_ctx *c) {
  const tpu_lower_arg *shifts = &c->args[1], *dims = &c->args[2];
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  if (dims->n == 0) {
    int64_t n = tpu_hlo_type_numel(OUT);
    return done(c, roll_dim(c, tpu_hlo_reshape(B, x, 1, &n), 0, shifts->ints[0]));
  }
  for (int i = 0; i < dims->n; i++)
    x = roll_dim(c, x, tpu_lower_wrap_dim(c, dims->ints[i], c->args[0].rank), shifts->ints[i]);
  return done(c, x);
}

enum { TRIL, TRIU };

/* tril/triu(self, diagonal) over the last two dims; data: which. */
static tpu_status_t tri_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  tpu_hlo_type it = *OUT;
  it.dtype = TPU_S64;
  tpu_hlo_value rows = tpu_hlo_iota(B, &it, it.rank - 2), cols = tpu_hlo_iota(B, &it, it.rank - 1);
  tpu_hlo_value offset = tpu_hlo_binary(B, TPU_HLO_SUB, cols, rows);
  tpu_hlo_value diag = tpu_hlo_const_i64(B, &it, tpu_lower_int(c, 1, 0));
  tpu_hlo_value keep = tpu_hlo_compare(B, c->data == TRIL ? TPU_HLO_LE : TPU_HLO_GE, offset, diag);
  return done(c, tpu_hlo_select(B, keep, x, tpu_hlo_const_f64(B, OUT, 0.0)));
}

/* --- range factories (out= kernels) --------------------------------------------------- */

/* 0, 1, … n-1 along the 1-D output, as |t|. */
static tpu_hlo_value steps_of(tpu_lower_ctx *c, tpu_dtype_t t) {
  tpu_hlo_type it = *OUT;
  it.dtype = t;
  return tpu_hlo_iota(B, &it, 0);
}

static tpu_hlo_value spread(tpu_lower_ctx *c, tpu_hlo_value scalar) {
  tpu_hlo_type t = *OUT;
  t.dtype = tpu_hlo_dtype(B, scalar);
  return tpu_hlo_broadcast_to(B, scalar, &t);
}

/* arange.start_out(start, end, step, *, out): start + i * step in
 * PyTorch's CPU accumulate type (double for float/double, float for half
 * types, int64 for integers); the length is out's. */
static tpu_status_t arange_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = OUT->dtype;
  tpu_dtype_t acc = !tpu_dtype_is_float(t) ? TPU_S64 : tpu_lower_opmath(t) == t ? TPU_F64 : TPU_F32;
  tpu_hlo_value start = spread(c, tpu_lower_scalar(c, 0, acc)), step = spread(c, tpu_lower_scalar(c, 2, acc));
  return done(c, tpu_hlo_binary(B, TPU_HLO_ADD, start, tpu_hlo_binary(B, TPU_HLO_MUL, steps_of(c, acc), step)));
}

/* |v| rounded to |t| and widened back: one Half/BFloat16 operation of
 * PyTorch's scalar kernels (compute in float, round the result). */
static tpu_hlo_value rounded(tpu_lower_ctx *c, tpu_hlo_value v, tpu_dtype_t t) {
  tpu_dtype_t acc = tpu_hlo_dtype(B, v);
  return acc == t ? v : tpu_hlo_convert(B, tpu_hlo_convert(B, v, t), acc);
}

/* linspace's points as PyTorch's CPU kernels compute them: the first half
 * counted up from start, the second half down from end; floats compute in
 * their opmath type (linspace's half types rounding after every operation:
 * |half_steps|), integers in double from integer endpoints. */
static tpu_hlo_value linspace_points(tpu_lower_ctx *c, bool half_steps) {
  tpu_dtype_t t = OUT->dtype;
  const bool cplx = tpu_dtype_is_complex(t); /* computes as a float type does, counting steps in its real type */
  bool is_float = tpu_dtype_is_float(t) || cplx;
  tpu_dtype_t acc = is_float ? tpu_lower_opmath(t) : TPU_F64, r = is_float && half_steps ? t : acc;
  tpu_dtype_t ends = is_float ? t : TPU_S64; /* the endpoints as scalar_t */
  tpu_hlo_value start = spread(c, tpu_hlo_convert(B, tpu_lower_scalar(c, 0, ends), acc));
  tpu_hlo_value end = spread(c, tpu_hlo_convert(B, tpu_lower_scalar(c, 1, ends), acc));
  int64_t n = OUT->dims[0];
  if (n == 1) return start;
  tpu_hlo_value step = rounded(c, tpu_hlo_binary(B, TPU_HLO_DIV, tpu_hlo_binary(B, TPU_HLO_SUB, end, start),
                                                 spread(c, tpu_hlo_scalar_f64(B, acc, (double)(n - 1)))), r);
  const tpu_dtype_t count = cplx ? tpu_dtype_real(acc) : acc;
  tpu_hlo_value i = steps_of(c, count);
  tpu_hlo_value left = tpu_hlo_binary(B, TPU_HLO_SUB, spread(c, tpu_hlo_scalar_f64(B, count, (double)(n - 1))), i);
  tpu_hlo_value first_half =
      tpu_hlo_compare(B, TPU_HLO_LT, i, spread(c, tpu_hlo_scalar_f64(B, count, (double)(n / 2))));
  i = tpu_hlo_convert(B, i, acc);
  left = tpu_hlo_convert(B, left, acc);
  tpu_hlo_value up = tpu_hlo_binary(B, TPU_HLO_MUL, step, rounded(c, i, r));
  up = rounded(c, tpu_hlo_binary(B, TPU_HLO_ADD, start, rounded(c, up, r)), r);
  tpu_hlo_value down = tpu_hlo_binary(B, TPU_HLO_MUL, step, rounded(c, left, r));
  down = rounded(c, tpu_hlo_binary(B, TPU_HLO_SUB, end, rounded(c, down, r)), r);
  return tpu_hlo_select(B, first_half, up, down);
}

/* linspace.out(start, end, steps, *, out) */
static tpu_status_t linspace_rule(tpu_lower_ctx *c) {
  return done(c, linspace_points(c, true));
}

/* logspace.out(start, end, steps, base, *, out): base ** linspace, the power
 * in double as std::pow(double, …) computes it (a complex one in its type). */
static tpu_status_t logspace_rule(tpu_lower_ctx *c) {
  tpu_hlo_value e = linspace_points(c, false);
  const tpu_dtype_t t = tpu_dtype_is_complex(OUT->dtype) ? tpu_hlo_dtype(B, e) : TPU_F64;
  e = tpu_hlo_convert(B, e, t);
  tpu_hlo_value base = spread(c, tpu_hlo_scalar_f64(B, t, tpu_lower_float(c, 3, 10.0)));
  return done(c, tpu_hlo_binary(B, TPU_HLO_POW, base, e));
}

/* eye.out(n, *, out), eye.m_out(n, m, *, out) */
static tpu_status_t eye_rule(tpu_lower_ctx *c) {
  tpu_hlo_type it = *OUT;
  it.dtype = TPU_S64;
  return done(c, tpu_hlo_compare(B, TPU_HLO_EQ, tpu_hlo_iota(B, &it, 0), tpu_hlo_iota(B, &it, 1)));
}

const tpu_lower_rule tpu_rules_shape[] = {
    {{"cat", "cat.out"}, cat_rule, 0, 0},
    {{"constant_pad_nd", "constant_pad_nd.out"}, constant_pad_rule, 0, 0},
    {{"reflection_pad1d", "reflection_pad1d.out"}, pad_rule, 0, REFLECT},
    {{"reflection_pad2d", "reflection_pad2d.out"}, pad_rule, 0, REFLECT},
    {{"reflection_pad3d", "reflection_pad3d.out"}, pad_rule, 0, REFLECT},
    {{"replication_pad1d", "replication_pad1d.out"}, pad_rule, 0, REPLICATE},
    {{"replication_pad2d", "replication_pad2d.out"}, pad_rule, 0, REPLICATE},
    {{"replication_pad3d", "replication_pad3d.out"}, pad_rule, 0, REPLICATE},
    {{"reflection_pad1d_backward", "reflection_pad1d_backward.grad_input"}, pad_backward_rule, 0, REFLECT},
    {{"reflection_pad2d_backward", "reflection_pad2d_backward.grad_input"}, pad_backward_rule, 0, REFLECT},
    {{"reflection_pad3d_backward", "reflection_pad3d_backward.grad_input"}, pad_backward_rule, 0, REFLECT},
    {{"replication_pad1d_backward", "replication_pad1d_backward.grad_input"}, pad_backward_rule, 0, REPLICATE},
    {{"replication_pad2d_backward", "replication_pad2d_backward.grad_input"}, pad_backward_rule, 0, REPLICATE},
    {{"replication_pad3d_backward", "replication_pad3d_backward.grad_input"}, pad_backward_rule, 0, REPLICATE},
    {{"flip", "flip.out"}, flip_rule, 0, 0},
    {{"roll", "roll.out"}, roll_rule, 0, 0},
    {{"tril", "tril_", "tril.out"}, tri_rule, 0, TRIL},
    {{"triu", "triu_", "triu.out"}, tri_rule, 0, TRIU},
    {{"arange.start_out"}, arange_rule, 0, 0},
    /* The functional form's length depends on the values of start, end and
     * step, so they are constants of its program (the out= form gets its
     * length from out, which is part of the key). */
    {{"arange.start_step"}, arange_rule, TPU_RULE_CONST_SCALARS, 0},
    {{"linspace.out"}, linspace_rule, 0, 0},
    {{"logspace.out"}, logspace_rule, 0, 0},
    {{"eye.out"}, eye_rule, 0, 0},
    {{"eye.m_out"}, eye_rule, 0, 0},
};
TPU_COUNT_RULES(shape);
