/* Pooling: max pooling with indices, average pooling and adaptive average
 * pooling (2-D and 3-D) and their backwards, adaptive and fractional max
 * pooling, with theirs. 1-D pooling and 1-D adaptive pooling are PyTorch
 * composites of the 2-D ops.
 *
 * Pooling reads the last 2 or 3 dims as spatial and every leading dim as a
 * batch of planes. Output sizes come from PyTorch's meta functions; every
 * window is padded so that it yields exactly those sizes (ceil_mode only
 * changes the padding at the end). Half types compute in float32 and round
 * once. */
#include <math.h>
#include <stdlib.h>

#include "lower/spatial.h"

/* --- pooling ------------------------------------------------------------------------- */

/* A pooling window over the last |n| dims of a rank |rank| tensor: PyTorch's
 * kernel, stride, padding and dilation per spatial dim, and where the planes'
 * leading dims end. */
typedef struct pool_geom {
  int n, rank, lead;
  int64_t kernel[3], stride[3], pad[3], dilation[3];
} pool_geom;

/* The geometry from (kernel_size, stride, padding[, dilation]) starting at
 * argument |arg|; |n| (2 or 3) is c->data. */
static pool_geom pool_geometry(tpu_lower_ctx *c, int arg, int rank, bool has_dilation) {
  pool_geom g = {.n = (int)c->data, .rank = rank, .lead = rank - (int)c->data};
  int64_t ones[3] = {1, 1, 1};
  int_list(c, arg, g.n, ones, g.kernel);
  int_list(c, arg + 1, g.n, g.kernel, g.stride);
  int_list(c, arg + 2, g.n, ones, g.pad);
  if (has_dilation) int_list(c, arg + 3, g.n, ones, g.dilation);
  else for (int i = 0; i < g.n; i++) g.dilation[i] = 1;
  return g;
}

/* The reduce_window that maps |in| to the output sizes |out| (types of the
 * pooled tensor and of the result). The padding at the end reaches the last
 * window; with ceil_mode that window may stick out past the padding. */
static tpu_hlo_window pool_window(const pool_geom *g, const tpu_hlo_type *in, const tpu_hlo_type *out) {
  tpu_hlo_window w;
  tpu_hlo_window_init(&w, g->rank);
  for (int i = 0; i < g->n; i++) {
    int d = g->lead + i;
    w.dims[d] = g->kernel[i];
    w.strides[d] = g->stride[i];
    w.window_dilations[d] = g->dilation[i];
    w.pad_lo[d] = g->pad[i];
    int64_t hi = (out->dims[d] - 1) * g->stride[i] + g->dilation[i] * (g->kernel[i] - 1) + 1 - in->dims[d] - g->pad[i];
    w.pad_hi[d] = hi > 0 ? hi : 0; /* the floor of the size formula drops the rest */
  }
  return w;
}

/* The flat position of every element within its plane (h * W + w), as
 * PyTorch's max pooling indices count. */
static tpu_hlo_value plane_positions(tpu_lower_ctx *c, const pool_geom *g, const tpu_hlo_type *x) {
  tpu_hlo_type t = *x;
  t.dtype = TPU_S64;
  tpu_hlo_value pos = tpu_hlo_const_i64(B, &t, 0);
  for (int i = 0; i < g->n; i++) {
    int d = g->lead + i;
    pos = bin(c, TPU_HLO_MUL, pos, tpu_hlo_const_i64(B, &t, x->dims[d]));
    pos = bin(c, TPU_HLO_ADD, pos, tpu_hlo_iota(B, &t, d));
  }
  return pos;
}

/* The max-pooling combiner on (value, index) pairs, PyTorch's scan order
 * made order-free: NaN wins (among NaNs the last index, as PyTorch's scan
 * keeps replacing), then the larger value, then on ties the first index. */
