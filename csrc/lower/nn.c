/* Normalization and loss rules: layer, batch and group norm with their
 * backwards; nll_loss (1-d and 2-d), mse, smooth L1, Huber and binary cross
 * entropy with theirs; the margin losses; pdist; embedding_bag with its
 * backwards and embedding_renorm; weight norm's backward; the shrink
 * activations' backwards.
 *
 * Statistics and losses are computed in the input's opmath type (float32 for
 * half types) and rounded once, as PyTorch's CPU kernels accumulate. Outputs
 * nobody asked for (an output_mask entry that is false, a None running stat)
 * have type INVALID and are not computed. The class-index losses read each
 * target's element with one gather (XLA clamps an out-of-range target, whose
 * runtime check fails the op); their gradients, dense over the classes, put
 * each target's value where an iota over the class dim equals the target. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "lower/rules.h"

#define MAXR TPU_HLO_MAX_RANK

enum { REDUCTION_NONE, REDUCTION_MEAN, REDUCTION_SUM }; /* at::Reduction */

/* A constant of |x|'s type. */
static tpu_hlo_value k(tpu_lower_ctx *c, tpu_hlo_value x, double v) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, x);
  return tpu_dtype_is_float(t.dtype) ? tpu_hlo_const_f64(B, &t, v) : tpu_hlo_const_i64(B, &t, (int64_t)v);
}

/* Tensor argument |i|'s shape with element type |dtype|. */
static tpu_hlo_type arg_type(const tpu_lower_ctx *c, int i, tpu_dtype_t dtype) {
  return tpu_hlo_make_type(dtype, c->args[i].rank, c->args[i].sizes);
}

static bool wanted(const tpu_lower_ctx *c, int out) { return c->out_types[out].dtype != TPU_INVALID; }

static tpu_hlo_value sum(tpu_lower_ctx *c, tpu_hlo_value x, const int64_t *dims, int n) {
  return tpu_lower_reduce(B, x, TPU_HLO_ADD, dims, n);
}

static tpu_hlo_value sum_all(tpu_lower_ctx *c, tpu_hlo_value x) {
  int64_t dims[MAXR];
  int n = tpu_hlo_rank(B, x);
  for (int i = 0; i < n; i++) dims[i] = i;
  return sum(c, x, dims, n);
}

/* True when every element of the i1 value |ok| is. */
static tpu_hlo_value all(tpu_lower_ctx *c, tpu_hlo_value ok) {
  int64_t dims[MAXR];
  int n = tpu_hlo_rank(B, ok);
  for (int i = 0; i < n; i++) dims[i] = i;
  return tpu_lower_reduce(B, ok, TPU_HLO_AND, dims, n);
}

/* |r|, a value of |to|'s shape reduced over |dims|, broadcast back to it. */
static tpu_hlo_value expand(tpu_lower_ctx *c, tpu_hlo_value r, const tpu_hlo_type *to, const int64_t *dims, int n) {
  int64_t kept[MAXR];
  int m = 0;
  for (int i = 0, j = 0; i < to->rank; i++) {
    if (j < n && dims[j] == i) j++;
    else kept[m++] = i;
  }
  return tpu_hlo_broadcast_in_dim(B, r, to, kept);
}

/* A per-channel vector broadcast along dim |dim| of |to|. */
static tpu_hlo_value along(tpu_lower_ctx *c, tpu_hlo_value v, const tpu_hlo_type *to, int dim) {
  int64_t d = dim;
  return tpu_hlo_broadcast_in_dim(B, v, to, &d);
}

/* Dims [from, to) into |dims|; returns how many. */
static int dim_range(int64_t *dims, int from, int to) {
  int n = 0;
  for (int i = from; i < to; i++) dims[n++] = i;
  return n;
}

static int64_t count_of(const tpu_hlo_type *t, const int64_t *dims, int n) {
  int64_t count = 1;
  for (int i = 0; i < n; i++) count *= t->dims[dims[i]];
  return count;
}

/* Sets an output PyTorch leaves empty or unread (eval-mode save_mean, the
 * reserve) to zeros. */
static void set_zeros(tpu_lower_ctx *c, int out) {
  if (wanted(c, out)) tpu_lower_set_output(c, out, tpu_hlo_const_f64(B, &c->out_types[out], 0.0));
}

/* --- layer and group norm ----------------------------------------------------- */

/* Mean and biased variance of |x| over |dims| (reduced). As PyTorch's CPU
 * kernels, an empty row has mean 0 (and variance NaN). */
static void moments(tpu_lower_ctx *c, tpu_hlo_value x, const int64_t *dims, int n, tpu_hlo_value *out_mean,
                    tpu_hlo_value *out_var) {
  tpu_hlo_type xt = *tpu_hlo_type_of(B, x);
  int64_t count = count_of(&xt, dims, n);
  tpu_hlo_value s = sum(c, x, dims, n);
  tpu_hlo_value mean = count == 0 ? k(c, s, 0.0) : dvd(c, s, k(c, s, (double)count));
  tpu_hlo_value xc = sub(c, x, expand(c, mean, &xt, dims, n));
  *out_mean = mean;
  *out_var = dvd(c, sum(c, mul(c, xc, xc), dims, n), k(c, s, (double)count));
}

/* 1 / sqrt(var + eps) */
static tpu_hlo_value inv_std(tpu_lower_ctx *c, tpu_hlo_value var, double eps) {
  return dvd(c, k(c, var, 1.0), tpu_hlo_unary(B, TPU_HLO_SQRT, add(c, var, k(c, var, eps))));
}

/* The input gradient of a normalization over |dims| given the upstream
 * gradient times the weight |gw|, the normalized input |xhat| and rstd (all
 * full-shaped): rstd * (gw - mean(gw) - xhat * mean(gw * xhat)). */
static tpu_hlo_value norm_input_grad(tpu_lower_ctx *c, tpu_hlo_value gw, tpu_hlo_value xhat, tpu_hlo_value rstd,
                                     const int64_t *dims, int n) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, gw);
  tpu_hlo_value count = tpu_hlo_const_f64(B, &t, (double)count_of(&t, dims, n));
  tpu_hlo_value mean_gw = dvd(c, expand(c, sum(c, gw, dims, n), &t, dims, n), count);
  tpu_hlo_value mean_gwx = dvd(c, expand(c, sum(c, mul(c, gw, xhat), dims, n), &t, dims, n), count);
  return mul(c, rstd, sub(c, sub(c, gw, mean_gw), mul(c, xhat, mean_gwx)));
}

/* native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd) */
static tpu_status_t layer_norm_rule(tpu_lower_ctx *c) {
  const tpu_lower_arg *in = &c->args[0];
  tpu_hlo_type xt = arg_type(c, 0, tpu_lower_opmath(in->dtype));
  int64_t dims[MAXR];
  int n = dim_range(dims, in->rank - c->args[1].n, in->rank);
  tpu_hlo_value x = tensor_as(c, 0, xt.dtype), mean, var;
  moments(c, x, dims, n, &mean, &var);
  tpu_hlo_value rstd = inv_std(c, var, tpu_lower_float(c, 4, 1e-5));
  tpu_hlo_value y = mul(c, sub(c, x, expand(c, mean, &xt, dims, n)), expand(c, rstd, &xt, dims, n));
  /* weight and bias have the normalized (trailing) shape */
  if (!tpu_lower_is_none(c, 2)) y = mul(c, y, tpu_lower_operand(c, 2, xt.dtype, &xt));
  if (!tpu_lower_is_none(c, 3)) y = add(c, y, tpu_lower_operand(c, 3, xt.dtype, &xt));
  tpu_lower_set_output(c, 0, y);
  tpu_lower_set_output(c, 1, mean); /* reshaped to input.shape[:axis] + [1] * len(normalized_shape) */
  tpu_lower_set_output(c, 2, rstd);
  return NULL;
}

/* A saved statistic (argument |i|: one value per position of |xt|'s leading
 * |axis| dims, with or without trailing 1s) broadcast to |xt|. */
static tpu_hlo_value saved_stat(tpu_lower_ctx *c, int i, const tpu_hlo_type *xt, int axis) {
  int64_t dims[MAXR];
  for (int d = 0; d < xt->rank; d++) dims[d] = d < axis ? xt->dims[d] : 1;
  tpu_hlo_value v = tpu_hlo_reshape(B, tensor_as(c, i, xt->dtype), xt->rank, dims);
  return tpu_hlo_broadcast_to(B, v, xt);
}

/* native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd,
 *                            weight?, bias?, output_mask) */
static tpu_status_t layer_norm_backward_rule(tpu_lower_ctx *c) {
  const tpu_lower_arg *in = &c->args[1];
  tpu_hlo_type xt = arg_type(c, 1, tpu_lower_opmath(in->dtype));
  int axis = in->rank - c->args[2].n;
  int64_t norm_dims[MAXR], batch_dims[MAXR];
  int n = dim_range(norm_dims, axis, in->rank), m = dim_range(batch_dims, 0, axis);
  tpu_hlo_value g = tensor_as(c, 0, xt.dtype);
  tpu_hlo_value rstd = saved_stat(c, 4, &xt, axis);
  tpu_hlo_value xhat = mul(c, sub(c, tensor_as(c, 1, xt.dtype), saved_stat(c, 3, &xt, axis)), rstd);
  if (wanted(c, 0)) {
    tpu_hlo_value gw = tpu_lower_is_none(c, 5) ? g : mul(c, g, tpu_lower_operand(c, 5, xt.dtype, &xt));
    tpu_lower_set_output(c, 0, norm_input_grad(c, gw, xhat, rstd, norm_dims, n));
  }
  if (wanted(c, 1)) tpu_lower_set_output(c, 1, sum(c, mul(c, g, xhat), batch_dims, m));
  if (wanted(c, 2)) tpu_lower_set_output(c, 2, sum(c, g, batch_dims, m));
  return NULL;
}

/* The [N, G, C/G, HxW] view group norm computes on; |i| is the input or
 * its gradient (shaped like the input). */
static tpu_hlo_value grouped(tpu_lower_ctx *c, int i, const tpu_hlo_type *gt) {
  return tpu_hlo_reshape(B, tensor_as(c, i, gt->dtype), gt->rank, gt->dims);
}

/* A [C] weight or bias as [G, C/G], broadcast to the grouped shape. */
static tpu_hlo_value grouped_channel(tpu_lower_ctx *c, int i, const tpu_hlo_type *gt) {
  static const int64_t dims[2] = {1, 2};
  tpu_hlo_value v = tpu_hlo_reshape(B, tensor_as(c, i, gt->dtype), 2, &gt->dims[1]);
  return tpu_hlo_broadcast_in_dim(B, v, gt, dims);
}

/* The grouped type of input |in|; the N, C, HxW, group arguments start at
 * |first_size|. */
static tpu_hlo_type group_type(const tpu_lower_ctx *c, int in, int first_size) {
  int64_t n = tpu_lower_int(c, first_size, 0), ch = tpu_lower_int(c, first_size + 1, 0);
  int64_t hxw = tpu_lower_int(c, first_size + 2, 0), g = tpu_lower_int(c, first_size + 3, 1);
  int64_t dims[4] = {n, g, g > 0 ? ch / g : 0, hxw};
  return tpu_hlo_make_type(tpu_lower_opmath(c->args[in].dtype), 4, dims);
}

