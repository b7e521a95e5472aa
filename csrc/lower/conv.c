/* Convolutions and pooling: convolution_overrideable and its backward (where
 * PyTorch's _convolution sends a tpu convolution of any kind: 1-3 spatial
 * dims, strided, padded, dilated, grouped, transposed), max pooling with
 * indices, average pooling and adaptive average pooling (2-D and 3-D), and
 * their backwards, adaptive and fractional max pooling, grid sampling and the upsample
 * (interpolate) ops, with theirs. 1-D pooling and 1-D adaptive pooling are
 * PyTorch composites of the 2-D ops.
 *
 * Layouts are PyTorch's: input N C spatial…, weight O I/groups spatial… (a
 * transposed convolution's weight is I O/groups spatial…). Pooling reads the
 * last 2 or 3 dims as spatial and every leading dim as a batch of planes.
 * Output sizes come from PyTorch's meta functions; every window is padded so
 * that it yields exactly those sizes (ceil_mode only changes the padding at
 * the end). Half types compute in float32 and round once. */
#include <math.h>
#include <stdlib.h>

#include "lower/rules.h"

static tpu_hlo_value bin(tpu_lower_ctx *c, tpu_hlo_binary_t op, tpu_hlo_value x, tpu_hlo_value y) {
  return tpu_hlo_binary(B, op, x, y);
}

/* An int list argument expanded to |n| values: one value is repeated, an
 * empty list takes |dflt| (pooling's stride defaults to the kernel size). */
static void int_list(const tpu_lower_ctx *c, int arg, int n, const int64_t *dflt, int64_t *out) {
  const tpu_lower_arg *a = &c->args[arg];
  for (int i = 0; i < n; i++)
    out[i] = a->kind != TPU_ARG_INT_LIST ? a->i : a->n == 0 ? dflt[i] : a->ints[a->n == 1 ? 0 : i];
}

/* PyTorch's CPU error for a dtype its kernel |kernel| does not handle (the
 * meta functions accept more than the CPU kernels do). */
static tpu_status_t cpu_refuses(tpu_lower_ctx *c, const char *kernel, tpu_dtype_t t) {
  return tpu_lower_error(c, TPU_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s'", kernel,
                         tpu_dtype_scalar_type(t));
}

static bool is_float(tpu_dtype_t t) { return t == TPU_F16 || t == TPU_BF16 || t == TPU_F32 || t == TPU_F64; }

/* --- convolution ----------------------------------------------------------------- */

/* The spatial geometry of a convolution: PyTorch's stride, padding, dilation
 * and kernel sizes, per spatial dim. */
typedef struct conv_geom {
  int n;
  int64_t stride[3], pad[3], dilation[3], kernel[3];
} conv_geom;

static conv_geom conv_geometry(tpu_lower_ctx *c, int weight_arg, int first_list_arg) {
  conv_geom g = {.n = c->args[weight_arg].rank - 2};
  int64_t ones[3] = {1, 1, 1};
  int_list(c, first_list_arg, g.n, ones, g.stride);
  int_list(c, first_list_arg + 1, g.n, ones, g.pad);
  int_list(c, first_list_arg + 2, g.n, ones, g.dilation);
  for (int i = 0; i < g.n; i++) g.kernel[i] = c->args[weight_arg].sizes[2 + i];
  return g;
}

static int64_t spatial_size(tpu_lower_ctx *c, tpu_hlo_value x, int i) { return tpu_hlo_type_of(B, x)->dims[2 + i]; }

/* The convolution of x (N, C, …) with w (O, C/groups, …) whose output has
 * |out|'s spatial sizes: padding at the end is whatever reaches them exactly
 * (negative when PyTorch's floor drops input). */
static tpu_hlo_value conv(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value w, const conv_geom *g, int64_t groups,
                          const tpu_hlo_type *out) {
  tpu_hlo_conv cv;
  tpu_hlo_conv_init(&cv, g->n);
  cv.feature_groups = groups;
  for (int i = 0; i < g->n; i++) {
    cv.stride[i] = g->stride[i];
    cv.rhs_dilation[i] = g->dilation[i];
    cv.pad_lo[i] = g->pad[i];
    cv.pad_hi[i] = (out->dims[2 + i] - 1) * g->stride[i] + g->dilation[i] * (g->kernel[i] - 1) + 1 -
                   spatial_size(c, x, i) - g->pad[i];
  }
  return tpu_hlo_convolution(B, x, w, &cv, out, c->precision);
}

/* The transposed convolution of x (N, C, …) with w (C, O/groups, …) whose
 * output has |out|'s spatial sizes (output_padding is the extra padding at
 * the end): a convolution of x dilated by the stride with the kernel flipped
 * and its in/out channels swapped within each group. */
static tpu_hlo_value conv_transposed(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value w, const conv_geom *g,
                                     int64_t groups, const tpu_hlo_type *out) {
  const tpu_hlo_type wt = *tpu_hlo_type_of(B, w);
  int rank = wt.rank;
  int64_t grouped[TPU_HLO_MAX_RANK + 1] = {groups, wt.dims[0] / groups, wt.dims[1]};
  int64_t perm[TPU_HLO_MAX_RANK + 1] = {0, 2, 1};
  int64_t swapped[TPU_HLO_MAX_RANK] = {wt.dims[1] * groups, wt.dims[0] / groups};
  int64_t flip[3];
  for (int i = 0; i < g->n; i++) {
    grouped[3 + i] = swapped[2 + i] = wt.dims[2 + i];
    perm[3 + i] = 3 + i;
    flip[i] = 2 + i;
  }
  w = tpu_hlo_reshape(B, w, rank + 1, grouped);
  w = tpu_hlo_reshape(B, tpu_hlo_transpose(B, w, perm), rank, swapped);
  w = tpu_hlo_reverse(B, w, flip, g->n);
  tpu_hlo_conv cv;
  tpu_hlo_conv_init(&cv, g->n);
  cv.feature_groups = groups;
  for (int i = 0; i < g->n; i++) {
    int64_t reach = g->dilation[i] * (g->kernel[i] - 1);
    cv.lhs_dilation[i] = g->stride[i];
    cv.rhs_dilation[i] = g->dilation[i];
    cv.pad_lo[i] = reach - g->pad[i];
    cv.pad_hi[i] = out->dims[2 + i] - 1 - (spatial_size(c, x, i) - 1) * g->stride[i] - cv.pad_lo[i] + reach;
  }
  return tpu_hlo_convolution(B, x, w, &cv, out, c->precision);
}