static void argmax_body(tpu_lower_ctx *c, tpu_dtype_t dtype, tpu_hlo_region *out) {
  tpu_hlo_type ts[4] = {tpu_hlo_make_type(dtype, 0, NULL), tpu_hlo_make_type(TPU_S64, 0, NULL)};
  ts[2] = ts[0];
  ts[3] = ts[1];
  tpu_hlo_value a[4];
  tpu_hlo_region_begin(B, 4, ts, a);
  tpu_hlo_value v1 = a[0], i1 = a[1], v2 = a[2], i2 = a[3];
  tpu_hlo_value not_nan1 = cmp(c, TPU_HLO_EQ, v1, v1), nan2 = cmp(c, TPU_HLO_NE, v2, v2);
  tpu_hlo_value tie = bin(c, TPU_HLO_AND, cmp(c, TPU_HLO_EQ, v2, v1), cmp(c, TPU_HLO_LT, i2, i1));
  tpu_hlo_value bigger = bin(c, TPU_HLO_OR, cmp(c, TPU_HLO_GT, v2, v1), tie);
  tpu_hlo_value take2 = tpu_hlo_select(B, nan2, bin(c, TPU_HLO_OR, not_nan1, cmp(c, TPU_HLO_GT, i2, i1)),
                                       bin(c, TPU_HLO_AND, not_nan1, bigger));
  tpu_hlo_value r[2] = {tpu_hlo_select(B, take2, v2, v1), tpu_hlo_select(B, take2, i2, i1)};
  tpu_hlo_region_end(B, r, 2, out);
}

/* max_pool{2,3}d_with_indices(self, kernel_size, stride, padding, dilation,
 *                             ceil_mode) -> (values, indices) */
static tpu_status_t max_pool_rule(tpu_lower_ctx *c) {
  tpu_dtype_t dt = c->args[0].dtype;
  pool_geom g = pool_geometry(c, 1, c->args[0].rank, true);
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  const tpu_hlo_type xt = *tpu_hlo_type_of(B, x);
  tpu_hlo_window w = pool_window(&g, &xt, OUT);
  tpu_hlo_value xs[2] = {x, plane_positions(c, &g, &xt)};
  /* padding is -inf with an index no element has, so it never wins */
  tpu_hlo_value inits[2] = {tpu_hlo_scalar_min(B, dt), tpu_hlo_scalar_i64(B, TPU_S64, INT64_MAX)};
  tpu_hlo_region body;
  argmax_body(c, dt, &body);
  tpu_hlo_value r[2];
  tpu_hlo_reduce_window(B, xs, inits, 2, &w, &body, r);
  tpu_lower_set_output(c, 0, r[0]);
  tpu_lower_set_output(c, 1, r[1]);
  return NULL;
}

/* |x| as rows (all leading dims) x positions within a plane. */
static tpu_hlo_value as_rows(tpu_lower_ctx *c, tpu_hlo_value x, int lead) {
  const tpu_hlo_type t = *tpu_hlo_type_of(B, x);
  int64_t dims[2] = {1, 1};
  for (int i = 0; i < t.rank; i++) dims[i < lead ? 0 : 1] *= t.dims[i];
  return tpu_hlo_reshape(B, x, 2, dims);
}

/* The gradient of a max pooling whose argmaxes (plane positions) are tensor
 * argument |indices|: each output gradient is added at its recorded argmax
 * (windows overlap, so positions can repeat). */