/* native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean, rstd) */
static tpu_status_t group_norm_rule(tpu_lower_ctx *c) {
  static const int64_t dims[2] = {2, 3};
  tpu_hlo_type gt = group_type(c, 0, 3);
  tpu_hlo_value x = grouped(c, 0, &gt), mean, var;
  moments(c, x, dims, 2, &mean, &var);
  tpu_hlo_value rstd = inv_std(c, var, tpu_lower_float(c, 7, 1e-5));
  tpu_hlo_value y = mul(c, sub(c, x, expand(c, mean, &gt, dims, 2)), expand(c, rstd, &gt, dims, 2));
  if (!tpu_lower_is_none(c, 1)) y = mul(c, y, grouped_channel(c, 1, &gt));
  if (!tpu_lower_is_none(c, 2)) y = add(c, y, grouped_channel(c, 2, &gt));
  tpu_lower_set_output(c, 0, tpu_hlo_reshape(B, y, c->args[0].rank, c->args[0].sizes));
  tpu_lower_set_output(c, 1, mean);
  tpu_lower_set_output(c, 2, rstd);
  return NULL;
}

/* native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW,
 *                            group, output_mask) */
static tpu_status_t group_norm_backward_rule(tpu_lower_ctx *c) {
  static const int64_t group_dims[2] = {2, 3}, channel_sum_dims[2] = {0, 3};
  tpu_hlo_type gt = group_type(c, 1, 5);
  tpu_hlo_value g = grouped(c, 0, &gt), x = grouped(c, 1, &gt);
  /* mean and rstd are [N, G] */
  tpu_hlo_value mean = expand(c, tpu_hlo_reshape(B, tensor_as(c, 2, gt.dtype), 2, gt.dims), &gt, group_dims, 2);
  tpu_hlo_value rstd = expand(c, tpu_hlo_reshape(B, tensor_as(c, 3, gt.dtype), 2, gt.dims), &gt, group_dims, 2);
  tpu_hlo_value xhat = mul(c, sub(c, x, mean), rstd);
  if (wanted(c, 0)) {
    tpu_hlo_value gw = tpu_lower_is_none(c, 4) ? g : mul(c, g, grouped_channel(c, 4, &gt));
    tpu_hlo_value dx = norm_input_grad(c, gw, xhat, rstd, group_dims, 2);
    tpu_lower_set_output(c, 0, tpu_hlo_reshape(B, dx, c->args[1].rank, c->args[1].sizes));
  }
  /* [G, C/G] sums, reshaped to [C] by set_output */
  if (wanted(c, 1)) tpu_lower_set_output(c, 1, sum(c, mul(c, g, xhat), channel_sum_dims, 2));
  if (wanted(c, 2)) tpu_lower_set_output(c, 2, sum(c, g, channel_sum_dims, 2));
  return NULL;
}

/* --- batch norm ------------------------------------------------------------------ */

/* Where each batch-norm variant keeps its arguments (-1: it has none). The
 * running stats are also written, as the outputs after the returns. */
typedef struct bn_layout {
  int running_mean, running_var;
  int training; /* a bool argument, or -1: |train| */
  bool train;
  int momentum, eps;
  int stats_out;  /* the output index of the updated running mean, -1 if not written */
  int reserve;    /* an always-empty output (_batch_norm_with_update), -1 if none */
} bn_layout;

enum { BN_NATIVE, BN_NO_STATS, BN_NO_TRAINING, BN_WITH_UPDATE };
static const bn_layout bn_layouts[] = {
    [BN_NATIVE] = {3, 4, 5, false, 6, 7, 3, -1},
    [BN_NO_STATS] = {-1, -1, 3, false, 4, 5, -1, -1},
    [BN_NO_TRAINING] = {3, 4, -1, false, 5, 6, -1, -1},
    [BN_WITH_UPDATE] = {3, 4, -1, true, 5, 6, 4, 3},
};

/* All dims but the channel dim (1), and how many elements each channel has. */
static int non_channel_dims(const tpu_lower_arg *in, int64_t *dims, int64_t *out_count) {
  int n = 0;
  *out_count = 1;
  for (int i = 0; i < in->rank; i++) {
    if (i == 1) continue;
    dims[n++] = i;
    *out_count *= in->sizes[i];
  }
  return n;
}

static tpu_status_t batch_norm_rule(tpu_lower_ctx *c) {
  const bn_layout *a = &bn_layouts[c->data];
  const tpu_lower_arg *in = &c->args[0];
  tpu_hlo_type xt = arg_type(c, 0, tpu_lower_opmath(in->dtype));
  int64_t dims[MAXR], count;
  int n = non_channel_dims(in, dims, &count);
  bool train = a->training >= 0 ? tpu_lower_bool(c, a->training, false) : a->train;
  bool has_stats = a->running_mean >= 0 && !tpu_lower_is_none(c, a->running_mean) && !tpu_lower_is_none(c, a->running_var);
  double eps = tpu_lower_float(c, a->eps, 1e-5);
  if (train && tpu_hlo_type_numel(&xt) == 0) {
    char sizes[256];
    int len = 0;
    for (int i = 0; i < in->rank && len < (int)sizeof sizes - 24; i++)
      len += snprintf(sizes + len, sizeof sizes - (size_t)len, i ? ", %lld" : "%lld", (long long)in->sizes[i]);
    sizes[len] = '\0';
    return tpu_lower_error(c, TPU_ERR_RUNTIME,
                           "input tensor must have at least one element, but got input_sizes = [%s]", sizes);
  }
  if (!train && !has_stats)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "running_mean and running_var must be defined in evaluation mode");
  tpu_hlo_value x = tensor_as(c, 0, xt.dtype), mean, invstd;
  if (train) {
    tpu_hlo_value var;
    moments(c, x, dims, n, &mean, &var);
    invstd = inv_std(c, var, eps);
    if (eps == 0.0) /* PyTorch's InvStd: 0, not inf, for a constant channel */
      invstd = sel(c, cmp(c, TPU_HLO_EQ, var, k(c, var, 0.0)), k(c, var, 0.0), invstd);
    tpu_lower_set_output(c, 1, mean);
    tpu_lower_set_output(c, 2, invstd);
    if (a->stats_out >= 0 && has_stats) {
      /* momentum * batch + (1 - momentum) * running; the variance unbiased */
      double m = tpu_lower_float(c, a->momentum, 0.1);
      tpu_hlo_value unbiased = mul(c, var, k(c, var, (double)count / (double)(count - 1)));
      tpu_hlo_value rm = tensor_as(c, a->running_mean, xt.dtype), rv = tensor_as(c, a->running_var, xt.dtype);
      tpu_lower_set_output(c, a->stats_out, add(c, mul(c, k(c, mean, m), mean), mul(c, k(c, rm, 1.0 - m), rm)));
      tpu_lower_set_output(c, a->stats_out + 1,
                           add(c, mul(c, k(c, unbiased, m), unbiased), mul(c, k(c, rv, 1.0 - m), rv)));
    }
  } else {
    mean = tensor_as(c, a->running_mean, xt.dtype);
    invstd = inv_std(c, tensor_as(c, a->running_var, xt.dtype), eps);
    /* The saved stats: empty on CPU; where the meta function sizes them [C],
     * the running mean and its invstd, as on CUDA. */
    for (int i = 1; i <= 2; i++) {
      if (tpu_hlo_type_numel(&c->out_types[i]) == 0) set_zeros(c, i);
      else tpu_lower_set_output(c, i, i == 1 ? mean : invstd);
    }
    if (a->stats_out >= 0) { /* written back unchanged */
      tpu_lower_set_output(c, a->stats_out, tpu_lower_tensor(c, a->running_mean));
      tpu_lower_set_output(c, a->stats_out + 1, tpu_lower_tensor(c, a->running_var));
    }
  }
  if (a->reserve >= 0) set_zeros(c, a->reserve);
  /* out = x * alpha + beta with per-channel alpha = invstd * weight and
   * beta = bias - mean * alpha, as PyTorch's CPU kernel */
  tpu_hlo_value alpha = tpu_lower_is_none(c, 1) ? invstd : mul(c, invstd, tensor_as(c, 1, xt.dtype));
  tpu_hlo_value beta = neg(c, mul(c, mean, alpha));
  if (!tpu_lower_is_none(c, 2)) beta = add(c, tensor_as(c, 2, xt.dtype), beta);
  tpu_lower_set_output(c, 0, add(c, mul(c, x, along(c, alpha, &xt, 1)), along(c, beta, &xt, 1)));
  return NULL;
}

/* native_batch_norm_backward(grad_out, input, weight?, running_mean?,
 * running_var?, save_mean?, save_invstd?, train, eps, output_mask);
 * batch_norm_backward adds a reserve (unused) and calls |train| "update". */
static tpu_status_t batch_norm_backward_rule(tpu_lower_ctx *c) {
  const tpu_lower_arg *in = &c->args[1];
  tpu_hlo_type xt = arg_type(c, 1, tpu_lower_opmath(in->dtype));
  int64_t dims[MAXR], count;
  int n = non_channel_dims(in, dims, &count);
  bool train = tpu_lower_bool(c, 7, true);
  int mean_arg = train ? 5 : 3, var_arg = train ? 6 : 4;
  if (tpu_lower_is_none(c, mean_arg) || tpu_lower_is_none(c, var_arg))
    return tpu_lower_error(c, TPU_ERR_RUNTIME, train ? "save_mean and save_invstd must be defined in training mode"
                                                     : "running_mean and running_var must be defined in evaluation mode");
  tpu_hlo_value g = tensor_as(c, 0, xt.dtype), x = tensor_as(c, 1, xt.dtype);
  tpu_hlo_value mean = tensor_as(c, mean_arg, xt.dtype);
  tpu_hlo_value invstd =
      train ? tensor_as(c, 6, xt.dtype) : inv_std(c, tensor_as(c, 4, xt.dtype), tpu_lower_float(c, 8, 1e-5));
  tpu_hlo_value xc = sub(c, x, along(c, mean, &xt, 1));
  tpu_hlo_value gsum = sum(c, g, dims, n);
  tpu_hlo_value dotp = sum(c, mul(c, xc, g), dims, n);
  /* PyTorch's meta function defines grad_input even when output_mask
   * excludes it; nobody reads it then, so it is left zero. */
  if (c->args[9].kind == TPU_ARG_BOOL_LIST && !c->args[9].bools[0]) {
    set_zeros(c, 0);
  } else if (wanted(c, 0)) {
    tpu_hlo_value scale = tpu_lower_is_none(c, 2) ? invstd : mul(c, invstd, tensor_as(c, 2, xt.dtype));
    tpu_hlo_value dy = g;
    if (train) { /* PyTorch's CPU formula */
      tpu_hlo_value kk = dvd(c, mul(c, mul(c, dotp, invstd), invstd), k(c, dotp, (double)count));
      tpu_hlo_value grad_mean = dvd(c, gsum, k(c, gsum, (double)count));
      dy = sub(c, sub(c, g, along(c, grad_mean, &xt, 1)), mul(c, xc, along(c, kk, &xt, 1)));
    }
    tpu_lower_set_output(c, 0, mul(c, dy, along(c, scale, &xt, 1)));
  }
  if (wanted(c, 1)) tpu_lower_set_output(c, 1, mul(c, dotp, invstd));
  if (wanted(c, 2)) tpu_lower_set_output(c, 2, gsum);
  return NULL;
}