/* The gradient of conv(x, w) with respect to w, given the output gradient
 * gy: a convolution of x with gy in which the batch is contracted (x read
 * as C N …, gy as the kernel with N as its input features), the forward
 * dilation is the stride and the forward stride dilates gy; groups split the
 * batch (batch_group_count). |out| is w's type. */
static tpu_hlo_value conv_weight_grad(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value gy, const conv_geom *g,
                                      int64_t groups, const tpu_hlo_type *out) {
  tpu_hlo_conv cv;
  tpu_hlo_conv_init(&cv, g->n);
  cv.lhs_batch = 1;
  cv.lhs_feature = 0;
  cv.rhs_out = 1;
  cv.rhs_in = 0;
  cv.out_batch = 1;
  cv.out_feature = 0;
  cv.batch_groups = groups;
  for (int i = 0; i < g->n; i++) {
    cv.stride[i] = g->dilation[i];
    cv.rhs_dilation[i] = g->stride[i];
    cv.pad_lo[i] = g->pad[i];
    cv.pad_hi[i] = g->stride[i] * (spatial_size(c, gy, i) - 1) + g->dilation[i] * (g->kernel[i] - 1) + 1 -
                   spatial_size(c, x, i) - g->pad[i];
  }
  return tpu_hlo_convolution(B, x, gy, &cv, out, c->precision);
}

/* |t| with the compute dtype of its own dtype. */
static tpu_hlo_type opmath_type(const tpu_hlo_type *t) {
  tpu_hlo_type r = *t;
  r.dtype = tpu_lower_opmath(t->dtype);
  return r;
}

/* convolution_overrideable(input, weight, bias?, stride, padding, dilation,
 *                          transposed, output_padding, groups) */
static tpu_status_t convolution_rule(tpu_lower_ctx *c) {
  conv_geom g = conv_geometry(c, 1, 3);
  int64_t groups = tpu_lower_int(c, 8, 1);
  tpu_dtype_t dt = c->args[0].dtype;
  bool transposed = tpu_lower_bool(c, 6, false), dilated = false;
  for (int i = 0; i < g.n; i++) dilated |= g.dilation[i] != 1;
  /* The CPU kernel PyTorch picks (named in its error) refuses bool, and its
   * transposed and dilated kernels also small integer types. */
  if (dt == TPU_BOOL || ((transposed || dilated) && !is_float(dt) && !tpu_dtype_is_complex(dt) && dt != TPU_S64)) {
    const char *kernel = transposed ? (g.n == 3 ? "slow_conv_transpose3d_out_cpu" : "slow_conv_transpose2d_out_cpu")
                         : dilated  ? "slow_conv_dilated<>"
                         : g.n == 3 ? "compute_columns3d" : "slow_conv2d_cpu";
    return cpu_refuses(c, kernel, dt);
  }
  if (c->args[1].dtype != dt)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "expected scalar type %s but found %s", tpu_dtype_scalar_type(dt),
                           tpu_dtype_scalar_type(c->args[1].dtype));
  tpu_hlo_type t = opmath_type(OUT);
  tpu_hlo_value x = tpu_lower_tensor(c, 0), w = tpu_lower_tensor(c, 1);
  tpu_hlo_value y = transposed ? conv_transposed(c, x, w, &g, groups, &t) : conv(c, x, w, &g, groups, &t);
  if (!tpu_lower_is_none(c, 2)) {
    int64_t channel_dim = 1;
    tpu_hlo_value bias = tpu_hlo_convert(B, tpu_lower_tensor(c, 2), t.dtype);
    y = bin(c, TPU_HLO_ADD, y, tpu_hlo_broadcast_in_dim(B, bias, &t, &channel_dim));
  }
  tpu_lower_set_output(c, 0, y);
  return NULL;
}

/* convolution_backward_overrideable(grad_output, input, weight, stride,
 *     padding, dilation, transposed, output_padding, groups, output_mask)
 *     -> (grad_input, grad_weight, grad_bias); unwanted outputs are INVALID.
 * A transposed convolution is the adjoint of the plain one with the same
 * geometry, so the two swap roles. */
static tpu_status_t convolution_backward_rule(tpu_lower_ctx *c) {
  conv_geom g = conv_geometry(c, 2, 3);
  int64_t groups = tpu_lower_int(c, 8, 1);
  bool transposed = tpu_lower_bool(c, 6, false);
  tpu_hlo_value gy = tpu_lower_tensor(c, 0);
  if (c->out_types[0].dtype != TPU_INVALID) {
    tpu_hlo_type t = opmath_type(&c->out_types[0]);
    tpu_hlo_value w = tpu_lower_tensor(c, 2);
    tpu_lower_set_output(c, 0, transposed ? conv(c, gy, w, &g, groups, &t) : conv_transposed(c, gy, w, &g, groups, &t));
  }
  if (c->out_types[1].dtype != TPU_INVALID) {
    tpu_hlo_type t = opmath_type(&c->out_types[1]);
    tpu_hlo_value x = tpu_lower_tensor(c, 1);
    tpu_lower_set_output(c, 1, transposed ? conv_weight_grad(c, gy, x, &g, groups, &t)
                                          : conv_weight_grad(c, x, gy, &g, groups, &t));
  }
  if (c->out_types[2].dtype != TPU_INVALID) {
    int64_t dims[TPU_HLO_MAX_RANK];
    int n = 0, rank = c->args[0].rank;
    for (int i = 0; i < rank; i++)
      if (i != 1) dims[n++] = i;
    tpu_hlo_value gf = tpu_hlo_convert(B, gy, tpu_lower_opmath(c->out_types[2].dtype));
    tpu_lower_set_output(c, 2, tpu_lower_reduce(B, gf, TPU_HLO_ADD, dims, n));
  }
  return NULL;
}

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
  if (dt == TPU_BOOL || tpu_dtype_is_complex(dt)) return cpu_refuses(c, c->data == 2 ? "max_pool2d" : "max_pool3d", dt);
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
  tpu_dtype_t dt = c->args[0].dtype;
  if ((!is_float(dt) && dt != TPU_S64) || (c->data == 3 && dt == TPU_F16))
    return cpu_refuses(c, c->data == 2 ? "avg_pool2d" : "avg_pool3d_out_frame", dt);
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

/* x contracted along dim |d| with the windows matrix m (out x in, or in x
 * out when |backward|), the new dim put back in place. */