static tpu_status_t scatter_to_argmax(tpu_lower_ctx *c, int indices) {
  int lead = OUT->rank - (int)c->data;
  tpu_hlo_type t = opmath_type(OUT);
  tpu_hlo_value gy = as_rows(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t.dtype), lead);
  tpu_hlo_value idx = as_rows(c, tpu_lower_tensor(c, indices), lead);
  const tpu_hlo_type it = *tpu_hlo_type_of(B, idx);
  /* (row, position) pairs along a new minor dim */
  int64_t pair_dims[3] = {it.dims[0], it.dims[1], 1};
  tpu_hlo_type pair_t = tpu_hlo_make_type(TPU_S64, 3, pair_dims);
  tpu_hlo_value pair[2] = {tpu_hlo_iota(B, &pair_t, 0), tpu_hlo_reshape(B, idx, 3, pair_dims)};
  tpu_hlo_value zeros = as_rows(c, tpu_hlo_const_f64(B, &t, 0.0), lead);
  tpu_hlo_scatter_dims d = {.num_inserted = 2, .inserted_window_dims = {0, 1}, .num_to_operand = 2,
                            .scatter_dims_to_operand_dims = {0, 1}, .index_vector_dim = 2};
  tpu_hlo_region add;
  tpu_hlo_region_binary(B, TPU_HLO_ADD, t.dtype, &add);
  tpu_hlo_value gx = tpu_hlo_scatter(B, zeros, tpu_hlo_concatenate(B, pair, 2, 2), gy, &d, &add, false);
  tpu_lower_set_output(c, 0, tpu_hlo_reshape(B, gx, OUT->rank, OUT->dims));
  return NULL;
}

/* max_pool{2,3}d_with_indices_backward(grad_output, self, kernel_size, stride,
 *     padding, dilation, ceil_mode, indices) */
static tpu_status_t max_pool_backward_rule(tpu_lower_ctx *c) { return scatter_to_argmax(c, 7); }

/* The divisor of every average-pooling window along spatial dim |i| (output
 * size |out|, input size |in|), as a 1-D value: with count_include_pad the
 * window's size clipped to the padded input (a ceil_mode window sticking out
 * past the padding counts only up to it), otherwise the input elements it
 * covers. An empty window gets 1: its sum is 0, and PyTorch writes 0. */
static tpu_hlo_value window_counts(tpu_lower_ctx *c, const pool_geom *g, int i, int64_t in, int64_t out,
                                   bool include_pad) {
  tpu_hlo_type t = tpu_hlo_make_type(TPU_S64, 1, &out);
  tpu_hlo_value size = tpu_hlo_const_i64(B, &t, in), pad = tpu_hlo_const_i64(B, &t, g->pad[i]);
  tpu_hlo_value start = bin(c, TPU_HLO_MUL, tpu_hlo_iota(B, &t, 0), tpu_hlo_const_i64(B, &t, g->stride[i]));
  start = bin(c, TPU_HLO_SUB, start, pad);
  tpu_hlo_value end = bin(c, TPU_HLO_ADD, start, tpu_hlo_const_i64(B, &t, g->kernel[i]));
  end = bin(c, TPU_HLO_MIN, end, bin(c, TPU_HLO_ADD, size, pad));
  if (include_pad) return bin(c, TPU_HLO_SUB, end, start);
  start = bin(c, TPU_HLO_MAX, start, tpu_hlo_const_i64(B, &t, 0));
  tpu_hlo_value n = bin(c, TPU_HLO_SUB, bin(c, TPU_HLO_MIN, end, size), start);
  return bin(c, TPU_HLO_MAX, n, tpu_hlo_const_i64(B, &t, 1));
}

/* The divisors of every output element of an average pooling, in |t|. */
static tpu_hlo_value pool_divisors(tpu_lower_ctx *c, const pool_geom *g, const tpu_hlo_type *in,
                                   const tpu_hlo_type *t, bool include_pad, int divisor_arg) {
  if (!tpu_lower_is_none(c, divisor_arg)) return tpu_hlo_const_i64(B, t, tpu_lower_int(c, divisor_arg, 1));
  tpu_hlo_value div = tpu_hlo_const_i64(B, t, 1);
  for (int i = 0; i < g->n; i++) {
    int64_t d = g->lead + i;
    tpu_hlo_value counts = window_counts(c, g, i, in->dims[d], t->dims[d], include_pad);
    counts = tpu_hlo_broadcast_in_dim(B, tpu_hlo_convert(B, counts, t->dtype), t, &d);
    div = bin(c, TPU_HLO_MUL, div, counts);
  }
  return div;
}