/* --- losses --------------------------------------------------------------------------- */

/* Output 0: the per-element |loss| reduced as |reduction| asks. */
static tpu_status_t reduced(tpu_lower_ctx *c, tpu_hlo_value loss, int64_t reduction) {
  if (reduction != REDUCTION_NONE) {
    tpu_hlo_type t = *tpu_hlo_type_of(B, loss);
    loss = sum_all(c, loss);
    if (reduction == REDUCTION_MEAN) loss = dvd(c, loss, k(c, loss, (double)tpu_hlo_type_numel(&t)));
  } else {
    loss = tpu_hlo_reshape(B, loss, OUT->rank, OUT->dims); /* one sample's loss: [1] or 0-dim, as the kernel says */
  }
  tpu_lower_set_output(c, 0, loss);
  return NULL;
}

/* Class-index losses (nll_loss, multi_margin_loss). */

/* The targets (argument |ti|, one per position of |xt| without its class
 * dim |cd|), checked: targets equal to *|ignore| (if given) are ignored (and
 * *|out_kept|, an i1 value of the targets' shape, is false there); any other
 * target outside [0, C) fails the op with |code| and |message| (a format
 * of the first such target's %lld, or none), as PyTorch. */
static tpu_hlo_value class_targets(tpu_lower_ctx *c, int ti, const tpu_hlo_type *xt, int cd, const int64_t *ignore,
                                   tpu_code_t code, const char *message, tpu_hlo_value *out_kept) {
  int64_t dims[MAXR];
  int n = 0;
  for (int i = 0; i < xt->rank; i++)
    if (i != cd) dims[n++] = xt->dims[i];
  tpu_hlo_value t = tpu_hlo_reshape(B, tensor_as(c, ti, TPU_S64), n, dims); /* a [1] target of a [C] input: rank 0 */
  tpu_hlo_value ok = and_(c, cmp(c, TPU_HLO_GE, t, k(c, t, 0.0)), cmp(c, TPU_HLO_LT, t, k(c, t, (double)xt->dims[cd])));
  *out_kept = TPU_HLO_NONE;
  if (ignore != NULL) {
    *out_kept = cmp(c, TPU_HLO_NE, t, k(c, t, (double)*ignore));
    ok = tpu_hlo_binary(B, TPU_HLO_OR, ok, tpu_hlo_unary(B, TPU_HLO_NOT, *out_kept));
  }
  tpu_hlo_value target;
  tpu_lower_require_values(c, tpu_lower_all_or_first(c, ok, t, &target), 1, &target, code, message);
  return t;
}

/* |v| at each target's class: |v| has the input's shape (class dim |cd|,
 * every other dim one per target) or is a [C] vector (|cd| 0); the result
 * has the targets' shape. One gather, which reads one element per target
 * (XLA clamps an ignored or failing target into range). */
static tpu_hlo_value at_class(tpu_lower_ctx *c, tpu_hlo_value v, tpu_hlo_value t, int cd) {
  if (tpu_hlo_failed(B)) return TPU_HLO_NONE;
  const tpu_hlo_type *vt = tpu_hlo_type_of(B, v), *tt = tpu_hlo_type_of(B, t);
  tpu_hlo_type out = tpu_hlo_make_type(vt->dtype, tt->rank, tt->dims);
  if (tpu_hlo_type_numel(&out) == 0) return tpu_hlo_const_f64(B, &out, 0.0);
  tpu_hlo_gather_dims g = {.num_collapsed = 1, .num_start_map = 1, .index_vector_dim = tt->rank};
  g.collapsed_slice_dims[0] = g.start_index_map[0] = cd;
  int64_t slice[MAXR];
  for (int i = 0; i < vt->rank; i++) {
    slice[i] = 1;
    if (vt->rank > 1 && i != cd) {
      g.start_indices_batching_dims[g.num_indices_batch++] = g.num_operand_batch;
      g.operand_batching_dims[g.num_operand_batch++] = i;
    }
  }
  return tpu_hlo_gather(B, v, t, &g, slice, &out);
}

/* Where each target |t| (from class_targets) picks its class in |xt|: an
 * i1 value of |xt|'s shape, for the gradients, which are dense over the
 * classes. Ignored targets (|kept| false, if given) pick nothing. */
static tpu_hlo_value class_hit(tpu_lower_ctx *c, tpu_hlo_value t, tpu_hlo_value kept, const tpu_hlo_type *xt, int cd) {
  int64_t cdim = cd;
  tpu_hlo_type it = *xt;
  it.dtype = TPU_S64;
  tpu_hlo_value hit = cmp(c, TPU_HLO_EQ, tpu_hlo_iota(B, &it, cd), expand(c, t, &it, &cdim, 1));
  if (kept != TPU_HLO_NONE) {
    it.dtype = TPU_BOOL;
    hit = and_(c, hit, expand(c, kept, &it, &cdim, 1));
  }
  return hit;
}

/* nll_loss's targets (argument |ti|, ignore_index argument |ignore_arg|). */
static tpu_hlo_value nll_targets(tpu_lower_ctx *c, int ti, int ignore_arg, const tpu_hlo_type *xt, int cd,
                                 tpu_hlo_value *out_kept) {
  int64_t ignore = tpu_lower_int(c, ignore_arg, -100);
  return class_targets(c, ti, xt, cd, &ignore, TPU_ERR_INDEX, "Target %lld is out of bounds.", out_kept);
}

/* A per-target (reduction none) or single upstream gradient, broadcast to
 * |xt| (class dim |cd|). */
static tpu_hlo_value per_target_grad(tpu_lower_ctx *c, tpu_hlo_value g, const tpu_hlo_type *xt, int cd) {
  int64_t cdim = cd;
  if (tpu_hlo_type_numel(tpu_hlo_type_of(B, g)) == 1 && tpu_hlo_type_numel(xt) != 1)
    g = tpu_hlo_reshape(B, g, 0, NULL);
  return tpu_hlo_rank(B, g) == 0 ? tpu_hlo_broadcast_to(B, g, xt) : expand(c, g, xt, &cdim, 1);
}

/* The dtype check of a CPU kernel's typed read of argument |i|. */
static tpu_status_t expect_dtype(tpu_lower_ctx *c, int i, tpu_dtype_t want) {
  if (c->args[i].dtype == want) return NULL;
  return tpu_lower_error(c, TPU_ERR_RUNTIME, "expected scalar type %s but found %s", tpu_dtype_scalar_type(want),
                         tpu_dtype_scalar_type(c->args[i].dtype));
}

/* A class weight (argument |wi|, any shape with C elements: the 2-d kernel
 * checks only the count) as a [C] vector. */
static tpu_hlo_value class_weights(tpu_lower_ctx *c, int wi, const tpu_hlo_type *xt, int cd) {
  return tpu_hlo_reshape(B, tensor_as(c, wi, xt->dtype), 1, &xt->dims[cd]);
}

/* The dtype checks of PyTorch's CPU nll_loss kernels, which follow the meta
 * function's: a floating input, a weight of the input's dtype and, in the
 * 2-d kernel (a 4-d input), a Long target (the meta function allows Byte). */
static tpu_status_t nll_dtype_check(tpu_lower_ctx *c) {
  const tpu_lower_arg *x = &c->args[0];
  bool two_d = x->rank == 4;
  if (!tpu_dtype_is_float(x->dtype))
    return tpu_lower_error(c, TPU_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s'",
                           two_d ? "nll_loss2d_forward_out_frame" : "nll_loss_out_frame", tpu_dtype_scalar_type(x->dtype));
  tpu_status_t st = tpu_lower_is_none(c, 2) ? NULL : expect_dtype(c, 2, x->dtype);
  if (st != NULL) return st;
  tpu_hlo_type xt = arg_type(c, 0, x->dtype);
  bool empty_reduced = tpu_lower_int(c, 3, REDUCTION_MEAN) != REDUCTION_NONE && tpu_hlo_type_numel(&xt) == 0;
  /* an empty reduced loss returns before reading the target */
  return two_d && !empty_reduced ? expect_dtype(c, 1, TPU_S64) : NULL;
}

/* nll_loss_forward / nll_loss2d_forward(self, target, weight?, reduction,
 * ignore_index) -> (output, total_weight) */
static tpu_status_t nll_loss_rule(tpu_lower_ctx *c) {
  tpu_status_t st = nll_dtype_check(c);
  if (st != NULL) return st;
  const tpu_lower_arg *in = &c->args[0];
  tpu_hlo_type xt = arg_type(c, 0, tpu_lower_opmath(c->out_types[0].dtype));
  int cd = in->rank == 1 ? 0 : 1;
  int64_t reduction = tpu_lower_int(c, 3, REDUCTION_MEAN);
  tpu_hlo_value kept, t = nll_targets(c, 1, 4, &xt, cd, &kept);
  /* per target: -x[t] * w[t] and w[t], 0 where ignored */
  tpu_hlo_value xy = at_class(c, tensor_as(c, 0, xt.dtype), t, cd);
  tpu_hlo_value w = tpu_lower_is_none(c, 2) ? k(c, xy, 1.0) : at_class(c, class_weights(c, 2, &xt, cd), t, 0);
  tpu_hlo_value zero = k(c, xy, 0.0);
  tpu_hlo_value loss = sel(c, kept, mul(c, neg(c, xy), w), zero);
  tpu_hlo_value total = sum_all(c, sel(c, kept, w, zero));
  if (reduction == REDUCTION_NONE) {
    tpu_lower_set_output(c, 0, loss);
    /* PyTorch's batched kernel leaves total_weight 0 */
    tpu_lower_set_output(c, 1, in->rank == 1 ? total : k(c, total, 0.0));
    return NULL;
  }
  loss = sum_all(c, loss);
  tpu_lower_set_output(c, 0, reduction == REDUCTION_MEAN ? dvd(c, loss, total) : loss);
  tpu_lower_set_output(c, 1, total);
  return NULL;
}

/* nll_loss_backward / nll_loss2d_backward(grad_output, self, target, weight?,
 * reduction, ignore_index, total_weight) */
static tpu_status_t nll_loss_backward_rule(tpu_lower_ctx *c) {
  const tpu_lower_arg *in = &c->args[1];
  tpu_hlo_type xt = arg_type(c, 1, tpu_lower_opmath(c->out_types[0].dtype));
  int cd = in->rank == 1 ? 0 : 1;
  int64_t reduction = tpu_lower_int(c, 4, REDUCTION_MEAN);
  tpu_hlo_value kept, t = nll_targets(c, 2, 5, &xt, cd, &kept);
  tpu_hlo_value hit = class_hit(c, t, kept, &xt, cd);
  tpu_hlo_value g = tensor_as(c, 0, xt.dtype);
  if (reduction == REDUCTION_MEAN) g = dvd(c, g, tensor_as(c, 6, xt.dtype));
  tpu_hlo_value grad = neg(c, per_target_grad(c, g, &xt, cd));
  if (!tpu_lower_is_none(c, 3)) grad = mul(c, along(c, class_weights(c, 3, &xt, cd), &xt, cd), grad);
  tpu_lower_set_output(c, 0, sel(c, hit, grad, tpu_hlo_const_f64(B, &xt, 0.0)));
  return NULL;
}