static tpu_hlo_value along(tpu_lower_ctx *c, tpu_hlo_value x, int d, tpu_hlo_value m, bool backward) {
  int rank = tpu_hlo_rank(B, x);
  tpu_hlo_dot_dims dd = {.num_contract = 1, .lhs_contract = {d}, .rhs_contract = {backward ? 0 : 1}};
  tpu_hlo_value r = tpu_hlo_dot_general(B, x, m, &dd, tpu_hlo_dtype(B, x), TPU_HLO_PRECISION_HIGHEST);
  /* the dot puts the new dim last */
  int64_t perm[TPU_HLO_MAX_RANK];
  for (int i = 0, k = 0; i < rank; i++) perm[i] = i == d ? rank - 1 : k++;
  return tpu_hlo_transpose(B, r, perm);
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
  if (!is_float(c->args[0].dtype))
    return cpu_refuses(c, c->data == 2 ? "adaptive_avg_pool2d" : "adaptive_avg_pool3d_cpu", c->args[0].dtype);
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
  tpu_dtype_t dt = c->args[0].dtype;
  if (!is_float(dt)) return cpu_refuses(c, c->data == 2 ? "adaptive_max_pool2d" : "adaptive_max_pool3d_cpu", dt);
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
  if (!is_float(dt))
    return cpu_refuses(c, spatial == 2 ? "fractional_max_pool2d_out_frame" : "fractional_max_pool3d_out_frame", dt);
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

/* --- resampling ------------------------------------------------------------------------- */

/* The interpolations of the upsample ops (c->data; BACKWARD marks their
 * backwards). Every one is separable: along each spatial dim, output o is a
 * weighted sum of a few input positions (taps), computed here on the host as
 * PyTorch's CPU kernels compute them (in float for float and half types), so
 * that indices agree exactly. */
enum { NEAREST, NEAREST_EXACT, LINEAR, CUBIC, LINEAR_AA, CUBIC_AA, BACKWARD = 8 };

/* Tap t of output o reads input index[t * out + o] with weight[t * out + o]. */
typedef struct taps {
  int n;
  int64_t out;
  int64_t *index;
  double *weight;
} taps;

/* |x| rounded to float unless the kernel computes in double. */
static double fl(bool dbl, double x) { return dbl ? x : (double)(float)x; }

/* PyTorch's area_pixel_compute_scale: the input step per output step. */
static double interp_scale(int64_t in, int64_t out, bool align_corners, double scale, bool dbl) {
  if (align_corners) return out > 1 ? fl(dbl, (double)(in - 1) / (double)(out - 1)) : 0.0;
  return scale > 0.0 ? fl(dbl, 1.0 / scale) : fl(dbl, fl(dbl, (double)in) / (double)out);
}

/* Keys' cubic convolution kernel with parameter |a| at |x| >= 0. */
static double cubic1(double x, double a) { return ((a + 2) * x - (a + 3)) * x * x + 1; }
static double cubic2(double x, double a) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; }

static double aa_filter(int mode, double x) {
  x = fabs(x);
  if (mode == LINEAR_AA) return x < 1.0 ? 1.0 - x : 0.0;
  return x < 1.0 ? cubic1(x, -0.5) : x < 2.0 ? cubic2(x, -0.5) : 0.0;
}

/* The taps of |mode| from |in| to |out| positions; false if out of memory. */
static bool make_taps(int mode, int64_t in, int64_t out, bool align_corners, double scale_arg, bool dbl, taps *t) {
  double scale = interp_scale(in, out, align_corners, scale_arg, dbl), support = 0.0;
  t->out = out;
  t->n = mode == NEAREST || mode == NEAREST_EXACT ? 1 : mode == LINEAR ? 2 : 4;
  if (mode == LINEAR_AA || mode == CUBIC_AA) {
    support = (mode == LINEAR_AA ? 1.0 : 2.0) * (scale >= 1.0 ? scale : 1.0);
    t->n = (int)ceil(support) * 2 + 1;
  }
  size_t count = (size_t)t->n * (size_t)(out > 0 ? out : 1);
  t->index = calloc(count, sizeof *t->index);
  t->weight = calloc(count, sizeof *t->weight);
  if (t->index == NULL || t->weight == NULL) return false;
  for (int64_t o = 0; o < out; o++) {
    int64_t *idx = &t->index[o];
    double *w = &t->weight[o];
    if (mode == NEAREST || mode == NEAREST_EXACT) {
      float s = (float)(scale_arg > 0.0 ? 1.0 / scale_arg : (double)((float)in / (float)out));
      int64_t i = mode == NEAREST_EXACT ? (int64_t)floorf((float)((o + 0.5) * s))
                  : out == in           ? o
                  : out == 2 * in       ? o >> 1
                                        : (int64_t)floorf((float)o * s);
      idx[0] = i < in - 1 ? i : in - 1;
      w[0] = 1.0;
    } else if (mode == LINEAR || mode == CUBIC) {
      /* area_pixel_compute_source_index, then guard_index_and_lambda */
      double real = align_corners ? fl(dbl, scale * (double)o) : fl(dbl, fl(dbl, scale * fl(dbl, o + 0.5)) - 0.5);
      if (mode == LINEAR && real < 0.0) real = 0.0;
      int64_t i = (int64_t)floor(real);
      if (i > in - 1) i = in - 1;
      double lambda = fl(dbl, fmin(fmax(fl(dbl, real - (double)i), 0.0), 1.0));
      if (mode == LINEAR) {
        idx[0] = i;
        idx[out] = i + (i < in - 1 ? 1 : 0);
        w[0] = fl(dbl, 1.0 - lambda);
        w[out] = lambda;
      } else {
        double x2 = fl(dbl, 1.0 - lambda);
        double k[4] = {cubic2(lambda + 1.0, -0.75), cubic1(lambda, -0.75), cubic1(x2, -0.75), cubic2(x2 + 1.0, -0.75)};
        for (int j = 0; j < 4; j++) {
          int64_t at = i - 1 + j;
          idx[j * out] = at < 0 ? 0 : at > in - 1 ? in - 1 : at;
          w[j * out] = fl(dbl, k[j]);
        }
      }
    } else {
      /* _compute_indices_min_size_weights_aa: a filter stretched by the
       * scale when downsampling, normalized to sum 1 */
      double center = fl(dbl, scale * (o + 0.5)), total = 0.0;
      double invscale = scale >= 1.0 ? fl(dbl, 1.0 / scale) : 1.0;
      int64_t lo = (int64_t)(center - support + 0.5), hi = (int64_t)(center + support + 0.5);
      if (lo < 0) lo = 0;
      if (hi > in) hi = in;
      int64_t size = hi - lo < 0 ? 0 : hi - lo < t->n ? hi - lo : t->n;
      for (int64_t j = 0; j < size; j++) {
        w[j * out] = fl(dbl, aa_filter(mode, fl(dbl, ((double)(j + lo) - center + 0.5) * invscale)));
        total = fl(dbl, total + w[j * out]);
      }
      for (int64_t j = 0; j < t->n; j++) {
        idx[j * out] = j < size ? lo + j : lo;
        w[j * out] = j < size && total != 0.0 ? fl(dbl, w[j * out] / total) : 0.0;
      }
    }
  }
  return true;
}