/* avg_pool{2,3}d(self, kernel_size, stride, padding, ceil_mode,
 *                count_include_pad, divisor_override): window sums over
 * zero padding, divided as PyTorch (integer division for int64). */
static tpu_status_t avg_pool_rule(tpu_lower_ctx *c) {
  pool_geom g = pool_geometry(c, 1, c->args[0].rank, false);
  tpu_hlo_type t = opmath_type(OUT);
  tpu_hlo_value x = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t.dtype);
  const tpu_hlo_type xt = *tpu_hlo_type_of(B, x);
  tpu_hlo_window w = pool_window(&g, &xt, OUT);
  tpu_hlo_region add;
  tpu_hlo_region_binary(B, TPU_HLO_ADD, t.dtype, &add);
  tpu_hlo_value zero = tpu_hlo_scalar_i64(B, t.dtype, 0), sum;
  tpu_hlo_reduce_window(B, &x, &zero, 1, &w, &add, &sum);
  tpu_hlo_value div = pool_divisors(c, &g, &xt, &t, tpu_lower_bool(c, 5, true), 6);
  tpu_lower_set_output(c, 0, bin(c, TPU_HLO_DIV, sum, div));
  return NULL;
}

/* avg_pool{2,3}d_backward(grad_output, self, kernel_size, stride, padding,
 *     ceil_mode, count_include_pad, divisor_override): every input element
 * gets the divided gradients of the windows that cover it: the gradients,
 * spread out by the stride and padded, summed over kernel-sized windows. */
static tpu_status_t avg_pool_backward_rule(tpu_lower_ctx *c) {
  pool_geom g = pool_geometry(c, 2, c->args[1].rank, false);
  tpu_hlo_type t = opmath_type(OUT);
  tpu_hlo_value gy = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t.dtype);
  const tpu_hlo_type gt = *tpu_hlo_type_of(B, gy);
  gy = bin(c, TPU_HLO_DIV, gy, pool_divisors(c, &g, &t, &gt, tpu_lower_bool(c, 6, true), 7));
  int64_t lo[TPU_HLO_MAX_RANK] = {0}, hi[TPU_HLO_MAX_RANK] = {0}, interior[TPU_HLO_MAX_RANK] = {0};
  tpu_hlo_window w;
  tpu_hlo_window_init(&w, g.rank);
  for (int i = 0; i < g.n; i++) {
    int d = g.lead + i;
    lo[d] = g.kernel[i] - 1 - g.pad[i];
    hi[d] = t.dims[d] + g.pad[i] - 1 - (gt.dims[d] - 1) * g.stride[i];
    interior[d] = g.stride[i] - 1;
    w.dims[d] = g.kernel[i];
  }
  tpu_hlo_value zero = tpu_hlo_scalar_i64(B, t.dtype, 0), gx;
  gy = tpu_hlo_pad(B, gy, zero, lo, hi, interior);
  tpu_hlo_region add;
  tpu_hlo_region_binary(B, TPU_HLO_ADD, t.dtype, &add);
  tpu_hlo_reduce_window(B, &gy, &zero, 1, &w, &add, &gx);
  tpu_lower_set_output(c, 0, gx);
  return NULL;
}

/* Adaptive average pooling windows along one dim as a 0/1 matrix
 * (out x in): output o covers [floor(o * in / out), ceil((o + 1) * in / out)). */