/* PyTorch's CPU margin-loss kernels (named |kernel|) take float and double
 * only. */
static tpu_status_t margin_dtype_check(tpu_lower_ctx *c, const char *kernel) {
  tpu_dtype_t t = c->args[0].dtype;
  if (t == TPU_F32 || t == TPU_F64) return NULL;
  return tpu_lower_error(c, TPU_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s'", kernel,
                         tpu_dtype_scalar_type(t));
}

/* multi_margin_loss(self, target, p, margin, weight?, reduction): per sample
 * ([C] or [N, C] input), the sum over classes j != y with z = margin - x[y]
 * + x[j] > 0 of z^p * w[y], over C; p is 1 or 2 (the meta function checks). */
static tpu_status_t multi_margin_loss_rule(tpu_lower_ctx *c) {
  tpu_status_t st = margin_dtype_check(c, "multi_margin_loss_cpu_kernel");
  if (st != NULL) return st;
  if ((st = expect_dtype(c, 1, TPU_S64)) != NULL) return st;
  if (!tpu_lower_is_none(c, 4) && (st = expect_dtype(c, 4, c->args[0].dtype)) != NULL) return st;
  static const int64_t one = 1;
  tpu_hlo_type xt = arg_type(c, 0, tpu_lower_opmath(c->out_types[0].dtype));
  if (xt.rank == 0) xt = tpu_hlo_make_type(xt.dtype, 1, &one); /* a 0-dim input is one class */
  int cd = xt.rank - 1;
  int64_t cdim = cd;
  tpu_hlo_value kept, t = class_targets(c, 1, &xt, cd, NULL, TPU_ERR_RUNTIME, "target out of range", &kept);
  tpu_hlo_value hit = class_hit(c, t, kept, &xt, cd);
  tpu_hlo_value x = tpu_hlo_reshape(B, tensor_as(c, 0, xt.dtype), xt.rank, xt.dims);
  tpu_hlo_value zero = tpu_hlo_const_f64(B, &xt, 0.0);
  tpu_hlo_value xy = expand(c, at_class(c, x, t, cd), &xt, &cdim, 1);
  tpu_hlo_value z = add(c, sub(c, tpu_hlo_const_f64(B, &xt, tpu_lower_float(c, 3, 1.0)), xy), x);
  tpu_hlo_value h = tpu_lower_float(c, 2, 1.0) == 1.0 ? z : mul(c, z, z);
  if (!tpu_lower_is_none(c, 4)) h = mul(c, h, expand(c, at_class(c, class_weights(c, 4, &xt, cd), t, 0), &xt, &cdim, 1));
  tpu_hlo_value counted = and_(c, cmp(c, TPU_HLO_GT, z, zero), tpu_hlo_unary(B, TPU_HLO_NOT, hit));
  tpu_hlo_value loss = sum(c, sel(c, counted, h, zero), &cdim, 1);
  return reduced(c, dvd(c, loss, k(c, loss, (double)xt.dims[cd])), tpu_lower_int(c, 5, REDUCTION_MEAN));
}

/* The input of a margin loss as [N, C] (a 0-dim input is one class, a 1-d
 * one sample) in |dtype|. */
static tpu_hlo_type margin_rows(const tpu_lower_ctx *c, int i, tpu_dtype_t dtype) {
  const tpu_lower_arg *a = &c->args[i];
  int64_t dims[2] = {a->rank == 2 ? a->sizes[0] : 1, a->rank == 0 ? 1 : a->sizes[a->rank - 1]};
  return tpu_hlo_make_type(dtype, 2, dims);
}

/* A margin loss's upstream gradient over |xt| ([N, C]) divided by C (and by
 * N for the mean, where |g| is one value). */
static tpu_hlo_value margin_grad_scale(tpu_lower_ctx *c, const tpu_hlo_type *xt, int64_t reduction) {
  static const int64_t cdim = 1;
  tpu_hlo_value g = tensor_as(c, 0, xt->dtype);
  double n = (double)xt->dims[1] * (reduction == REDUCTION_MEAN ? (double)xt->dims[0] : 1.0);
  g = reduction == REDUCTION_NONE ? expand(c, tpu_hlo_reshape(B, g, 1, xt->dims), xt, &cdim, 1)
                                  : tpu_hlo_broadcast_to(B, tpu_hlo_reshape(B, g, 0, NULL), xt);
  return dvd(c, g, tpu_hlo_const_f64(B, xt, n));
}

/* multi_margin_loss_backward(grad_output, self, target, p, margin, weight?,
 * reduction): each counted class j gets h = (p == 1 ? 1 : 2 z) * w[y], the
 * target class minus their sum (PyTorch has no meta function for it: ours
 * is in csrc/torch/meta.cpp). */
static tpu_status_t multi_margin_loss_backward_rule(tpu_lower_ctx *c) {
  static const int64_t cdim = 1;
  tpu_hlo_type xt = margin_rows(c, 1, tpu_lower_opmath(OUT->dtype));
  tpu_hlo_value kept, t = class_targets(c, 2, &xt, 1, NULL, TPU_ERR_RUNTIME, "target out of range", &kept);
  tpu_hlo_value hit = class_hit(c, t, kept, &xt, 1);
  tpu_hlo_value x = tpu_hlo_reshape(B, tensor_as(c, 1, xt.dtype), 2, xt.dims), zero = tpu_hlo_const_f64(B, &xt, 0.0);
  tpu_hlo_value xy = expand(c, at_class(c, x, t, 1), &xt, &cdim, 1);
  tpu_hlo_value z = add(c, sub(c, tpu_hlo_const_f64(B, &xt, tpu_lower_float(c, 4, 1.0)), xy), x);
  tpu_hlo_value h = tpu_lower_float(c, 3, 1.0) == 1.0 ? tpu_hlo_const_f64(B, &xt, 1.0) : mul(c, k(c, z, 2.0), z);
  if (!tpu_lower_is_none(c, 5)) h = mul(c, h, expand(c, at_class(c, class_weights(c, 5, &xt, 1), t, 0), &xt, &cdim, 1));
  tpu_hlo_value counted = and_(c, cmp(c, TPU_HLO_GT, z, zero), tpu_hlo_unary(B, TPU_HLO_NOT, hit));
  h = sel(c, counted, h, zero);
  tpu_hlo_value grad = sel(c, hit, neg(c, expand(c, sum(c, h, &cdim, 1), &xt, &cdim, 1)), h);
  return done(c, mul(c, grad, margin_grad_scale(c, &xt, tpu_lower_int(c, 6, REDUCTION_MEAN))));
}

/* The pairs of a multilabel margin loss over input argument |xi| and target
 * |ti| ([N, C] as |xt|): per sample, every listed target j (the targets
 * before the first -1, repeats counted as PyTorch's loop counts them) and
 * every non-target class i, laid out [N, K (target slot), C]. */
typedef struct multilabel_pairs {
  tpu_hlo_value onehot;  /* slot k lists class i */
  tpu_hlo_value counted; /* 1 - x[j] + x[i] > 0 for a listed target and non-target class */
  tpu_hlo_value z;       /* 1 - x[j] + x[i] */
  tpu_hlo_value is_target;
} multilabel_pairs;

static multilabel_pairs multilabel_pairs_of(tpu_lower_ctx *c, int xi, int ti, const tpu_hlo_type *xt) {
  static const int64_t slot = 1, cls = 2, nk[2] = {0, 1}, ni[2] = {0, 2};
  int64_t pdims[3] = {xt->dims[0], xt->dims[1], xt->dims[1]};
  tpu_hlo_type pt = tpu_hlo_make_type(xt->dtype, 3, pdims), it = tpu_hlo_make_type(TPU_S64, 3, pdims);
  tpu_hlo_type st = tpu_hlo_make_type(TPU_S64, 2, xt->dims);
  tpu_hlo_value x = tpu_hlo_reshape(B, tensor_as(c, xi, xt->dtype), 2, xt->dims);
  tpu_hlo_value t = tpu_hlo_reshape(B, tensor_as(c, ti, TPU_S64), 2, xt->dims);
  tpu_hlo_value slots = tpu_hlo_iota(B, &st, 1);
  tpu_hlo_value end = sel(c, cmp(c, TPU_HLO_EQ, t, k(c, t, -1.0)), slots, k(c, t, (double)xt->dims[1]));
  end = expand(c, tpu_lower_reduce(B, end, TPU_HLO_MIN, &slot, 1), &st, &slot, 1);
  tpu_hlo_value listed = cmp(c, TPU_HLO_LT, slots, end);
  multilabel_pairs r;
  r.onehot = cmp(c, TPU_HLO_EQ, tpu_hlo_iota(B, &it, 2), tpu_hlo_broadcast_in_dim(B, t, &it, nk));
  it.dtype = TPU_BOOL;
  r.onehot = and_(c, r.onehot, tpu_hlo_broadcast_in_dim(B, listed, &it, nk));
  r.is_target = tpu_lower_reduce(B, r.onehot, TPU_HLO_OR, &slot, 1);
  tpu_hlo_value zero = tpu_hlo_const_f64(B, &pt, 0.0);
  tpu_hlo_value xj = sum(c, sel(c, r.onehot, tpu_hlo_broadcast_in_dim(B, x, &pt, ni), zero), &cls, 1);
  r.z = add(c, sub(c, tpu_hlo_const_f64(B, &pt, 1.0), tpu_hlo_broadcast_in_dim(B, xj, &pt, nk)),
            tpu_hlo_broadcast_in_dim(B, x, &pt, ni));
  tpu_hlo_value other = tpu_hlo_unary(B, TPU_HLO_NOT, r.is_target);
  r.counted = and_(c, and_(c, cmp(c, TPU_HLO_GT, r.z, zero), tpu_hlo_broadcast_in_dim(B, listed, &it, nk)),
                   tpu_hlo_broadcast_in_dim(B, other, &it, ni));
  return r;
}

/* multilabel_margin_loss_forward(self, target, reduction) -> (output,
 * is_target): per sample, the counted pairs' z summed over C. (PyTorch's
 * decomposition also counts the slots after a -1.) */
static tpu_status_t multilabel_margin_loss_rule(tpu_lower_ctx *c) {
  static const int64_t pair_dims[2] = {1, 2};
  tpu_status_t st = margin_dtype_check(c, "multilabel_margin_loss_forward_out_frame");
  if (st == NULL) st = expect_dtype(c, 1, TPU_S64);
  if (st != NULL) return st;
  tpu_hlo_type xt = margin_rows(c, 0, tpu_lower_opmath(OUT->dtype));
  multilabel_pairs p = multilabel_pairs_of(c, 0, 1, &xt);
  tpu_hlo_value loss = sum(c, sel(c, p.counted, p.z, k(c, p.z, 0.0)), pair_dims, 2);
  tpu_lower_set_output(c, 1, tpu_hlo_convert(B, p.is_target, xt.dtype));
  return reduced(c, dvd(c, loss, k(c, loss, (double)xt.dims[1])), tpu_lower_int(c, 2, REDUCTION_MEAN));
}

/* multilabel_margin_loss_backward(grad_output, self, target, reduction,
 * is_target): every counted pair moves 1 from target j's gradient to class
 * i's. PyTorch has no meta function for it either. */