static void free_taps(taps *t) {
  free(t->index);
  free(t->weight);
}

/* |x|'s type with dim |d| of size |size| (and |t| > 0 taps inserted before it). */
static tpu_hlo_type tapped_type(const tpu_hlo_type *x, int d, int ntaps, int64_t size) {
  tpu_hlo_type r = *x;
  if (ntaps > 0) {
    for (int i = r.rank; i > d; i--) r.dims[i] = r.dims[i - 1];
    r.rank++;
    r.dims[d++] = ntaps;
  }
  r.dims[d] = size;
  return r;
}

/* The taps' weights as a [taps, out] value broadcast into |to| at |d|. */
static tpu_hlo_value tap_weights(tpu_lower_ctx *c, const taps *t, const tpu_hlo_type *to, int d) {
  int64_t dims[2] = {d, d + 1}, shape[2] = {t->n, t->out};
  tpu_hlo_value w = tpu_hlo_const_f64_list(B, to->dtype, t->weight, (int64_t)t->n * t->out);
  return tpu_hlo_broadcast_in_dim(B, tpu_hlo_reshape(B, w, 2, shape), to, dims);
}

/* The taps' input positions as [taps * out, 1] index vectors. */
static tpu_hlo_value tap_indices(tpu_lower_ctx *c, const taps *t) {
  int64_t dims[2] = {(int64_t)t->n * t->out, 1};
  return tpu_hlo_reshape(B, tpu_hlo_const_i64_list(B, t->index, (int)dims[0]), 2, dims);
}

/* |x| resampled along dim |d|: every tap gathered, weighted and summed
 * (nearest's single tap is the gather itself). */
static tpu_hlo_value resample(tpu_lower_ctx *c, tpu_hlo_value x, int d, const taps *t, bool weighted) {
  const tpu_hlo_type xt = *tpu_hlo_type_of(B, x);
  tpu_hlo_type gt = tapped_type(&xt, d, 0, (int64_t)t->n * t->out);
  if (tpu_hlo_type_numel(&gt) == 0 || xt.dims[d] == 0) return tpu_hlo_const_f64(B, &gt, 0.0);
  tpu_hlo_gather_dims g = {.num_offset = xt.rank - 1, .num_collapsed = 1, .num_start_map = 1,
                           .collapsed_slice_dims = {d}, .start_index_map = {d}, .index_vector_dim = 1};
  int64_t slice[TPU_HLO_MAX_RANK];
  for (int i = 0, k = 0; i < xt.rank; i++) {
    slice[i] = i == d ? 1 : xt.dims[i];
    if (i != d) g.offset_dims[k++] = i;
  }
  tpu_hlo_value r = tpu_hlo_gather(B, x, tap_indices(c, t), &g, slice, &gt);
  if (!weighted) return r;
  tpu_hlo_type wt = tapped_type(&xt, d, t->n, t->out);
  r = bin(c, TPU_HLO_MUL, tpu_hlo_reshape(B, r, wt.rank, wt.dims), tap_weights(c, t, &wt, d));
  int64_t tap_dim = d;
  return tpu_lower_reduce(B, r, TPU_HLO_ADD, &tap_dim, 1);
}

/* The adjoint of resample: every output gradient, weighted per tap, added
 * at its tap's input position (|in| of them along |d|). */
static tpu_hlo_value resample_backward(tpu_lower_ctx *c, tpu_hlo_value g, int d, const taps *t, int64_t in) {
  const tpu_hlo_type gt = *tpu_hlo_type_of(B, g);
  tpu_hlo_type xt = tapped_type(&gt, d, 0, in), wt = tapped_type(&gt, d, t->n, t->out);
  tpu_hlo_value zeros = tpu_hlo_const_f64(B, &xt, 0.0);
  if (tpu_hlo_type_numel(&gt) == 0 || in == 0) return zeros;
  int64_t kept[TPU_HLO_MAX_RANK];
  for (int i = 0; i < gt.rank; i++) kept[i] = i < d ? i : i + 1;
  tpu_hlo_value u = bin(c, TPU_HLO_MUL, tpu_hlo_broadcast_in_dim(B, g, &wt, kept), tap_weights(c, t, &wt, d));
  tpu_hlo_type ut = tapped_type(&gt, d, 0, (int64_t)t->n * t->out);
  u = tpu_hlo_reshape(B, u, ut.rank, ut.dims);
  tpu_hlo_scatter_dims s = {.num_update_window = gt.rank - 1, .num_inserted = 1, .num_to_operand = 1,
                            .inserted_window_dims = {d}, .scatter_dims_to_operand_dims = {d}, .index_vector_dim = 1};
  for (int i = 0, k = 0; i < gt.rank; i++)
    if (i != d) s.update_window_dims[k++] = i;
  tpu_hlo_region add;
  tpu_hlo_region_binary(B, TPU_HLO_ADD, gt.dtype, &add);
  return tpu_hlo_scatter(B, zeros, tap_indices(c, t), u, &s, &add, false);
}

/* upsample_<mode>(self, output_size, [align_corners,] scales…) and
 * upsample_<mode>_backward(grad_output, output_size, input_size,
 * [align_corners,] scales…): one resampling per spatial dim (the last
 * len(output_size) dims), in float for half types. */