static tpu_hlo_value adaptive_windows(tpu_lower_ctx *c, int64_t out, int64_t in, tpu_dtype_t dtype) {
  int64_t dims[2] = {out, in};
  tpu_hlo_type t = tpu_hlo_make_type(TPU_S64, 2, dims);
  tpu_hlo_value o = tpu_hlo_iota(B, &t, 0), i = tpu_hlo_iota(B, &t, 1);
  tpu_hlo_value k_in = tpu_hlo_const_i64(B, &t, in), k_out = tpu_hlo_const_i64(B, &t, out);
  tpu_hlo_value start = bin(c, TPU_HLO_DIV, bin(c, TPU_HLO_MUL, o, k_in), k_out);
  tpu_hlo_value end = bin(c, TPU_HLO_ADD, bin(c, TPU_HLO_MUL, o, k_in), k_in); /* (o + 1) * in */
  end = bin(c, TPU_HLO_DIV, bin(c, TPU_HLO_ADD, end, tpu_hlo_const_i64(B, &t, out - 1)), k_out);
  return tpu_hlo_convert(B, bin(c, TPU_HLO_AND, cmp(c, TPU_HLO_GE, i, start), cmp(c, TPU_HLO_LT, i, end)), dtype);
}

/* The element count of every adaptive window, in |t|'s shape. */
static tpu_hlo_value adaptive_counts(tpu_lower_ctx *c, const tpu_hlo_type *in, const tpu_hlo_type *t, int lead) {
  tpu_hlo_value n = tpu_hlo_const_f64(B, t, 1.0);
  for (int64_t d = lead; d < t->rank; d++) {
    tpu_hlo_value m = adaptive_windows(c, t->dims[d], in->dims[d], t->dtype);
    int64_t row = 1;
    tpu_hlo_value per = tpu_hlo_reduce_simple(B, m, tpu_hlo_scalar_f64(B, t->dtype, 0.0), TPU_HLO_ADD, &row, 1);
    n = bin(c, TPU_HLO_MUL, n, tpu_hlo_broadcast_in_dim(B, per, t, &d));
  }
  return n;
}

/* _adaptive_avg_pool{2,3}d(self, output_size): window sums (products with
 * 0/1 window matrices, one spatial dim at a time) divided by the counts. */
static tpu_status_t adaptive_avg_pool_rule(tpu_lower_ctx *c) {
  int lead = c->args[0].rank - (int)c->data;
  tpu_hlo_type t = opmath_type(OUT);
  tpu_hlo_value x = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t.dtype);
  const tpu_hlo_type in = *tpu_hlo_type_of(B, x);
  for (int d = lead; d < t.rank; d++) x = along(c, x, d, adaptive_windows(c, t.dims[d], in.dims[d], t.dtype), false);
  tpu_lower_set_output(c, 0, bin(c, TPU_HLO_DIV, x, adaptive_counts(c, &in, &t, lead)));
  return NULL;
}

/* _adaptive_avg_pool{2,3}d_backward(grad_output, self): the divided
 * gradients spread back through the transposed window matrices. */
static tpu_status_t adaptive_avg_pool_backward_rule(tpu_lower_ctx *c) {
  int lead = c->args[1].rank - (int)c->data;
  tpu_hlo_type t = opmath_type(OUT);
  tpu_hlo_value gy = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t.dtype);
  const tpu_hlo_type gt = *tpu_hlo_type_of(B, gy);
  gy = bin(c, TPU_HLO_DIV, gy, adaptive_counts(c, &t, &gt, lead));
  for (int d = lead; d < t.rank; d++) gy = along(c, gy, d, adaptive_windows(c, gt.dims[d], t.dims[d], t.dtype), true);
  tpu_lower_set_output(c, 0, gy);
  return NULL;
}

/* Where output position o along spatial dim |d| reads input position j: an
 * i1 value of |wt| ([..., out, in, ...], out at dim d, in at d + 1). */
typedef tpu_hlo_value (*box_fn)(tpu_lower_ctx *c, int d, const tpu_hlo_type *wt, const void *user);

/* Max pooling over windows that are boxes, -> (values, indices): one spatial
 * dim at a time, every output position takes the argmax of its window along
 * the dim (the other positions masked out) with max pooling's order-free
 * combiner, so the dims compose to PyTorch's scan over the box. */