static tpu_status_t multilabel_margin_loss_backward_rule(tpu_lower_ctx *c) {
  static const int64_t slot = 1, cls = 2, nk[2] = {0, 1};
  tpu_hlo_type xt = margin_rows(c, 1, tpu_lower_opmath(OUT->dtype));
  multilabel_pairs p = multilabel_pairs_of(c, 1, 2, &xt);
  const tpu_hlo_type pt = *tpu_hlo_type_of(B, p.z);
  tpu_hlo_value zero = tpu_hlo_const_f64(B, &pt, 0.0);
  tpu_hlo_value ones = sel(c, p.counted, tpu_hlo_const_f64(B, &pt, 1.0), zero);
  tpu_hlo_value per_slot = tpu_hlo_broadcast_in_dim(B, sum(c, ones, &cls, 1), &pt, nk);
  tpu_hlo_value grad = sub(c, sum(c, ones, &slot, 1), sum(c, sel(c, p.onehot, per_slot, zero), &slot, 1));
  return done(c, mul(c, grad, margin_grad_scale(c, &xt, tpu_lower_int(c, 3, REDUCTION_MEAN))));
}

/* Pointwise losses. */

/* Arguments |a| and |b| broadcast together, in |dtype|. */
static tpu_hlo_type pair_type(const tpu_lower_ctx *c, int a, int b, tpu_dtype_t dtype) {
  const tpu_lower_arg *x = &c->args[a], *y = &c->args[b];
  int rank = x->rank > y->rank ? x->rank : y->rank;
  int64_t dims[MAXR];
  for (int i = 0; i < rank; i++) {
    int ix = i - (rank - x->rank), iy = i - (rank - y->rank);
    int64_t dx = ix >= 0 ? x->sizes[ix] : 1, dy = iy >= 0 ? y->sizes[iy] : 1;
    dims[i] = dx == 1 ? dy : dx;
  }
  return tpu_hlo_make_type(dtype, rank, dims);
}

/* The loss's input - target (args 0 and 1) in the loss's compute type. */
static tpu_hlo_value loss_diff(tpu_lower_ctx *c, tpu_hlo_type *out_t) {
  *out_t = pair_type(c, 0, 1, tpu_lower_opmath(c->out_types[0].dtype));
  return sub(c, tpu_lower_operand(c, 0, out_t->dtype, out_t), tpu_lower_operand(c, 1, out_t->dtype, out_t));
}

/* The backward's norm * grad_output (grad_output is arg 0, self arg 1,
 * |reduction| as given), broadcast to the gradient's shape |t|. */
static tpu_hlo_value scaled_grad(tpu_lower_ctx *c, const tpu_hlo_type *t, int64_t reduction, double norm) {
  if (reduction == REDUCTION_MEAN) {
    tpu_hlo_type st = arg_type(c, 1, t->dtype);
    norm /= (double)tpu_hlo_type_numel(&st);
  }
  tpu_hlo_value g = tpu_lower_operand(c, 0, t->dtype, t);
  return mul(c, tpu_hlo_const_f64(B, t, norm), g);
}

/* Backward inputs: self - target (args 1 and 2), shaped like the gradient. */
static tpu_hlo_value grad_diff(tpu_lower_ctx *c, tpu_hlo_type *out_t) {
  *out_t = c->out_types[0];
  out_t->dtype = tpu_lower_opmath(out_t->dtype);
  return sub(c, tpu_lower_operand(c, 1, out_t->dtype, out_t), tpu_lower_operand(c, 2, out_t->dtype, out_t));
}

/* mse_loss(self, target, reduction) */
static tpu_status_t mse_loss_rule(tpu_lower_ctx *c) {
  tpu_hlo_type t;
  tpu_hlo_value d = loss_diff(c, &t);
  return reduced(c, mul(c, d, d), tpu_lower_int(c, 2, REDUCTION_MEAN));
}

/* mse_loss_backward(grad_output, self, target, reduction) */
static tpu_status_t mse_loss_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_type t;
  tpu_hlo_value d = grad_diff(c, &t);
  tpu_lower_set_output(c, 0, mul(c, scaled_grad(c, &t, tpu_lower_int(c, 3, REDUCTION_MEAN), 2.0), d));
  return NULL;
}

/* smooth_l1_loss(self, target, reduction, beta): |d| < beta ? 0.5 d^2 / beta
 * : |d| - beta / 2 (plain L1 for beta 0). */
static tpu_status_t smooth_l1_loss_rule(tpu_lower_ctx *c) {
  tpu_hlo_type t;
  tpu_hlo_value z = tpu_hlo_unary(B, TPU_HLO_ABS, loss_diff(c, &t));
  double beta = tpu_lower_float(c, 3, 1.0);
  tpu_hlo_value quad = dvd(c, mul(c, mul(c, k(c, z, 0.5), z), z), k(c, z, beta));
  tpu_hlo_value loss = sel(c, cmp(c, TPU_HLO_LT, z, k(c, z, beta)), quad, sub(c, z, k(c, z, 0.5 * beta)));
  return reduced(c, loss, tpu_lower_int(c, 2, REDUCTION_MEAN));
}

/* huber_loss(self, target, reduction, delta): |d| < delta ? 0.5 d^2
 * : delta * (|d| - delta / 2). */
static tpu_status_t huber_loss_rule(tpu_lower_ctx *c) {
  tpu_hlo_type t;
  tpu_hlo_value z = tpu_hlo_unary(B, TPU_HLO_ABS, loss_diff(c, &t));
  double delta = tpu_lower_float(c, 3, 1.0);
  tpu_hlo_value quad = mul(c, mul(c, k(c, z, 0.5), z), z);
  tpu_hlo_value lin = mul(c, k(c, z, delta), sub(c, z, k(c, z, 0.5 * delta)));
  return reduced(c, sel(c, cmp(c, TPU_HLO_LT, z, k(c, z, delta)), quad, lin), tpu_lower_int(c, 2, REDUCTION_MEAN));
}

/* smooth_l1_loss_backward / huber_loss_backward(grad_output, self, target,
 * reduction, beta|delta): ±g outside [-beta, beta], inside d * g / beta for
 * smooth L1 (data 0) and d * g for Huber (data 1), whose outside is ±g * delta. */
static tpu_status_t smooth_l1_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_type t;
  tpu_hlo_value d = grad_diff(c, &t);
  double beta = tpu_lower_float(c, 4, 1.0);
  bool huber = c->data == 1;
  tpu_hlo_value g = scaled_grad(c, &t, tpu_lower_int(c, 3, REDUCTION_MEAN), 1.0);
  tpu_hlo_value outside = huber ? mul(c, g, k(c, g, beta)) : g;
  tpu_hlo_value inside = huber ? mul(c, d, g) : dvd(c, mul(c, d, g), k(c, g, beta));
  tpu_hlo_value r = sel(c, cmp(c, TPU_HLO_GE, d, k(c, d, beta)), outside, inside);
  tpu_lower_set_output(c, 0, sel(c, cmp(c, TPU_HLO_LE, d, k(c, d, -beta)), neg(c, outside), r));
  return NULL;
}

/* binary_cross_entropy(self, target, weight?, reduction):
 * (t - 1) * max(log1p(-x), -100) - t * max(log(x), -100), times weight. */
static tpu_status_t bce_rule(tpu_lower_ctx *c) {
  tpu_hlo_type t = pair_type(c, 0, 1, tpu_lower_opmath(c->out_types[0].dtype));
  tpu_hlo_value x = tpu_lower_operand(c, 0, t.dtype, &t), y = tpu_lower_operand(c, 1, t.dtype, &t);
  tpu_hlo_value zero = k(c, x, 0.0), one = k(c, x, 1.0), floor = k(c, x, -100.0);
  tpu_lower_require(c, all(c, and_(c, cmp(c, TPU_HLO_GE, x, zero), cmp(c, TPU_HLO_LE, x, one))), TPU_ERR_RUNTIME,
                    "all elements of input should be between 0 and 1");
  tpu_lower_require(c, all(c, and_(c, cmp(c, TPU_HLO_GE, y, zero), cmp(c, TPU_HLO_LE, y, one))), TPU_ERR_RUNTIME,
                    "all elements of target should be between 0 and 1");
  tpu_hlo_value log1m = tpu_hlo_binary(B, TPU_HLO_MAX, tpu_hlo_unary(B, TPU_HLO_LOG1P, neg(c, x)), floor);
  tpu_hlo_value logx = tpu_hlo_binary(B, TPU_HLO_MAX, tpu_hlo_unary(B, TPU_HLO_LOG, x), floor);
  tpu_hlo_value loss = sub(c, mul(c, sub(c, y, one), log1m), mul(c, y, logx));
  if (!tpu_lower_is_none(c, 2)) loss = mul(c, loss, tpu_lower_operand(c, 2, t.dtype, &t));
  return reduced(c, loss, tpu_lower_int(c, 3, REDUCTION_MEAN));
}

/* binary_cross_entropy_backward(grad_output, self, target, weight?, reduction):
 * g * (x - t) / max((1 - x) * x, 1e-12), times weight. */
static tpu_status_t bce_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_type t;
  tpu_hlo_value d = grad_diff(c, &t);
  tpu_hlo_value x = tpu_lower_operand(c, 1, t.dtype, &t);
  tpu_hlo_value g = scaled_grad(c, &t, tpu_lower_int(c, 4, REDUCTION_MEAN), 1.0);
  tpu_hlo_value denom = tpu_hlo_binary(B, TPU_HLO_MAX, mul(c, sub(c, k(c, x, 1.0), x), x), k(c, x, 1e-12));
  tpu_hlo_value grad = dvd(c, mul(c, g, d), denom);
  if (!tpu_lower_is_none(c, 3)) grad = mul(c, grad, tpu_lower_operand(c, 3, t.dtype, &t));
  tpu_lower_set_output(c, 0, grad);
  return NULL;
}

/* --- rows of a matrix (pdist, embedding bags) -------------------------------------------- */

/* Rows (dim 0) of the [R, M] value |x| at the [n] s64 positions |at|
 * (clamped by the gather: callers mask what lies outside). */
static tpu_hlo_value rows_at(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value at) {
  const tpu_hlo_type xt = *tpu_hlo_type_of(B, x);
  int64_t n = tpu_hlo_type_of(B, at)->dims[0], idims[2] = {n, 1}, slice[2] = {1, xt.dims[1]};
  int64_t dims[2] = {n, xt.dims[1]};
  tpu_hlo_type rt = tpu_hlo_make_type(xt.dtype, 2, dims);
  if (n == 0 || xt.dims[0] == 0) return tpu_hlo_const_f64(B, &rt, 0.0);
  tpu_hlo_gather_dims g = {.num_offset = 1, .offset_dims = {1}, .num_collapsed = 1, .collapsed_slice_dims = {0},
                           .num_start_map = 1, .start_index_map = {0}, .index_vector_dim = 1};
  return tpu_hlo_gather(B, x, tpu_hlo_reshape(B, at, 2, idims), &g, slice, &rt);
}