static tpu_status_t upsample_rule(tpu_lower_ctx *c) {
  int mode = (int)(c->data & ~BACKWARD);
  bool backward = (c->data & BACKWARD) != 0, nearest = mode == NEAREST || mode == NEAREST_EXACT;
  int n = c->args[1].n, align_arg = backward ? 3 : 2, first_scale = align_arg + (nearest ? 0 : 1);
  bool align_corners = !nearest && tpu_lower_bool(c, align_arg, false);
  static const char *const kernels[] = {
      [NEAREST] = "compute_indices_weights_nearest", [NEAREST_EXACT] = "compute_indices_weights_nearest",
      [LINEAR] = "compute_indices_weights_linear",   [CUBIC] = "compute_indices_weights_cubic",
      [LINEAR_AA] = "compute_index_ranges_weights",  [CUBIC_AA] = "compute_index_ranges_weights"};
  tpu_dtype_t dt = c->args[0].dtype;
  bool aa = mode == LINEAR_AA || mode == CUBIC_AA;
  if (!backward && ((!is_float(dt) && dt != TPU_U8) || (aa && (dt == TPU_BF16 || dt == TPU_F16))))
    return cpu_refuses(c, kernels[mode], dt);
  tpu_hlo_type t = opmath_type(OUT);
  if (nearest && !backward) t.dtype = OUT->dtype; /* a gather: exact in any dtype */
  tpu_hlo_value x = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t.dtype);
  const int64_t *in_sizes = backward ? c->args[2].ints : c->args[0].sizes;
  int lead = t.rank - n;
  for (int i = 0; i < n; i++) {
    int d = lead + i;
    int64_t in = in_sizes[d], out = c->args[1].ints[i];
    taps tp;
    if (!make_taps(mode, in, out, align_corners, tpu_lower_float(c, first_scale + i, 0.0), t.dtype == TPU_F64, &tp)) {
      free_taps(&tp);
      return tpu_lower_error(c, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    x = backward ? resample_backward(c, x, d, &tp, in) : resample(c, x, d, &tp, !nearest);
    free_taps(&tp);
  }
  tpu_lower_set_output(c, 0, x);
  return NULL;
}

/* --- grid sampling ------------------------------------------------------------------ */

/* grid_sampler_{2,3}d: output position p of sample n reads input n at the
 * point grid[n, p] (x, y[, z] in [-1, 1], x along the last dim). Each
 * spatial dim contributes a few taps (input positions with weights, and
 * the weights' derivatives with respect to the grid coordinate); every
 * combination of one tap per dim is gathered, as PyTorch's CPU kernels
 * compute it: the coordinate padded (bilinear, nearest) or each tap padded
 * (bicubic), taps outside the input reading 0. */
enum { GRID_BILINEAR, GRID_NEAREST, GRID_BICUBIC };
enum { PAD_ZEROS, PAD_BORDER, PAD_REFLECTION };

typedef struct grid_axis {
  int n;
  tpu_hlo_value pos[4]; /* s64, clamped into the input */
  tpu_hlo_value ok[4];  /* the tap lies inside the input */
  tpu_hlo_value w[4], dw[4];
} grid_axis;

/* A constant shaped like |x|. */
static tpu_hlo_value kx(tpu_lower_ctx *c, tpu_hlo_value x, double v) {
  return tpu_hlo_const_f64(B, tpu_hlo_type_of(B, x), v);
}

/* clip_coordinates: into [0, size - 1]; |grad| (if given) is scaled by
 * 0 where clipped. */
static tpu_hlo_value clip_coord(tpu_lower_ctx *c, tpu_hlo_value x, int64_t size, tpu_hlo_value *grad) {
  tpu_hlo_value hi = kx(c, x, (double)(size - 1)), lo = kx(c, x, 0.0);
  if (grad != NULL)
    *grad = sel(c, and_(c, cmp(c, TPU_HLO_GT, x, lo), cmp(c, TPU_HLO_LT, x, hi)), *grad, lo);
  return bin(c, TPU_HLO_MIN, hi, bin(c, TPU_HLO_MAX, x, lo));
}

/* reflect_coordinates over [twice_lo / 2, twice_hi / 2]; |grad| flips sign
 * with every reflection. */
static tpu_hlo_value reflect_coord(tpu_lower_ctx *c, tpu_hlo_value x, int64_t twice_lo, int64_t twice_hi,
                                   tpu_hlo_value *grad) {
  if (twice_lo == twice_hi) {
    if (grad != NULL) *grad = kx(c, x, 0.0);
    return kx(c, x, 0.0);
  }
  double lo = (double)twice_lo / 2, span = (double)(twice_hi - twice_lo) / 2;
  tpu_hlo_value d = bin(c, TPU_HLO_SUB, x, kx(c, x, lo));
  tpu_hlo_value below = cmp(c, TPU_HLO_LT, d, kx(c, x, 0.0));
  d = un(c, TPU_HLO_ABS, d);
  tpu_hlo_value extra = bin(c, TPU_HLO_REM, d, kx(c, x, span));
  tpu_hlo_value flips = un(c, TPU_HLO_FLOOR, bin(c, TPU_HLO_DIV, d, kx(c, x, span)));
  tpu_hlo_value even = cmp(c, TPU_HLO_EQ, bin(c, TPU_HLO_REM, flips, kx(c, x, 2.0)), kx(c, x, 0.0));
  if (grad != NULL) *grad = sel(c, tpu_hlo_binary(B, TPU_HLO_XOR, below, even), *grad, neg(c, *grad));
  return sel(c, even, bin(c, TPU_HLO_ADD, extra, kx(c, x, lo)),
             bin(c, TPU_HLO_ADD, bin(c, TPU_HLO_SUB, kx(c, x, span), extra), kx(c, x, lo)));
}

/* compute_coordinates: |x| padded as |pad| asks. */
static tpu_hlo_value pad_coord(tpu_lower_ctx *c, tpu_hlo_value x, int64_t size, int pad, bool align,
                               tpu_hlo_value *grad) {
  if (pad == PAD_BORDER) return clip_coord(c, x, size, grad);
  if (pad == PAD_REFLECTION) {
    x = align ? reflect_coord(c, x, 0, 2 * (size - 1), grad) : reflect_coord(c, x, -1, 2 * size - 1, grad);
    return clip_coord(c, x, size, grad);
  }
  return x;
}

/* A tap at float position |x| (integral): its clamped s64 position and
 * whether it is inside. */
static void grid_tap(tpu_lower_ctx *c, tpu_hlo_value x, int64_t size, grid_axis *a, int t) {
  a->ok[t] = and_(c, cmp(c, TPU_HLO_GE, x, kx(c, x, 0.0)), cmp(c, TPU_HLO_LE, x, kx(c, x, (double)(size - 1))));
  a->pos[t] = tpu_hlo_convert(B, clip_coord(c, x, size, NULL), TPU_S64);
}

/* The polynomial with coefficients |k| (highest power first) at |x|. */
static tpu_hlo_value horner(tpu_lower_ctx *c, tpu_hlo_value x, const double *k, int n) {
  tpu_hlo_value r = kx(c, x, k[0]);
  for (int i = 1; i < n; i++) r = bin(c, TPU_HLO_ADD, bin(c, TPU_HLO_MUL, r, x), kx(c, x, k[i]));
  return r;
}

/* Keys' cubic coefficients (A = -0.75) of the 4 taps at offset t in [0, 1)
 * (distances 1 + t, t, 1 - t, 2 - t), and their derivatives by t. */
static void cubic_coeffs(tpu_lower_ctx *c, tpu_hlo_value t, tpu_hlo_value *w, tpu_hlo_value *dw) {
  const double A = -0.75;
  static const double sign[4] = {1, 1, -1, -1};
  const double outer[4] = {A, -5 * A, 8 * A, -4 * A}, inner[4] = {A + 2, -(A + 3), 0, 1};
  const double d_outer[3] = {3 * A, -10 * A, 8 * A}, d_inner[3] = {3 * (A + 2), -2 * (A + 3), 0};
  for (int i = 0; i < 4; i++) {
    bool out = i == 0 || i == 3;
    tpu_hlo_value x = bin(c, TPU_HLO_MUL, kx(c, t, sign[i]), t);
    x = bin(c, TPU_HLO_ADD, kx(c, t, i < 2 ? 1.0 - i : i - 1.0), x);
    w[i] = horner(c, x, out ? outer : inner, 4);
    dw[i] = bin(c, TPU_HLO_MUL, kx(c, t, sign[i]), horner(c, x, out ? d_outer : d_inner, 3));
  }
}

/* The taps along one spatial dim of size |size| for grid coordinates |g|. */
static void grid_axis_of(tpu_lower_ctx *c, tpu_hlo_value g, int64_t size, int mode, int pad, bool align,
                         grid_axis *a) {
  /* grid_sampler_unnormalize and its derivative */
  double mult = align ? (double)(size - 1) / 2 : (double)size / 2;
  tpu_hlo_value x = bin(c, TPU_HLO_ADD, g, kx(c, g, 1.0)); /* ((g + 1) * size - 1) / 2 unaligned */
  if (align) x = bin(c, TPU_HLO_MUL, x, kx(c, g, mult));
  else x = bin(c, TPU_HLO_DIV, bin(c, TPU_HLO_SUB, bin(c, TPU_HLO_MUL, x, kx(c, g, (double)size)), kx(c, g, 1.0)),
               kx(c, g, 2.0));
  tpu_hlo_value gm = kx(c, g, mult);
  if (mode == GRID_BICUBIC) {
    tpu_hlo_value x0 = un(c, TPU_HLO_FLOOR, x);
    a->n = 4;
    cubic_coeffs(c, bin(c, TPU_HLO_SUB, x, x0), a->w, a->dw);
    for (int t = 0; t < 4; t++) {
      a->dw[t] = bin(c, TPU_HLO_MUL, a->dw[t], gm);
      tpu_hlo_value at = pad_coord(c, bin(c, TPU_HLO_ADD, x0, kx(c, x, t - 1.0)), size, pad, align, NULL);
      grid_tap(c, un(c, TPU_HLO_FLOOR, at), size, a, t); /* PyTorch truncates; padded taps are >= 0 or out */
    }
    return;
  }
  x = pad_coord(c, x, size, pad, align, &gm);
  if (mode == GRID_NEAREST) {
    a->n = 1;
    a->w[0] = kx(c, x, 1.0);
    a->dw[0] = kx(c, x, 0.0);
    grid_tap(c, un(c, TPU_HLO_ROUND_EVEN, x), size, a, 0);
    return;
  }
  tpu_hlo_value x0 = un(c, TPU_HLO_FLOOR, x), x1 = bin(c, TPU_HLO_ADD, x0, kx(c, x, 1.0));
  a->n = 2;
  a->w[0] = bin(c, TPU_HLO_SUB, x1, x);
  a->w[1] = bin(c, TPU_HLO_SUB, x, x0);
  a->dw[0] = neg(c, gm);
  a->dw[1] = gm;
  grid_tap(c, x0, size, a, 0);
  grid_tap(c, x1, size, a, 1);
}

/* The sampling of one grid_sampler call: input |x| as [N, spatial…, C],
 * the axes in input dim order (z, y, x). */
typedef struct grid_plan {
  int n;               /* spatial dims */
  tpu_hlo_type pt;     /* [N, out spatial…] in the compute type */
  tpu_hlo_type vt;     /* [N, out spatial…, C] */
  grid_axis axes[3];
} grid_plan;

static tpu_status_t grid_plan_of(tpu_lower_ctx *c, int input, int grid, int args, tpu_dtype_t dt, grid_plan *p) {
  const tpu_lower_arg *in = &c->args[input], *gr = &c->args[grid];
  int mode = (int)tpu_lower_int(c, args, 0), pad = (int)tpu_lower_int(c, args + 1, 0);
  bool align = tpu_lower_bool(c, args + 2, false);
  p->n = in->rank - 2;
  if (mode == GRID_BICUBIC && p->n == 3)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "grid_sampler(): bicubic interpolation only supports 4D input");
  p->pt = tpu_hlo_make_type(dt, gr->rank - 1, gr->sizes);
  p->vt = tpu_hlo_make_type(dt, gr->rank, gr->sizes);
  p->vt.dims[gr->rank - 1] = in->sizes[1];
  tpu_hlo_value g = tpu_hlo_convert(B, tpu_lower_tensor(c, grid), dt);
  for (int i = 0; i < p->n; i++) {
    /* grid component i runs along input dim rank - 1 - i */
    tpu_hlo_value gi = tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, g, gr->rank - 1, i, i + 1, 1), p->pt.rank, p->pt.dims);
    grid_axis_of(c, gi, in->sizes[in->rank - 1 - i], mode, pad, align, &p->axes[p->n - 1 - i]);
  }
  return NULL;
}