static tpu_status_t max_over_boxes(tpu_lower_ctx *c, int spatial, box_fn inside, const void *user) {
  tpu_dtype_t dt = c->args[0].dtype;
  pool_geom g = {.n = spatial, .rank = c->args[0].rank, .lead = c->args[0].rank - spatial};
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  tpu_hlo_value r[2] = {x, plane_positions(c, &g, tpu_hlo_type_of(B, x))};
  tpu_hlo_value inits[2] = {tpu_hlo_scalar_min(B, dt), tpu_hlo_scalar_i64(B, TPU_S64, INT64_MAX)};
  for (int d = g.lead; d < g.rank; d++) {
    const tpu_hlo_type vt = *tpu_hlo_type_of(B, r[0]);
    int64_t kept[TPU_HLO_MAX_RANK];
    tpu_hlo_type wt = vt; /* [..., out, in, ...] */
    for (int i = wt.rank; i > d; i--) wt.dims[i] = wt.dims[i - 1];
    wt.rank++;
    wt.dims[d] = OUT->dims[d];
    for (int i = 0; i < vt.rank; i++) kept[i] = i < d ? i : i + 1;
    wt.dtype = TPU_BOOL;
    tpu_hlo_value in = inside(c, d, &wt, user);
    tpu_hlo_value xs[2];
    for (int j = 0; j < 2; j++) {
      wt.dtype = tpu_hlo_dtype(B, r[j]);
      xs[j] = sel(c, in, tpu_hlo_broadcast_in_dim(B, r[j], &wt, kept), tpu_hlo_broadcast_to(B, inits[j], &wt));
    }
    tpu_hlo_region body;
    argmax_body(c, dt, &body);
    int64_t in_dim = d + 1;
    tpu_hlo_reduce(B, xs, inits, 2, &in_dim, 1, &body, r);
  }
  tpu_lower_set_output(c, 0, r[0]);
  tpu_lower_set_output(c, 1, r[1]);
  return NULL;
}

static tpu_hlo_value adaptive_box(tpu_lower_ctx *c, int d, const tpu_hlo_type *wt, const void *user) {
  int64_t window[2] = {d, d + 1};
  return tpu_hlo_broadcast_in_dim(B, adaptive_windows(c, wt->dims[d], wt->dims[d + 1], TPU_BOOL), wt, window);
}

/* adaptive_max_pool{2,3}d(self, output_size) -> (values, indices) */
static tpu_status_t adaptive_max_pool_rule(tpu_lower_ctx *c) {
  return max_over_boxes(c, (int)c->data, adaptive_box, NULL);
}

/* Fractional max pooling (Graham 2014): windows of a fixed size at
 * pseudo-random starts, one sequence per plane and spatial dim from the
 * plane's sample u, as PyTorch's CPU kernel computes them in the input's
 * dtype: start(o) = int((o + u) * alpha) - int(u * alpha) with
 * alpha = (in - pool) / (out - 1), and the last window ending at the edge. */
typedef struct fractional {
  tpu_hlo_value samples; /* [planes..., spatial] */
  int lead, spatial;
  int64_t pool[3];
} fractional;