/* The [n, M] rows |u| combined (|op|) into the rows |at| of |into|. */
static tpu_hlo_value rows_into(tpu_lower_ctx *c, tpu_hlo_value into, tpu_hlo_value at, tpu_hlo_value u,
                               tpu_hlo_binary_t op) {
  int64_t n = tpu_hlo_type_of(B, at)->dims[0], idims[2] = {n, 1};
  if (n == 0 || tpu_hlo_type_numel(tpu_hlo_type_of(B, into)) == 0) return into;
  tpu_hlo_scatter_dims sd = {.num_update_window = 1, .update_window_dims = {1}, .num_inserted = 1,
                             .inserted_window_dims = {0}, .num_to_operand = 1,
                             .scatter_dims_to_operand_dims = {0}, .index_vector_dim = 1};
  tpu_hlo_region body;
  tpu_hlo_region_binary(B, op, tpu_hlo_dtype(B, into), &body);
  return tpu_hlo_scatter(B, into, tpu_hlo_reshape(B, at, 2, idims), u, &sd, &body, false);
}

/* --- distances ----------------------------------------------------------------------- */

/* The row pairs i < j of pdist in PyTorch's order, as positions into the
 * N rows: |first| picks i, else j. */
static tpu_hlo_value pair_rows(tpu_lower_ctx *c, int64_t n, bool first, tpu_status_t *st) {
  int64_t count = n * (n - 1) / 2;
  int64_t *rows = malloc((size_t)(count > 0 ? count : 1) * sizeof *rows);
  if (rows == NULL) {
    *st = tpu_lower_error(c, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    return TPU_HLO_NONE;
  }
  for (int64_t i = 0, kk = 0; i < n; i++)
    for (int64_t j = i + 1; j < n; j++) rows[kk++] = first ? i : j;
  tpu_hlo_value v = tpu_hlo_const_i64_list(B, rows, (int)count);
  free(rows);
  return v;
}

/* The p-norm of every row of the [rows, M] value |d| (p = 0 counts the
 * nonzeros, p = inf takes the largest magnitude). */
static tpu_hlo_value row_norms(tpu_lower_ctx *c, tpu_hlo_value d, double p) {
  static const int64_t row = 1;
  tpu_hlo_value a = un(c, TPU_HLO_ABS, d), r;
  if (p == 0.0) return sum(c, tpu_hlo_convert(B, cmp(c, TPU_HLO_NE, d, k(c, d, 0.0)), tpu_hlo_dtype(B, d)), &row, 1);
  if (isinf(p)) { /* of no columns: 0 */
    r = tpu_lower_reduce(B, a, TPU_HLO_MAX, &row, 1);
    return tpu_hlo_binary(B, TPU_HLO_MAX, r, k(c, r, 0.0));
  }
  if (p == 1.0) return sum(c, a, &row, 1);
  if (p == 2.0) return un(c, TPU_HLO_SQRT, sum(c, mul(c, d, d), &row, 1));
  r = sum(c, tpu_hlo_binary(B, TPU_HLO_POW, a, k(c, a, p)), &row, 1);
  return tpu_hlo_binary(B, TPU_HLO_POW, r, k(c, r, 1.0 / p));
}

/* x[i] - x[j] for every pair: [K, M]. */
static tpu_hlo_value pair_diffs(tpu_lower_ctx *c, tpu_hlo_value x, tpu_status_t *st) {
  int64_t n = tpu_hlo_type_of(B, x)->dims[0];
  return sub(c, rows_at(c, x, pair_rows(c, n, true, st)), rows_at(c, x, pair_rows(c, n, false, st)));
}

static tpu_status_t pdist_dtype_check(tpu_lower_ctx *c, int i) {
  tpu_dtype_t t = c->args[i].dtype;
  if (t == TPU_F32 || t == TPU_F64) return NULL;
  return tpu_lower_error(c, TPU_ERR_NOT_IMPLEMENTED, "\"pdist\" not implemented for '%s'", tpu_dtype_scalar_type(t));
}

/* _pdist_forward(self, p): the p-norm of every row difference (p = 0
 * counts the nonzeros, p = inf takes the largest). */
static tpu_status_t pdist_rule(tpu_lower_ctx *c) {
  tpu_status_t st = pdist_dtype_check(c, 0);
  if (st != NULL) return st;
  double p = tpu_lower_float(c, 1, 2.0);
  tpu_hlo_value d = pair_diffs(c, tpu_lower_tensor(c, 0), &st);
  if (st != NULL) return st;
  return done(c, row_norms(c, d, p));
}

/* _pdist_backward(grad, self, p, pdist): each pair's gradient with respect
 * to its difference (PyTorch's per-norm formulas, 0 where the distance is
 * 0), added to row i and subtracted from row j. */
static tpu_status_t pdist_backward_rule(tpu_lower_ctx *c) {
  tpu_status_t st = pdist_dtype_check(c, 1);
  if (st != NULL) return st;
  double p = tpu_lower_float(c, 2, 2.0);
  tpu_hlo_value x = tpu_lower_tensor(c, 1), d = pair_diffs(c, x, &st);
  if (st != NULL) return st;
  const tpu_hlo_type dt = *tpu_hlo_type_of(B, d), xt = *tpu_hlo_type_of(B, x);
  static const int64_t pairs = 0;
  tpu_hlo_value g = tpu_hlo_broadcast_in_dim(B, tpu_lower_tensor(c, 0), &dt, &pairs);
  tpu_hlo_value dist = tpu_hlo_broadcast_in_dim(B, tpu_lower_tensor(c, 3), &dt, &pairs);
  tpu_hlo_value zero = k(c, d, 0.0), a = un(c, TPU_HLO_ABS, d), sign = un(c, TPU_HLO_SIGN, d), r;
  tpu_hlo_value at_zero = cmp(c, TPU_HLO_EQ, dist, zero);
  if (p == 0.0) r = zero;
  else if (p == 1.0) r = mul(c, g, sign);
  else if (isinf(p)) r = sel(c, cmp(c, TPU_HLO_EQ, a, dist), mul(c, g, sign), zero);
  else if (p == 2.0) r = sel(c, at_zero, zero, dvd(c, mul(c, g, d), dist));
  else {
    tpu_hlo_value scale = dvd(c, g, tpu_hlo_binary(B, TPU_HLO_POW, dist, k(c, d, p - 1.0)));
    if (p < 2.0) r = mul(c, mul(c, sign, tpu_hlo_binary(B, TPU_HLO_POW, a, k(c, d, p - 1.0))), scale);
    else r = mul(c, mul(c, d, tpu_hlo_binary(B, TPU_HLO_POW, a, k(c, d, p - 2.0))), scale);
    r = sel(c, at_zero, zero, r);
    if (p < 1.0) r = sel(c, cmp(c, TPU_HLO_EQ, d, zero), zero, r);
  }
  tpu_hlo_value idx[2] = {pair_rows(c, xt.dims[0], true, &st), pair_rows(c, xt.dims[0], false, &st)};
  tpu_hlo_value upd[2] = {r, neg(c, r)};
  if (st != NULL) return st;
  tpu_hlo_value at = tpu_hlo_concatenate(B, idx, 2, 0);
  return done(c, rows_into(c, tpu_hlo_const_f64(B, &xt, 0.0), at, tpu_hlo_concatenate(B, upd, 2, 0), TPU_HLO_ADD));
}

/* embedding_renorm(self, indices, max_norm, norm_type): every row of self
 * that indices name whose norm (rounded to self's dtype, as CPU's row.norm)
 * exceeds max_norm, scaled by max_norm / (norm + 1e-7). */
static tpu_status_t embedding_renorm_rule(tpu_lower_ctx *c) {
  static const int64_t cols = 1;
  tpu_hlo_type wt = arg_type(c, 0, tpu_lower_opmath(c->args[0].dtype));
  if (wt.rank != 2 || tpu_hlo_type_numel(&wt) == 0) return done(c, tpu_lower_tensor(c, 0));
  tpu_hlo_value w = tensor_as(c, 0, wt.dtype);
  tpu_hlo_value norm = row_norms(c, w, tpu_lower_float(c, 3, 2.0));
  norm = tpu_hlo_convert(B, tpu_hlo_convert(B, norm, c->args[0].dtype), wt.dtype);
  int64_t n = 1;
  for (int i = 0; i < c->args[1].rank; i++) n *= c->args[1].sizes[i];
  tpu_hlo_type named_t = tpu_hlo_make_type(TPU_BOOL, 1, wt.dims);
  tpu_hlo_value named = tpu_hlo_const_f64(B, &named_t, 0.0);
  if (n > 0) {
    int64_t idims[2] = {n, 1};
    tpu_hlo_type ut = tpu_hlo_make_type(TPU_BOOL, 1, &n);
    tpu_hlo_scatter_dims sd = {.num_inserted = 1, .inserted_window_dims = {0}, .num_to_operand = 1,
                               .scatter_dims_to_operand_dims = {0}, .index_vector_dim = 1};
    named = tpu_hlo_scatter(B, named, tpu_hlo_reshape(B, tensor_as(c, 1, TPU_S64), 2, idims),
                            tpu_hlo_const_f64(B, &ut, 1.0), &sd, NULL, false);
  }
  double max_norm = tpu_lower_float(c, 2, 1.0);
  tpu_hlo_value over = and_(c, named, cmp(c, TPU_HLO_GT, norm, k(c, norm, max_norm)));
  tpu_hlo_value scale = sel(c, over, dvd(c, k(c, norm, max_norm), add(c, norm, k(c, norm, 1e-7))), k(c, norm, 1.0));
  return done(c, mul(c, w, expand(c, scale, &wt, &cols, 1)));
}

/* --- weight norm ------------------------------------------------------------------ */

/* _weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim)
 * -> (grad_v, grad_g), w = v * g / |v| with the norm over every dim but dim
 * (the first or the last; the saved norms and g are shaped to broadcast):
 * per slice, sum = <grad_w, v>, grad_g = sum / norm, and with a = g / norm,
 * b = a * grad_g / norm, grad_v = a * grad_w - b * v: PyTorch's CPU kernel,
 * in the opmath type (its norms are float32 for half types). */
static tpu_status_t weight_norm_backward_rule(tpu_lower_ctx *c) {
  const tpu_lower_arg *v = &c->args[1], *norms = &c->args[3];
  const int dim = tpu_lower_wrap_dim(tpu_lower_int(c, 4, 0), v->rank);
  const tpu_dtype_t acc = tpu_lower_opmath(v->dtype);
  int64_t others[MAXR];
  int n = 0;
  for (int d = 0; d < v->rank; d++)
    if (d != dim) others[n++] = d;
  const tpu_hlo_type t = arg_type(c, 1, acc), slices = arg_type(c, 3, acc);
  tpu_hlo_value gw = tensor_as(c, 0, acc), x = tensor_as(c, 1, acc), norm = tensor_as(c, 3, acc);
  tpu_hlo_value per = tpu_hlo_reshape(B, sum(c, mul(c, gw, x), others, n), norms->rank, norms->sizes);
  tpu_hlo_value grad_g = dvd(c, per, norm);
  tpu_hlo_value a = dvd(c, tpu_lower_operand(c, 2, acc, &slices), norm), b = dvd(c, mul(c, a, grad_g), norm);
  tpu_hlo_value grad_v = sub(c, mul(c, tpu_hlo_broadcast_to(B, a, &t), gw), mul(c, tpu_hlo_broadcast_to(B, b, &t), x));
  tpu_lower_set_output(c, 0, grad_v);
  tpu_lower_set_output(c, 1, grad_g);
  return NULL;
}

/* --- embedding bags --------------------------------------------------------------- */

enum { BAG_SUM, BAG_MEAN, BAG_MAX };

/* Each of |n| indices' bag (S64 [n]): how many of the first |bags| offsets
 * are <= its position, less 1 (-1 before the first offset). */
static tpu_hlo_value bag_of(tpu_lower_ctx *c, tpu_hlo_value offsets, int64_t n, int64_t bags) {
  static const int64_t entry = 1, first_dim = 0;
  tpu_hlo_type it = tpu_hlo_make_type(TPU_S64, 1, &n);
  if (bags == 0 || n == 0) return tpu_hlo_const_i64(B, &it, -1);
  int64_t pdims[2] = {n, bags};
  tpu_hlo_type pt = tpu_hlo_make_type(TPU_S64, 2, pdims);
  tpu_hlo_value pos = tpu_hlo_iota(B, &it, 0);
  tpu_hlo_value starts = tpu_hlo_broadcast_in_dim(B, tpu_hlo_slice_dim(B, offsets, 0, 0, bags, 1), &pt, &entry);
  tpu_hlo_value le = cmp(c, TPU_HLO_LE, starts, tpu_hlo_broadcast_in_dim(B, pos, &pt, &first_dim));
  return sub(c, sum(c, tpu_hlo_convert(B, le, TPU_S64), &entry, 1), k(c, pos, 1.0));
}

/* _embedding_bag / _embedding_bag_forward_only(weight, indices, offsets,
 *     scale_grad_by_freq, mode, sparse, per_sample_weights?, include_last_offset,
 *     padding_idx) -> (output, offset2bag, bag_size, max_indices): bag b sums
 * (weighted per sample), averages or takes the largest of the weight rows
 * its indices name (from offsets[b] to the next offset), skipping
 * padding_idx; an empty bag is 0. The other outputs have the shapes PyTorch's
 * meta function gives a non-CPU device: each index's bag, each bag's count,
 * and each maximum's first row (-1 for none). */
static tpu_status_t embedding_bag_rule(tpu_lower_ctx *c) {
  static const int64_t first_dim = 0;
  int64_t mode = tpu_lower_int(c, 4, BAG_SUM), pad = tpu_lower_int(c, 8, -1);
  int64_t n = c->args[1].sizes[0], num_offsets = c->args[2].sizes[0], bags = OUT->dims[0];
  tpu_dtype_t dt = tpu_lower_opmath(c->args[0].dtype);
  tpu_hlo_type it = tpu_hlo_make_type(TPU_S64, 1, &n);
  tpu_hlo_value idx = tensor_as(c, 1, TPU_S64), offsets = tensor_as(c, 2, TPU_S64);
  tpu_hlo_value in_range = and_(c, cmp(c, TPU_HLO_GE, idx, k(c, idx, 0.0)),
                                cmp(c, TPU_HLO_LT, idx, k(c, idx, (double)c->args[0].sizes[0])));
  /* (CPU's message names the index and its value) */
  tpu_lower_require(c, all(c, in_range), TPU_ERR_RUNTIME, "embedding_bag: an index is not in the valid range");
  tpu_hlo_value pos = tpu_hlo_iota(B, &it, 0), bag = bag_of(c, offsets, n, bags);
  tpu_lower_set_output(c, 1, bag);
  tpu_hlo_value valid = and_(c, cmp(c, TPU_HLO_GE, bag, k(c, bag, 0.0)), in_range);
  if (bags < num_offsets && n > 0) { /* include_last_offset: the last offset ends the last bag */
    tpu_hlo_value end = tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, offsets, 0, bags, bags + 1, 1), 0, NULL);
    valid = and_(c, valid, cmp(c, TPU_HLO_LT, pos, tpu_hlo_broadcast_to(B, end, &it)));
  }
  if (pad >= 0) valid = and_(c, valid, cmp(c, TPU_HLO_NE, idx, k(c, idx, (double)pad)));
  bag = sel(c, valid, bag, k(c, bag, 0.0));
  tpu_hlo_value rows = rows_at(c, tensor_as(c, 0, dt), sel(c, valid, idx, k(c, idx, 0.0)));
  tpu_hlo_type rt = *tpu_hlo_type_of(B, rows), ot = *OUT, vt = rt;
  ot.dtype = dt;
  vt.dtype = TPU_BOOL;
  tpu_hlo_value valid_rows = tpu_hlo_broadcast_in_dim(B, valid, &vt, &first_dim);
  /* counts as a [bags, 1] value */
  int64_t n1[2] = {n, 1}, b1[2] = {bags, 1};
  tpu_hlo_type ct = tpu_hlo_make_type(TPU_S64, 2, b1);
  tpu_hlo_value ones = tpu_hlo_convert(B, tpu_hlo_reshape(B, valid, 2, n1), TPU_S64);
  tpu_hlo_value count = rows_into(c, tpu_hlo_const_i64(B, &ct, 0), bag, ones, TPU_HLO_ADD);
  tpu_hlo_value count_f = tpu_hlo_broadcast_in_dim(B, tpu_hlo_reshape(B, tpu_hlo_convert(B, count, dt), 1, &bags), &ot,
                                                   &first_dim);
  tpu_hlo_value zero_rows = tpu_hlo_const_f64(B, &rt, 0.0), out;
  if (mode == BAG_MAX) {
    tpu_hlo_value u = sel(c, valid_rows, rows, tpu_hlo_const_f64(B, &rt, -INFINITY));
    out = rows_into(c, tpu_hlo_const_f64(B, &ot, -INFINITY), bag, u, TPU_HLO_MAX);
    out = sel(c, cmp(c, TPU_HLO_GT, count_f, k(c, count_f, 0.0)), out, tpu_hlo_const_f64(B, &ot, 0.0));
    /* the first index reaching its bag's maximum, per column */
    tpu_hlo_type pt = rt;
    pt.dtype = TPU_S64;
    tpu_hlo_value hit = and_(c, valid_rows, cmp(c, TPU_HLO_EQ, rows, rows_at(c, out, bag)));
    tpu_hlo_value at = sel(c, hit, tpu_hlo_broadcast_in_dim(B, pos, &pt, &first_dim), tpu_hlo_const_i64(B, &pt, n));
    tpu_hlo_type mt = ot;
    mt.dtype = TPU_S64;
    tpu_hlo_value first = rows_into(c, tpu_hlo_const_i64(B, &mt, n), bag, at, TPU_HLO_MIN);
    int64_t flat = tpu_hlo_type_numel(&mt);
    tpu_hlo_value picked = rows_at(c, tpu_hlo_reshape(B, idx, 2, n1), tpu_hlo_reshape(B, first, 1, &flat));
    picked = tpu_hlo_reshape(B, picked, 2, mt.dims);
    tpu_lower_set_output(c, 3, sel(c, cmp(c, TPU_HLO_LT, first, k(c, first, (double)n)), picked, k(c, first, -1.0)));
  } else {
    tpu_hlo_value u = rows;
    if (!tpu_lower_is_none(c, 6)) u = mul(c, u, tpu_hlo_broadcast_in_dim(B, tensor_as(c, 6, dt), &rt, &first_dim));
    out = rows_into(c, tpu_hlo_const_f64(B, &ot, 0.0), bag, sel(c, valid_rows, u, zero_rows), TPU_HLO_ADD);
    if (mode == BAG_MEAN) out = dvd(c, out, tpu_hlo_binary(B, TPU_HLO_MAX, count_f, k(c, count_f, 1.0)));
    set_zeros(c, 3);
  }
  tpu_lower_set_output(c, 0, out);
  int64_t lo = 0, hi = num_offsets - bags, interior = 0;
  tpu_hlo_value sizes = tpu_hlo_reshape(B, count, 1, &bags);
  tpu_lower_set_output(c, 2, tpu_hlo_pad(B, sizes, tpu_hlo_scalar_i64(B, TPU_S64, 0), &lo, &hi, &interior));
  return NULL;
}