/* Tap combination |k| (one tap per axis, mixed radix): its gather indices
 * [N, out…, 1 + n], validity, weight, and (if |dws|) each axis' weight
 * derivative times the other axes' weights. */
static tpu_hlo_value grid_combo(tpu_lower_ctx *c, const grid_plan *p, int k, tpu_hlo_value *out_ok,
                                tpu_hlo_value *out_w, tpu_hlo_value *dws) {
  int tap[3];
  for (int i = p->n - 1; i >= 0; i--) {
    tap[i] = k % p->axes[i].n;
    k /= p->axes[i].n;
  }
  tpu_hlo_type it = p->pt;
  it.dtype = TPU_S64;
  it.dims[it.rank++] = 1;
  tpu_hlo_value parts[4] = {tpu_hlo_iota(B, &it, 0)}, ok = TPU_HLO_NONE, w = TPU_HLO_NONE;
  for (int i = 0; i < p->n; i++) {
    const grid_axis *a = &p->axes[i];
    parts[1 + i] = tpu_hlo_reshape(B, a->pos[tap[i]], it.rank, it.dims);
    ok = i == 0 ? a->ok[tap[i]] : and_(c, ok, a->ok[tap[i]]);
    w = i == 0 ? a->w[tap[i]] : bin(c, TPU_HLO_MUL, w, a->w[tap[i]]);
    if (dws == NULL) continue;
    for (int j = 0; j < p->n; j++) {
      tpu_hlo_value f = i == j ? a->dw[tap[i]] : a->w[tap[i]];
      dws[j] = i == 0 ? f : bin(c, TPU_HLO_MUL, dws[j], f);
    }
  }
  *out_ok = ok;
  *out_w = w;
  return tpu_hlo_concatenate(B, parts, 1 + p->n, it.rank - 1);
}