static tpu_hlo_value fractional_box(tpu_lower_ctx *c, int d, const tpu_hlo_type *wt, const void *user) {
  const fractional *f = user;
  int i = d - f->lead;
  /* 2-D samples hold (W, H), 3-D ones (T, H, W) */
  int which = f->spatial == 2 ? 1 - i : i;
  int64_t out = wt->dims[d], in = wt->dims[d + 1], pool = f->pool[i];
  tpu_hlo_type st = *tpu_hlo_type_of(B, f->samples);
  tpu_hlo_value u = tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, f->samples, f->lead, which, which + 1, 1), f->lead, st.dims);
  tpu_hlo_type seq_t = tpu_hlo_make_type(st.dtype, f->lead + 1, st.dims); /* [planes..., out] */
  seq_t.dims[f->lead] = out;
  int64_t to[TPU_HLO_MAX_RANK]; /* the planes keep their dims; out goes to d in the window */
  for (int k = 0; k < f->lead; k++) to[k] = k;
  u = tpu_hlo_broadcast_in_dim(B, u, &seq_t, to);
  tpu_hlo_value alpha = dvd(c, tpu_hlo_const_f64(B, &seq_t, (double)(in - pool)),
                            tpu_hlo_const_f64(B, &seq_t, (double)(out > 1 ? out - 1 : 1)));
  tpu_hlo_type pos_t = seq_t;
  pos_t.dtype = TPU_S64;
  tpu_hlo_value o = tpu_hlo_iota(B, &pos_t, f->lead);
  tpu_hlo_value start = bin(c, TPU_HLO_SUB, tpu_hlo_convert(B, mul(c, add(c, tpu_hlo_convert(B, o, st.dtype), u), alpha), TPU_S64),
                            tpu_hlo_convert(B, mul(c, u, alpha), TPU_S64));
  start = sel(c, cmp(c, TPU_HLO_EQ, o, tpu_hlo_const_i64(B, &pos_t, out - 1)), tpu_hlo_const_i64(B, &pos_t, in - pool), start);
  tpu_hlo_type jt = *wt;
  jt.dtype = TPU_S64;
  to[f->lead] = d;
  tpu_hlo_value first = tpu_hlo_broadcast_in_dim(B, start, &jt, to), j = tpu_hlo_iota(B, &jt, d + 1);
  return and_(c, cmp(c, TPU_HLO_GE, j, first), cmp(c, TPU_HLO_LT, j, add(c, first, tpu_hlo_const_i64(B, &jt, pool))));
}

/* fractional_max_pool{2,3}d(self, kernel_size, output_size, random_samples)
 * -> (values, indices). A sample batch may be larger than the input's; an
 * unbatched input reads the first. */
static tpu_status_t fractional_max_pool_rule(tpu_lower_ctx *c) {
  tpu_dtype_t dt = c->args[0].dtype;
  int spatial = (int)c->data;
  fractional f = {.lead = c->args[0].rank - spatial, .spatial = spatial};
  static const int64_t none[3] = {1, 1, 1};
  int_list(c, 1, spatial, none, f.pool);
  const tpu_lower_arg *x = &c->args[0], *u = &c->args[3];
  int64_t batch = f.lead == 2 ? x->sizes[0] : 1, dims[TPU_HLO_MAX_RANK];
  /* The CPU kernel's checks of the samples (the 3-D meta function has none) */
  if (u->dtype != dt) return tpu_lower_error(c, TPU_ERR_RUNTIME, "Expect _random_samples to have the same dtype as input");
  if (u->rank != 3)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "Expect _random_samples to have 3 dimensions, got %d", u->rank);
  if (u->sizes[0] < batch)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "Expect _random_samples.size(0) no less then input batch size.");
  if (u->sizes[1] != x->sizes[f.lead - 1])
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "Expect _random_samples.size(1) equals to input channel size.");
  if (u->sizes[2] != spatial)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "Expect _random_samples.size(2) equals to %d; got %lld.", spatial,
                           (long long)u->sizes[2]);
  for (int k = 0; k < f.lead; k++) dims[k] = x->sizes[k];
  dims[f.lead] = spatial;
  f.samples = tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, tpu_lower_tensor(c, 3), 0, 0, batch, 1), f.lead + 1, dims);
  return max_over_boxes(c, spatial, fractional_box, &f);
}

/* adaptive_max_pool{2,3}d_backward(grad_output, self, indices) */
static tpu_status_t adaptive_max_pool_backward_rule(tpu_lower_ctx *c) { return scatter_to_argmax(c, 2); }

/* fractional_max_pool{2,3}d_backward(grad_output, self, kernel_size,
 *     output_size, indices) */
static tpu_status_t fractional_max_pool_backward_rule(tpu_lower_ctx *c) { return scatter_to_argmax(c, 4); }

/* What the CPU max pooling kernels take. */
#define MAX_POOL_DTYPES (~(TPU_DT(TPU_BOOL) | TPU_DTS_COMPLEX))