/* The offset2bag a backward was given, or (where the forward left it empty,
 * as PyTorch's CPU forward does for some modes) one made from the offsets
 * (argument |offsets|, -1 for none): S64 [n]. */
static tpu_hlo_value given_bags(tpu_lower_ctx *c, int arg, int offsets, int64_t n, int64_t bags) {
  if (c->args[arg].sizes[0] == n || n == 0) return tensor_as(c, arg, TPU_S64);
  if (offsets < 0) return tpu_hlo_fail(B, TPU_ERR_RUNTIME, "%s: offset2bag has %lld entries for %lld indices", c->op,
                                       (long long)c->args[arg].sizes[0], (long long)n);
  return bag_of(c, tensor_as(c, offsets, TPU_S64), n, bags);
}

/* Where index i (of S64 |idx| [n], in bag |bag|) counts for a backward: in
 * a bag, and not padding_idx |pad| (-1: none). */
static tpu_hlo_value counted(tpu_lower_ctx *c, tpu_hlo_value idx, tpu_hlo_value bag, int64_t pad) {
  tpu_hlo_value valid = cmp(c, TPU_HLO_GE, bag, k(c, bag, 0.0));
  return pad < 0 ? valid : and_(c, valid, cmp(c, TPU_HLO_NE, idx, k(c, idx, (double)pad)));
}

/* Argument positions of the two dense backwards (c->data; -1: absent). */
typedef struct bag_backward_args {
  int offsets, offset2bag, bag_size, max_indices, by_freq, mode, sparse, weights, pad;
} bag_backward_args;
static const bag_backward_args bag_backward[] = {
    /* _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
     *     scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx) */
    {2, 3, 4, 5, 7, 8, 9, 10, 11},
    /* _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
     *     scale_grad_by_freq, mode, per_sample_weights, padding_idx) */
    {-1, 2, 3, 4, 6, 7, -1, 8, 9},
};

/* The weight's gradient of embedding_bag, [num_weights, D]: PyTorch's CPU
 * kernel. sum/mean: each index's row gets its bag's gradient, times its
 * per-sample weight, over its bag's size (mean) and over how often the index
 * occurs (scale_grad_by_freq); padding_idx gets nothing. max: each bag's
 * gradient goes, column by column, to the row that held the maximum. */