/* |x| [N, C, spatial…] as [N, spatial…, C] in |dt|, and back. */
static tpu_hlo_value channels_last(tpu_lower_ctx *c, tpu_hlo_value x, bool back) {
  int rank = tpu_hlo_rank(B, x);
  int64_t perm[TPU_HLO_MAX_RANK];
  for (int i = 0; i < rank; i++) {
    if (back) perm[i] = i == 0 ? 0 : i == 1 ? rank - 1 : i - 1;
    else perm[i] = i == 0 ? 0 : i == rank - 1 ? 1 : i + 1;
  }
  return tpu_hlo_transpose(B, x, perm);
}

static tpu_hlo_value grid_gather(tpu_lower_ctx *c, const grid_plan *p, tpu_hlo_value xl, tpu_hlo_value idx) {
  const tpu_hlo_type xt = *tpu_hlo_type_of(B, xl);
  tpu_hlo_gather_dims g = {.num_offset = 1, .offset_dims = {p->vt.rank - 1}, .num_collapsed = 1 + p->n,
                           .num_start_map = 1 + p->n, .index_vector_dim = p->vt.rank - 1};
  int64_t slice[TPU_HLO_MAX_RANK];
  for (int i = 0; i < xt.rank; i++) slice[i] = i == xt.rank - 1 ? xt.dims[i] : 1;
  for (int i = 0; i <= p->n; i++) g.collapsed_slice_dims[i] = g.start_index_map[i] = i;
  return tpu_hlo_gather(B, xl, idx, &g, slice, &p->vt);
}

static int grid_combos(const grid_plan *p) {
  int n = 1;
  for (int i = 0; i < p->n; i++) n *= p->axes[i].n;
  return n;
}

/* A [N, out…] value broadcast over the channels. */
static tpu_hlo_value per_channel(tpu_lower_ctx *c, const grid_plan *p, tpu_hlo_value v) {
  int64_t dims[TPU_HLO_MAX_RANK];
  for (int i = 0; i < p->pt.rank; i++) dims[i] = i;
  tpu_hlo_type t = p->vt;
  t.dtype = tpu_hlo_dtype(B, v);
  return tpu_hlo_broadcast_in_dim(B, v, &t, dims);
}

/* grid_sampler_{2,3}d(input, grid, interpolation_mode, padding_mode, align_corners) */
static tpu_status_t grid_sampler_rule(tpu_lower_ctx *c) {
  tpu_hlo_type t = opmath_type(OUT);
  grid_plan p;
  tpu_status_t st = grid_plan_of(c, 0, 1, 2, t.dtype, &p);
  if (st != NULL) return st;
  tpu_hlo_type xt = tpu_hlo_make_type(t.dtype, c->args[0].rank, c->args[0].sizes);
  if (tpu_hlo_type_numel(&t) == 0 || tpu_hlo_type_numel(&xt) == 0) return done(c, tpu_hlo_const_f64(B, &t, 0.0));
  tpu_hlo_value xl = channels_last(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t.dtype), false);
  tpu_hlo_value y = tpu_hlo_const_f64(B, &p.vt, 0.0);
  for (int k = 0; k < grid_combos(&p); k++) {
    tpu_hlo_value ok, w;
    tpu_hlo_value v = grid_gather(c, &p, xl, grid_combo(c, &p, k, &ok, &w, NULL));
    tpu_hlo_value term = bin(c, TPU_HLO_MUL, per_channel(c, &p, w), v);
    y = bin(c, TPU_HLO_ADD, y, sel(c, per_channel(c, &p, ok), term, tpu_hlo_const_f64(B, &p.vt, 0.0)));
  }
  return done(c, channels_last(c, y, true));
}

/* grid_sampler_{2,3}d_backward(grad_output, input, grid, interpolation_mode,
 *     padding_mode, align_corners, output_mask) -> (grad_input, grad_grid):
 * every tap's weighted gradient added at its input position; the grid
 * gradient sums gradient * input value * the weight's derivative. */
