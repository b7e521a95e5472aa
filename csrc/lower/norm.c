/* Normalization rules: layer, batch and group norm with their backwards.
 *
 * Statistics are computed in the input's opmath type (float32 for half
 * types) and rounded once, as PyTorch's CPU kernels accumulate. Outputs
 * nobody asked for (an output_mask entry that is false, a None running stat)
 * have type INVALID and are not computed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "lower/nn.h"

/* --- layer and group norm ----------------------------------------------------- */

/* Mean and biased variance of |x| over |dims| (reduced). As PyTorch's CPU
 * kernels, an empty row has mean 0 (and variance NaN). */
static void moments(tpu_lower_ctx *c, tpu_hlo_value x, const int64_t *dims, int n, tpu_hlo_value *out_mean,
                    tpu_hlo_value *out_var) {
  tpu_hlo_type xt = *tpu_hlo_type_of(B, x);
  int64_t count = count_of(&xt, dims, n);
  tpu_hlo_value s = sum(c, x, dims, n);
  tpu_hlo_value mean = count == 0 ? const_like(c, s, 0.0) : dvd(c, s, const_like(c, s, (double)count));
  tpu_hlo_value xc = sub(c, x, expand(c, mean, &xt, dims, n));
  *out_mean = mean;
  *out_var = dvd(c, sum(c, mul(c, xc, xc), dims, n), const_like(c, s, (double)count));
}

/* 1 / sqrt(var + eps) */
static tpu_hlo_value inv_std(tpu_lower_ctx *c, tpu_hlo_value var, double eps) {
  return dvd(c, const_like(c, var, 1.0), tpu_hlo_unary(B, TPU_HLO_SQRT, add(c, var, const_like(c, var, eps))));
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
      invstd = sel(c, cmp(c, TPU_HLO_EQ, var, const_like(c, var, 0.0)), const_like(c, var, 0.0), invstd);
    tpu_lower_set_output(c, 1, mean);
    tpu_lower_set_output(c, 2, invstd);
    if (a->stats_out >= 0 && has_stats) {
      /* momentum * batch + (1 - momentum) * running; the variance unbiased */
      double m = tpu_lower_float(c, a->momentum, 0.1);
      tpu_hlo_value unbiased = mul(c, var, const_like(c, var, (double)count / (double)(count - 1)));
      tpu_hlo_value rm = tensor_as(c, a->running_mean, xt.dtype), rv = tensor_as(c, a->running_var, xt.dtype);
      tpu_lower_set_output(c, a->stats_out, add(c, mul(c, const_like(c, mean, m), mean), mul(c, const_like(c, rm, 1.0 - m), rm)));
      tpu_lower_set_output(c, a->stats_out + 1,
                           add(c, mul(c, const_like(c, unbiased, m), unbiased), mul(c, const_like(c, rv, 1.0 - m), rv)));
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
      tpu_hlo_value kk = dvd(c, mul(c, mul(c, dotp, invstd), invstd), const_like(c, dotp, (double)count));
      tpu_hlo_value grad_mean = dvd(c, gsum, const_like(c, gsum, (double)count));
      dy = sub(c, sub(c, g, along(c, grad_mean, &xt, 1)), mul(c, xc, along(c, kk, &xt, 1)));
    }
    tpu_lower_set_output(c, 0, mul(c, dy, along(c, scale, &xt, 1)));
  }
  if (wanted(c, 1)) tpu_lower_set_output(c, 1, mul(c, dotp, invstd));
  if (wanted(c, 2)) tpu_lower_set_output(c, 2, gsum);
  return NULL;
}

const tpu_lower_rule tpu_rules_norm[] = {
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
};
TPU_COUNT_RULES(norm);