static tpu_status_t embedding_bag_backward_rule(tpu_lower_ctx *c) {
  static const int64_t first_dim = 0;
  const bag_backward_args *a = &bag_backward[c->data];
  if (a->sparse >= 0 && tpu_lower_bool(c, a->sparse, false))
    return tpu_lower_error(c, TPU_ERR_NOT_IMPLEMENTED, "sparse gradients (sparse=True) are not supported on tpu");
  const int64_t mode = tpu_lower_int(c, a->mode, BAG_SUM), pad = tpu_lower_int(c, a->pad, -1);
  const int64_t n = c->args[1].sizes[0], bags = c->args[0].sizes[0], d = c->args[0].sizes[1];
  const int64_t rows_n = OUT->dims[0];
  const tpu_dtype_t dt = tpu_lower_opmath(OUT->dtype);
  tpu_hlo_type gt = *OUT;
  gt.dtype = dt;
  tpu_hlo_value zero = tpu_hlo_const_f64(B, &gt, 0.0), grad = tensor_as(c, 0, dt);
  if (mode == BAG_MAX) { /* element (b, j) of grad to (max_indices[b, j], j), in a flat view */
    const int64_t flat = bags * d, f2[2] = {flat, 1}, bd[2] = {bags, d}, all2[2] = {rows_n * d, 1};
    tpu_hlo_type ft = tpu_hlo_make_type(TPU_S64, 1, &flat), bt = tpu_hlo_make_type(TPU_S64, 2, bd);
    tpu_hlo_value at = tpu_hlo_reshape(B, tensor_as(c, a->max_indices, TPU_S64), 1, &flat);
    tpu_hlo_value col = tpu_hlo_reshape(B, tpu_hlo_iota(B, &bt, 1), 1, &flat);
    tpu_hlo_value has = cmp(c, TPU_HLO_GE, at, tpu_hlo_const_i64(B, &ft, 0));
    tpu_hlo_value to = sel(c, has, add(c, mul(c, at, tpu_hlo_const_i64(B, &ft, d)), col), tpu_hlo_const_i64(B, &ft, 0));
    tpu_hlo_value u = tpu_hlo_reshape(B, grad, 2, f2);
    u = sel(c, tpu_hlo_reshape(B, has, 2, f2), u, k(c, u, 0.0));
    return done(c, tpu_hlo_reshape(B, rows_into(c, tpu_hlo_reshape(B, zero, 2, all2), to, u, TPU_HLO_ADD), 2, gt.dims));
  }
  tpu_hlo_value idx = tensor_as(c, 1, TPU_S64);
  tpu_hlo_value bag = given_bags(c, a->offset2bag, a->offsets, n, bags);
  tpu_hlo_type it = tpu_hlo_make_type(TPU_S64, 1, &n), st = tpu_hlo_make_type(dt, 1, &n);
  tpu_hlo_value valid = counted(c, idx, bag, pad), none = tpu_hlo_const_i64(B, &it, 0);
  bag = sel(c, valid, bag, none);
  tpu_hlo_value row = sel(c, valid, idx, none); /* the weight row each index's gradient goes to */
  tpu_hlo_value scale = sel(c, valid, tpu_hlo_const_f64(B, &st, 1.0), tpu_hlo_const_f64(B, &st, 0.0));
  if (!tpu_lower_is_none(c, a->weights)) scale = mul(c, scale, tensor_as(c, a->weights, dt));
  if (mode == BAG_MEAN) { /* over the bag's size (an empty bag has no indices) */
    tpu_hlo_value size = tpu_hlo_convert(B, tensor_as(c, a->bag_size, TPU_S64), dt);
    const int64_t s1[2] = {c->args[a->bag_size].sizes[0], 1};
    tpu_hlo_value per = tpu_hlo_reshape(B, rows_at(c, tpu_hlo_reshape(B, size, 2, s1), bag), 1, &n);
    scale = dvd(c, scale, tpu_hlo_binary(B, TPU_HLO_MAX, per, tpu_hlo_const_f64(B, &st, 1.0)));
  }
  if (tpu_lower_bool(c, a->by_freq, false)) { /* over the index's count among all indices */
    int64_t r1[2] = {rows_n, 1}, n1[2] = {n, 1};
    tpu_hlo_type ct = tpu_hlo_make_type(dt, 2, r1);
    tpu_hlo_value safe = sel(c, cmp(c, TPU_HLO_GE, idx, tpu_hlo_const_i64(B, &it, 0)), idx,
                             tpu_hlo_const_i64(B, &it, rows_n));
    tpu_hlo_value counts = rows_into(c, tpu_hlo_const_f64(B, &ct, 0.0), safe,
                                     tpu_hlo_reshape(B, tpu_hlo_const_f64(B, &st, 1.0), 2, n1), TPU_HLO_ADD);
    tpu_hlo_value per = tpu_hlo_reshape(B, rows_at(c, counts, row), 1, &n);
    scale = dvd(c, scale, tpu_hlo_binary(B, TPU_HLO_MAX, per, tpu_hlo_const_f64(B, &st, 1.0)));
  }
  tpu_hlo_value rows = rows_at(c, grad, bag);
  rows = mul(c, rows, tpu_hlo_broadcast_in_dim(B, scale, tpu_hlo_type_of(B, rows), &first_dim));
  return done(c, rows_into(c, zero, row, rows, TPU_HLO_ADD));
}

/* _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets,
 * offset2bag, mode, padding_idx) -> [n]: each index's dot of its bag's
 * gradient with its weight row (0 for padding_idx); mode sum only, as on CPU. */
static tpu_status_t embedding_bag_weights_backward_rule(tpu_lower_ctx *c) {
  static const int64_t cols = 1;
  if (tpu_lower_int(c, 5, BAG_SUM) != BAG_SUM)
    return tpu_lower_error(c, TPU_ERR_RUNTIME,
                           "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  const int64_t pad = tpu_lower_int(c, 6, -1), n = c->args[2].sizes[0], bags = c->args[0].sizes[0];
  const tpu_dtype_t dt = tpu_lower_opmath(OUT->dtype);
  tpu_hlo_type it = tpu_hlo_make_type(TPU_S64, 1, &n), st = tpu_hlo_make_type(dt, 1, &n);
  tpu_hlo_value idx = tensor_as(c, 2, TPU_S64), bag = given_bags(c, 4, 3, n, bags);
  tpu_hlo_value valid = counted(c, idx, bag, pad), zeros = tpu_hlo_const_i64(B, &it, 0);
  tpu_hlo_value dots = sum(c, mul(c, rows_at(c, tensor_as(c, 0, dt), sel(c, valid, bag, zeros)),
                                  rows_at(c, tensor_as(c, 1, dt), sel(c, valid, idx, zeros))), &cols, 1);
  return done(c, sel(c, valid, dots, tpu_hlo_const_f64(B, &st, 0.0)));
}

/* --- activations ------------------------------------------------------------------ */

/* hardshrink_backward / softshrink_backward(grad_out, self, lambd): the
 * gradient passes outside [-lambd, lambd] (NaN passes too, as on CPU). */
static tpu_status_t shrink_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_type t = *OUT;
  t.dtype = tpu_lower_opmath(t.dtype);
  tpu_hlo_value x = tpu_lower_operand(c, 1, t.dtype, &t), l = tpu_lower_operand(c, 2, t.dtype, &t);
  tpu_hlo_value inside = and_(c, cmp(c, TPU_HLO_GE, x, neg(c, l)), cmp(c, TPU_HLO_LE, x, l));
  return done(c, sel(c, inside, tpu_hlo_const_f64(B, &t, 0.0), tpu_lower_operand(c, 0, t.dtype, &t)));
}

/* --- the table --------------------------------------------------------------------- */

const tpu_lower_rule tpu_rules_nn[] = {
    {{"native_layer_norm", "native_layer_norm.out"}, layer_norm_rule, 0, 0},
    {{"native_layer_norm_backward", "native_layer_norm_backward.out"}, layer_norm_backward_rule, 0, 0},
    {{"native_group_norm", "native_group_norm.out"}, group_norm_rule, 0, 0},
    {{"native_group_norm_backward", "native_group_norm_backward.out"}, group_norm_backward_rule, 0, 0},
    /* _native_batch_norm_legit.out, .no_stats_out and _batch_norm_with_update.out
     * have no meta function in PyTorch to size their outputs: not served. */
    {{"native_batch_norm", "native_batch_norm.out", "_native_batch_norm_legit"}, batch_norm_rule, 0, BN_NATIVE},
    {{"_native_batch_norm_legit.no_stats"}, batch_norm_rule, 0, BN_NO_STATS},
    {{"_native_batch_norm_legit_no_training", "_native_batch_norm_legit_no_training.out"},
     batch_norm_rule, 0, BN_NO_TRAINING},
    {{"_batch_norm_with_update"}, batch_norm_rule, 0, BN_WITH_UPDATE},
    {{"native_batch_norm_backward", "native_batch_norm_backward.out", "batch_norm_backward"},
     batch_norm_backward_rule, 0, 0},
    {{"nll_loss_forward", "nll_loss_forward.output", "nll_loss2d_forward", "nll_loss2d_forward.output"},
     nll_loss_rule, 0, 0},
    {{"nll_loss_backward", "nll_loss_backward.grad_input", "nll_loss2d_backward", "nll_loss2d_backward.grad_input"},
     nll_loss_backward_rule, 0, 0},
    {{"multi_margin_loss", "multi_margin_loss.out"}, multi_margin_loss_rule, TPU_RULE_CONST_SCALARS, 0},
    {{"multi_margin_loss_backward", "multi_margin_loss_backward.grad_input"},
     multi_margin_loss_backward_rule, TPU_RULE_CONST_SCALARS, 0},
    {{"multilabel_margin_loss_forward", "multilabel_margin_loss_forward.output"}, multilabel_margin_loss_rule, 0, 0},
    {{"multilabel_margin_loss_backward", "multilabel_margin_loss_backward.grad_input"},
     multilabel_margin_loss_backward_rule, 0, 0},
    {{"mse_loss", "mse_loss.out"}, mse_loss_rule, 0, 0},
    {{"mse_loss_backward", "mse_loss_backward.grad_input"}, mse_loss_backward_rule, 0, 0},
    {{"smooth_l1_loss", "smooth_l1_loss.out"}, smooth_l1_loss_rule, 0, 0},
    {{"smooth_l1_loss_backward", "smooth_l1_loss_backward.grad_input"}, smooth_l1_backward_rule, 0, 0},
    {{"huber_loss", "huber_loss.out"}, huber_loss_rule, 0, 0},
    {{"huber_loss_backward", "huber_loss_backward.out"}, smooth_l1_backward_rule, 0, 1},
    {{"binary_cross_entropy", "binary_cross_entropy.out"}, bce_rule, 0, 0},
    {{"binary_cross_entropy_backward", "binary_cross_entropy_backward.grad_input"}, bce_backward_rule, 0, 0},
    {{"_pdist_forward"}, pdist_rule, 0, 0},
    {{"_embedding_bag", "_embedding_bag.out", "_embedding_bag_forward_only", "_embedding_bag_forward_only.out"},
     embedding_bag_rule, 0, 0},
    {{"embedding_renorm", "embedding_renorm_", "embedding_renorm.out"}, embedding_renorm_rule, 0, 0},
    {{"_embedding_bag_backward"}, embedding_bag_backward_rule, 0, 0},
    {{"_embedding_bag_dense_backward", "_embedding_bag_dense_backward.out"}, embedding_bag_backward_rule, 0, 1},
    {{"_embedding_bag_per_sample_weights_backward", "_embedding_bag_per_sample_weights_backward.out"},
     embedding_bag_weights_backward_rule, 0, 0},
    {{"_weight_norm_interface_backward", "_weight_norm_interface_backward.out"}, weight_norm_backward_rule, 0, 0},
    {{"_pdist_backward"}, pdist_backward_rule, 0, 0},
    {{"hardshrink_backward", "hardshrink_backward.grad_input"}, shrink_backward_rule, 0, 0},
    {{"softshrink_backward", "softshrink_backward.grad_input"}, shrink_backward_rule, 0, 0},
};
TPU_COUNT_RULES(nn);