static tpu_status_t grid_sampler_backward_rule(tpu_lower_ctx *c) {
  tpu_dtype_t dt = tpu_lower_opmath(c->args[1].dtype);
  grid_plan p;
  tpu_status_t st = grid_plan_of(c, 1, 2, 3, dt, &p);
  if (st != NULL) return st;
  tpu_hlo_type xt = tpu_hlo_make_type(dt, c->args[1].rank, c->args[1].sizes);
  tpu_hlo_value xl = channels_last(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 1), dt), false);
  const tpu_hlo_type lt = *tpu_hlo_type_of(B, xl);
  tpu_hlo_value gy = channels_last(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 0), dt), false);
  tpu_hlo_value zero_v = tpu_hlo_const_f64(B, &p.vt, 0.0), gx = tpu_hlo_const_f64(B, &lt, 0.0);
  tpu_hlo_value gg[3];
  for (int i = 0; i < 3; i++) gg[i] = tpu_hlo_const_f64(B, &p.pt, 0.0);
  bool empty = tpu_hlo_type_numel(&p.vt) == 0 || tpu_hlo_type_numel(&xt) == 0;
  int64_t channel = p.vt.rank - 1;
  for (int k = 0; !empty && k < grid_combos(&p); k++) {
    tpu_hlo_value ok, w, dws[3];
    tpu_hlo_value idx = grid_combo(c, &p, k, &ok, &w, dws);
    tpu_hlo_value okc = per_channel(c, &p, ok);
    if (c->out_types[0].dtype != TPU_INVALID) {
      tpu_hlo_value upd = sel(c, okc, bin(c, TPU_HLO_MUL, gy, per_channel(c, &p, w)), zero_v);
      tpu_hlo_scatter_dims sd = {.num_update_window = 1, .update_window_dims = {channel}, .num_inserted = 1 + p.n,
                                 .num_to_operand = 1 + p.n, .index_vector_dim = channel};
      for (int i = 0; i <= p.n; i++) sd.inserted_window_dims[i] = sd.scatter_dims_to_operand_dims[i] = i;
      tpu_hlo_region add;
      tpu_hlo_region_binary(B, TPU_HLO_ADD, dt, &add);
      gx = tpu_hlo_scatter(B, gx, idx, upd, &sd, &add, false);
    }
    if (c->out_types[1].dtype != TPU_INVALID) {
      tpu_hlo_value gv = tpu_lower_reduce(B, sel(c, okc, bin(c, TPU_HLO_MUL, gy, grid_gather(c, &p, xl, idx)), zero_v),
                                          TPU_HLO_ADD, &channel, 1);
      for (int i = 0; i < p.n; i++) gg[i] = bin(c, TPU_HLO_ADD, gg[i], bin(c, TPU_HLO_MUL, gv, dws[i]));
    }
  }
  tpu_lower_set_output(c, 0, channels_last(c, gx, true));
  if (c->out_types[1].dtype != TPU_INVALID) {
    tpu_hlo_type one = p.vt;
    one.dims[channel] = 1;
    tpu_hlo_value parts[3];
    for (int i = 0; i < p.n; i++) parts[i] = tpu_hlo_reshape(B, gg[p.n - 1 - i], one.rank, one.dims);
    tpu_lower_set_output(c, 1, tpu_hlo_concatenate(B, parts, p.n, (int)channel));
  }
  return NULL;
}

#define UPSAMPLE(name, mode)                                                                   \
  {{name, name ".out"}, upsample_rule, 0, mode}, {                                             \
    {name "_backward", name "_backward.grad_input"}, upsample_rule, 0, (mode) | BACKWARD       \
  }

const tpu_lower_rule tpu_rules_conv[] = {
    {{"convolution_overrideable"}, convolution_rule, 0, 0},
    {{"convolution_backward_overrideable"}, convolution_backward_rule, 0, 0},
    {{"max_pool2d_with_indices", "max_pool2d_with_indices.out"}, max_pool_rule, 0, 2},
    {{"max_pool3d_with_indices", "max_pool3d_with_indices.out"}, max_pool_rule, 0, 3},
    {{"max_pool2d_with_indices_backward", "max_pool2d_with_indices_backward.grad_input"}, max_pool_backward_rule, 0, 2},
    {{"max_pool3d_with_indices_backward", "max_pool3d_with_indices_backward.grad_input"}, max_pool_backward_rule, 0, 3},
    {{"avg_pool2d", "avg_pool2d.out"}, avg_pool_rule, 0, 2},
    {{"avg_pool3d", "avg_pool3d.out"}, avg_pool_rule, 0, 3},
    {{"avg_pool2d_backward", "avg_pool2d_backward.grad_input"}, avg_pool_backward_rule, 0, 2},
    {{"avg_pool3d_backward", "avg_pool3d_backward.grad_input"}, avg_pool_backward_rule, 0, 3},
    {{"_adaptive_avg_pool2d", "_adaptive_avg_pool2d.out"}, adaptive_avg_pool_rule, 0, 2},
    {{"_adaptive_avg_pool3d", "_adaptive_avg_pool3d.out"}, adaptive_avg_pool_rule, 0, 3},
    {{"_adaptive_avg_pool2d_backward", "_adaptive_avg_pool2d_backward.out"}, adaptive_avg_pool_backward_rule, 0, 2},
    {{"_adaptive_avg_pool3d_backward", "_adaptive_avg_pool3d_backward.out"}, adaptive_avg_pool_backward_rule, 0, 3},
    {{"fractional_max_pool2d", "fractional_max_pool2d.output"}, fractional_max_pool_rule, 0, 2},
    {{"fractional_max_pool3d", "fractional_max_pool3d.output"}, fractional_max_pool_rule, 0, 3},
    {{"fractional_max_pool2d_backward", "fractional_max_pool2d_backward.grad_input"},
     fractional_max_pool_backward_rule, 0, 2},
    {{"fractional_max_pool3d_backward", "fractional_max_pool3d_backward.grad_input"},
     fractional_max_pool_backward_rule, 0, 3},
    {{"adaptive_max_pool2d", "adaptive_max_pool2d.out"}, adaptive_max_pool_rule, 0, 2},
    {{"adaptive_max_pool3d", "adaptive_max_pool3d.out"}, adaptive_max_pool_rule, 0, 3},
    {{"adaptive_max_pool2d_backward", "adaptive_max_pool2d_backward.grad_input"},
     adaptive_max_pool_backward_rule, 0, 2},
    {{"adaptive_max_pool3d_backward", "adaptive_max_pool3d_backward.grad_input"},
     adaptive_max_pool_backward_rule, 0, 3},
    {{"grid_sampler_2d", "grid_sampler_2d.out"}, grid_sampler_rule, 0, 0},
    {{"grid_sampler_3d", "grid_sampler_3d.out"}, grid_sampler_rule, 0, 0},
    {{"grid_sampler_2d_backward", "grid_sampler_2d_backward.out"}, grid_sampler_backward_rule, 0, 0},
    {{"grid_sampler_3d_backward", "grid_sampler_3d_backward.out"}, grid_sampler_backward_rule, 0, 0},
    UPSAMPLE("upsample_nearest1d", NEAREST),
    UPSAMPLE("upsample_nearest2d", NEAREST),
    UPSAMPLE("upsample_nearest3d", NEAREST),
    UPSAMPLE("_upsample_nearest_exact1d", NEAREST_EXACT),
    UPSAMPLE("_upsample_nearest_exact2d", NEAREST_EXACT),
    UPSAMPLE("_upsample_nearest_exact3d", NEAREST_EXACT),
    UPSAMPLE("upsample_linear1d", LINEAR),
    UPSAMPLE("upsample_bilinear2d", LINEAR),
    UPSAMPLE("upsample_trilinear3d", LINEAR),
    UPSAMPLE("upsample_bicubic2d", CUBIC),
    UPSAMPLE("_upsample_bilinear2d_aa", LINEAR_AA),
    UPSAMPLE("_upsample_bicubic2d_aa", CUBIC_AA),
};
TPU_COUNT_RULES(conv);