const tpu_lower_rule tpu_rules_pool[] = {
    {{"max_pool2d_with_indices", "max_pool2d_with_indices.out"}, max_pool_rule, 0, 2, {MAX_POOL_DTYPES, 0, "max_pool2d"}},
    {{"max_pool3d_with_indices", "max_pool3d_with_indices.out"}, max_pool_rule, 0, 3, {MAX_POOL_DTYPES, 0, "max_pool3d"}},
    {{"max_pool2d_with_indices_backward", "max_pool2d_with_indices_backward.grad_input"}, max_pool_backward_rule, 0, 2},
    {{"max_pool3d_with_indices_backward", "max_pool3d_with_indices_backward.grad_input"}, max_pool_backward_rule, 0, 3},
    {{"avg_pool2d", "avg_pool2d.out"}, avg_pool_rule, 0, 2, {TPU_DTS_FLOAT | TPU_DT(TPU_S64), 0, "avg_pool2d"}},
    {{"avg_pool3d", "avg_pool3d.out"}, avg_pool_rule, 0, 3,
     {(TPU_DTS_FLOAT | TPU_DT(TPU_S64)) & ~TPU_DT(TPU_F16), 0, "avg_pool3d_out_frame"}},
    {{"avg_pool2d_backward", "avg_pool2d_backward.grad_input"}, avg_pool_backward_rule, 0, 2},
    {{"avg_pool3d_backward", "avg_pool3d_backward.grad_input"}, avg_pool_backward_rule, 0, 3},
    {{"_adaptive_avg_pool2d", "_adaptive_avg_pool2d.out"}, adaptive_avg_pool_rule, 0, 2,
     {TPU_DTS_FLOAT, 0, "adaptive_avg_pool2d"}},
    {{"_adaptive_avg_pool3d", "_adaptive_avg_pool3d.out"}, adaptive_avg_pool_rule, 0, 3,
     {TPU_DTS_FLOAT, 0, "adaptive_avg_pool3d_cpu"}},
    {{"_adaptive_avg_pool2d_backward", "_adaptive_avg_pool2d_backward.out"}, adaptive_avg_pool_backward_rule, 0, 2},
    {{"_adaptive_avg_pool3d_backward", "_adaptive_avg_pool3d_backward.out"}, adaptive_avg_pool_backward_rule, 0, 3},
    {{"fractional_max_pool2d", "fractional_max_pool2d.output"}, fractional_max_pool_rule, 0, 2,
     {TPU_DTS_FLOAT, 0, "fractional_max_pool2d_out_frame"}},
    {{"fractional_max_pool3d", "fractional_max_pool3d.output"}, fractional_max_pool_rule, 0, 3,
     {TPU_DTS_FLOAT, 0, "fractional_max_pool3d_out_frame"}},
    {{"fractional_max_pool2d_backward", "fractional_max_pool2d_backward.grad_input"},
     fractional_max_pool_backward_rule, 0, 2},
    {{"fractional_max_pool3d_backward", "fractional_max_pool3d_backward.grad_input"},
     fractional_max_pool_backward_rule, 0, 3},
    {{"adaptive_max_pool2d", "adaptive_max_pool2d.out"}, adaptive_max_pool_rule, 0, 2,
     {TPU_DTS_FLOAT, 0, "adaptive_max_pool2d"}},
    {{"adaptive_max_pool3d", "adaptive_max_pool3d.out"}, adaptive_max_pool_rule, 0, 3,
     {TPU_DTS_FLOAT, 0, "adaptive_max_pool3d_cpu"}},
    {{"adaptive_max_pool2d_backward", "adaptive_max_pool2d_backward.grad_input"},
     adaptive_max_pool_backward_rule, 0, 2},
    {{"adaptive_max_pool3d_backward", "adaptive_max_pool3d_backward.grad_input"},
     adaptive_max_pool_backward_rule, 0, 3},
};
TPU_COUNT_RULES(pool);
