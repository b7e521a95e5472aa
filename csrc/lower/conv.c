/* Convolutions: convolution_overrideable and its backward, where PyTorch's
 * _convolution sends a tpu convolution of any kind: 1-3 spatial dims,
 * strided, padded, dilated, grouped, transposed.
 *
 * Layouts are PyTorch's: input N C spatial…, weight O I/groups spatial… (a
 * transposed convolution's weight is I O/groups spatial…). Output sizes come
 * from PyTorch's meta functions; every window is padded so that it yields
 * exactly those sizes. Half types compute in float32 and round once. */
#include <math.h>
#include <stdlib.h>

#include "lower/spatial.h"

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
    return tpu_lower_not_implemented(kernel, dt);
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

const tpu_lower_rule tpu_rules_conv[] = {
    {{"convolution_overrideable"}, convolution_rule, TPU_RULE_MATMUL_PRECISION, 0},
    {{"convolution_backward_overrideable"}, convolution_backward_rule, TPU_RULE_MATMUL_PRECISION, 0},
};
TPU_COUNT_RULES(conv);
