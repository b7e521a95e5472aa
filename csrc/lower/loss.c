/* Loss rules: nll_loss (1-d and 2-d), mse, smooth L1, Huber and binary
 * cross entropy with their backwards; the margin losses.
 *
 * Losses are computed in the input's opmath type (float32 for half types)
 * and rounded once, as PyTorch's CPU kernels accumulate. The class-index
 * losses read each target's element with one gather (XLA clamps an
 * out-of-range target, whose runtime check fails the op); their gradients,
 * dense over the classes, put each target's value where an iota over the
 * class dim equals the target. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "lower/nn.h"

/* --- losses --------------------------------------------------------------------------- */

/* Output 0: the per-element |loss| reduced as |reduction| asks. */
static tpu_status_t reduced(tpu_lower_ctx *c, tpu_hlo_value loss, int64_t reduction) {
  if (reduction != REDUCTION_NONE) {
    tpu_hlo_type t = *tpu_hlo_type_of(B, loss);
    loss = sum_all(c, loss);
    if (reduction == REDUCTION_MEAN) loss = dvd(c, loss, const_like(c, loss, (double)tpu_hlo_type_numel(&t)));
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
  tpu_hlo_value ok = and_(c, cmp(c, TPU_HLO_GE, t, const_like(c, t, 0.0)), cmp(c, TPU_HLO_LT, t, const_like(c, t, (double)xt->dims[cd])));
  *out_kept = TPU_HLO_NONE;
  if (ignore != NULL) {
    *out_kept = cmp(c, TPU_HLO_NE, t, const_like(c, t, (double)*ignore));
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
    return tpu_lower_not_implemented(two_d ? "nll_loss2d_forward_out_frame" : "nll_loss_out_frame", x->dtype);
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
  tpu_hlo_value w = tpu_lower_is_none(c, 2) ? const_like(c, xy, 1.0) : at_class(c, class_weights(c, 2, &xt, cd), t, 0);
  tpu_hlo_value zero = const_like(c, xy, 0.0);
  tpu_hlo_value loss = sel(c, kept, mul(c, neg(c, xy), w), zero);
  tpu_hlo_value total = sum_all(c, sel(c, kept, w, zero));
  if (reduction == REDUCTION_NONE) {
    tpu_lower_set_output(c, 0, loss);
    /* PyTorch's batched kernel leaves total_weight 0 */
    tpu_lower_set_output(c, 1, in->rank == 1 ? total : const_like(c, total, 0.0));
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

/* multi_margin_loss(self, target, p, margin, weight?, reduction): per sample
 * ([C] or [N, C] input), the sum over classes j != y with z = margin - x[y]
 * + x[j] > 0 of z^p * w[y], over C; p is 1 or 2 (the meta function checks). */
static tpu_status_t multi_margin_loss_rule(tpu_lower_ctx *c) {
  tpu_status_t st;
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
  return reduced(c, dvd(c, loss, const_like(c, loss, (double)xt.dims[cd])), tpu_lower_int(c, 5, REDUCTION_MEAN));
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
  tpu_hlo_value h = tpu_lower_float(c, 3, 1.0) == 1.0 ? tpu_hlo_const_f64(B, &xt, 1.0) : mul(c, const_like(c, z, 2.0), z);
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
  tpu_hlo_value end = sel(c, cmp(c, TPU_HLO_EQ, t, const_like(c, t, -1.0)), slots, const_like(c, t, (double)xt->dims[1]));
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
  tpu_status_t st = expect_dtype(c, 1, TPU_S64);
  if (st != NULL) return st;
  tpu_hlo_type xt = margin_rows(c, 0, tpu_lower_opmath(OUT->dtype));
  multilabel_pairs p = multilabel_pairs_of(c, 0, 1, &xt);
  tpu_hlo_value loss = sum(c, sel(c, p.counted, p.z, const_like(c, p.z, 0.0)), pair_dims, 2);
  tpu_lower_set_output(c, 1, tpu_hlo_convert(B, p.is_target, xt.dtype));
  return reduced(c, dvd(c, loss, const_like(c, loss, (double)xt.dims[1])), tpu_lower_int(c, 2, REDUCTION_MEAN));
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
  tpu_hlo_value quad = dvd(c, mul(c, mul(c, const_like(c, z, 0.5), z), z), const_like(c, z, beta));
  tpu_hlo_value loss = sel(c, cmp(c, TPU_HLO_LT, z, const_like(c, z, beta)), quad, sub(c, z, const_like(c, z, 0.5 * beta)));
  return reduced(c, loss, tpu_lower_int(c, 2, REDUCTION_MEAN));
}

/* huber_loss(self, target, reduction, delta): |d| < delta ? 0.5 d^2
 * : delta * (|d| - delta / 2). */
static tpu_status_t huber_loss_rule(tpu_lower_ctx *c) {
  tpu_hlo_type t;
  tpu_hlo_value z = tpu_hlo_unary(B, TPU_HLO_ABS, loss_diff(c, &t));
  double delta = tpu_lower_float(c, 3, 1.0);
  tpu_hlo_value quad = mul(c, mul(c, const_like(c, z, 0.5), z), z);
  tpu_hlo_value lin = mul(c, const_like(c, z, delta), sub(c, z, const_like(c, z, 0.5 * delta)));
  return reduced(c, sel(c, cmp(c, TPU_HLO_LT, z, const_like(c, z, delta)), quad, lin), tpu_lower_int(c, 2, REDUCTION_MEAN));
}

/* smooth_l1_loss_backward / huber_loss_backward(grad_output, self, target,
 * reduction, beta|delta): ±g outside [-beta, beta], inside d * g / beta for
 * smooth L1 and d * g for Huber, whose outside is ±g * delta. */
enum { SMOOTH_L1, HUBER };
static tpu_status_t smooth_l1_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_type t;
  tpu_hlo_value d = grad_diff(c, &t);
  double beta = tpu_lower_float(c, 4, 1.0);
  bool huber = c->data == HUBER;
  tpu_hlo_value g = scaled_grad(c, &t, tpu_lower_int(c, 3, REDUCTION_MEAN), 1.0);
  tpu_hlo_value outside = huber ? mul(c, g, const_like(c, g, beta)) : g;
  tpu_hlo_value inside = huber ? mul(c, d, g) : dvd(c, mul(c, d, g), const_like(c, g, beta));
  tpu_hlo_value r = sel(c, cmp(c, TPU_HLO_GE, d, const_like(c, d, beta)), outside, inside);
  tpu_lower_set_output(c, 0, sel(c, cmp(c, TPU_HLO_LE, d, const_like(c, d, -beta)), neg(c, outside), r));
  return NULL;
}

/* binary_cross_entropy(self, target, weight?, reduction):
 * (t - 1) * max(log1p(-x), -100) - t * max(log(x), -100), times weight. */
static tpu_status_t bce_rule(tpu_lower_ctx *c) {
  tpu_hlo_type t = pair_type(c, 0, 1, tpu_lower_opmath(c->out_types[0].dtype));
  tpu_hlo_value x = tpu_lower_operand(c, 0, t.dtype, &t), y = tpu_lower_operand(c, 1, t.dtype, &t);
  tpu_hlo_value zero = const_like(c, x, 0.0), one = const_like(c, x, 1.0), floor = const_like(c, x, -100.0);
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
  tpu_hlo_value denom = tpu_hlo_binary(B, TPU_HLO_MAX, mul(c, sub(c, const_like(c, x, 1.0), x), x), const_like(c, x, 1e-12));
  tpu_hlo_value grad = dvd(c, mul(c, g, d), denom);
  if (!tpu_lower_is_none(c, 3)) grad = mul(c, grad, tpu_lower_operand(c, 3, t.dtype, &t));
  tpu_lower_set_output(c, 0, grad);
  return NULL;
}

const tpu_lower_rule tpu_rules_loss[] = {
    {{"nll_loss_forward", "nll_loss_forward.output", "nll_loss2d_forward", "nll_loss2d_forward.output"},
     nll_loss_rule, 0, 0},
    {{"nll_loss_backward", "nll_loss_backward.grad_input", "nll_loss2d_backward", "nll_loss2d_backward.grad_input"},
     nll_loss_backward_rule, 0, 0},
    {{"multi_margin_loss", "multi_margin_loss.out"}, multi_margin_loss_rule, TPU_RULE_CONST_SCALARS, 0,
     {TPU_DTS_F32_F64, 0, "multi_margin_loss_cpu_kernel"}},
    {{"multi_margin_loss_backward", "multi_margin_loss_backward.grad_input"},
     multi_margin_loss_backward_rule, TPU_RULE_CONST_SCALARS, 0},
    {{"multilabel_margin_loss_forward", "multilabel_margin_loss_forward.output"}, multilabel_margin_loss_rule, 0, 0,
     {TPU_DTS_F32_F64, 0, "multilabel_margin_loss_forward_out_frame"}},
    {{"multilabel_margin_loss_backward", "multilabel_margin_loss_backward.grad_input"},
     multilabel_margin_loss_backward_rule, 0, 0},
    {{"mse_loss", "mse_loss.out"}, mse_loss_rule, 0, 0},
    {{"mse_loss_backward", "mse_loss_backward.grad_input"}, mse_loss_backward_rule, 0, 0},
    {{"smooth_l1_loss", "smooth_l1_loss.out"}, smooth_l1_loss_rule, 0, 0},
    {{"smooth_l1_loss_backward", "smooth_l1_loss_backward.grad_input"}, smooth_l1_backward_rule, 0, SMOOTH_L1},
    {{"huber_loss", "huber_loss.out"}, huber_loss_rule, 0, 0},
    {{"huber_loss_backward", "huber_loss_backward.out"}, smooth_l1_backward_rule, 0, HUBER},
    {{"binary_cross_entropy", "binary_cross_entropy.out"}, bce_rule, 0, 0},
    {{"binary_cross_entropy_backward", "binary_cross_entropy_backward.grad_input"}, bce_backward_rule, 0, 0},
};
TPU_COUNT_RULES(loss);
