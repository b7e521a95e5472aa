/* The other neural-network rules: pdist, embedding_bag with its backwards
 * and embedding_renorm; weight norm's backward; the shrink activations'
 * backwards. Computed in the input's opmath type (float32 for half types)
 * and rounded once, as PyTorch's CPU kernels accumulate. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "lower/nn.h"

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
  if (p == 0.0) return sum(c, tpu_hlo_convert(B, cmp(c, TPU_HLO_NE, d, const_like(c, d, 0.0)), tpu_hlo_dtype(B, d)), &row, 1);
  if (isinf(p)) { /* of no columns: 0 */
    r = tpu_lower_reduce(B, a, TPU_HLO_MAX, &row, 1);
    return tpu_hlo_binary(B, TPU_HLO_MAX, r, const_like(c, r, 0.0));
  }
  if (p == 1.0) return sum(c, a, &row, 1);
  if (p == 2.0) return un(c, TPU_HLO_SQRT, sum(c, mul(c, d, d), &row, 1));
  r = sum(c, tpu_hlo_binary(B, TPU_HLO_POW, a, const_like(c, a, p)), &row, 1);
  return tpu_hlo_binary(B, TPU_HLO_POW, r, const_like(c, r, 1.0 / p));
}

/* x[i] - x[j] for every pair: [K, M]. */
static tpu_hlo_value pair_diffs(tpu_lower_ctx *c, tpu_hlo_value x, tpu_status_t *st) {
  int64_t n = tpu_hlo_type_of(B, x)->dims[0];
  return sub(c, rows_at(c, x, pair_rows(c, n, true, st)), rows_at(c, x, pair_rows(c, n, false, st)));
}

/* _pdist_forward(self, p): the p-norm of every row difference (p = 0
 * counts the nonzeros, p = inf takes the largest). */
static tpu_status_t pdist_rule(tpu_lower_ctx *c) {
  tpu_status_t st = NULL;
  double p = tpu_lower_float(c, 1, 2.0);
  tpu_hlo_value d = pair_diffs(c, tpu_lower_tensor(c, 0), &st);
  if (st != NULL) return st;
  return done(c, row_norms(c, d, p));
}

/* _pdist_backward(grad, self, p, pdist): each pair's gradient with respect
 * to its difference (PyTorch's per-norm formulas, 0 where the distance is
 * 0), added to row i and subtracted from row j. */
static tpu_status_t pdist_backward_rule(tpu_lower_ctx *c) {
  tpu_status_t st = NULL;
  double p = tpu_lower_float(c, 2, 2.0);
  tpu_hlo_value x = tpu_lower_tensor(c, 1), d = pair_diffs(c, x, &st);
  if (st != NULL) return st;
  const tpu_hlo_type dt = *tpu_hlo_type_of(B, d), xt = *tpu_hlo_type_of(B, x);
  static const int64_t pairs = 0;
  tpu_hlo_value g = tpu_hlo_broadcast_in_dim(B, tpu_lower_tensor(c, 0), &dt, &pairs);
  tpu_hlo_value dist = tpu_hlo_broadcast_in_dim(B, tpu_lower_tensor(c, 3), &dt, &pairs);
  tpu_hlo_value zero = const_like(c, d, 0.0), a = un(c, TPU_HLO_ABS, d), sign = un(c, TPU_HLO_SIGN, d), r;
  tpu_hlo_value at_zero = cmp(c, TPU_HLO_EQ, dist, zero);
  if (p == 0.0) r = zero;
  else if (p == 1.0) r = mul(c, g, sign);
  else if (isinf(p)) r = sel(c, cmp(c, TPU_HLO_EQ, a, dist), mul(c, g, sign), zero);
  else if (p == 2.0) r = sel(c, at_zero, zero, dvd(c, mul(c, g, d), dist));
  else {
    tpu_hlo_value scale = dvd(c, g, tpu_hlo_binary(B, TPU_HLO_POW, dist, const_like(c, d, p - 1.0)));
    if (p < 2.0) r = mul(c, mul(c, sign, tpu_hlo_binary(B, TPU_HLO_POW, a, const_like(c, d, p - 1.0))), scale);
    else r = mul(c, mul(c, d, tpu_hlo_binary(B, TPU_HLO_POW, a, const_like(c, d, p - 2.0))), scale);
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
  tpu_hlo_value over = and_(c, named, cmp(c, TPU_HLO_GT, norm, const_like(c, norm, max_norm)));
  tpu_hlo_value scale = sel(c, over, dvd(c, const_like(c, norm, max_norm), add(c, norm, const_like(c, norm, 1e-7))), const_like(c, norm, 1.0));
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
  const int dim = tpu_lower_wrap_dim(c, tpu_lower_int(c, 4, 0), v->rank);
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
  return sub(c, sum(c, tpu_hlo_convert(B, le, TPU_S64), &entry, 1), const_like(c, pos, 1.0));
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
  tpu_hlo_value in_range = and_(c, cmp(c, TPU_HLO_GE, idx, const_like(c, idx, 0.0)),
                                cmp(c, TPU_HLO_LT, idx, const_like(c, idx, (double)c->args[0].sizes[0])));
  /* (CPU's message names the index and its value) */
  tpu_lower_require(c, all(c, in_range), TPU_ERR_RUNTIME, "embedding_bag: an index is not in the valid range");
  tpu_hlo_value pos = tpu_hlo_iota(B, &it, 0), bag = bag_of(c, offsets, n, bags);
  tpu_lower_set_output(c, 1, bag);
  tpu_hlo_value valid = and_(c, cmp(c, TPU_HLO_GE, bag, const_like(c, bag, 0.0)), in_range);
  if (bags < num_offsets && n > 0) { /* include_last_offset: the last offset ends the last bag */
    tpu_hlo_value end = tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, offsets, 0, bags, bags + 1, 1), 0, NULL);
    valid = and_(c, valid, cmp(c, TPU_HLO_LT, pos, tpu_hlo_broadcast_to(B, end, &it)));
  }
  if (pad >= 0) valid = and_(c, valid, cmp(c, TPU_HLO_NE, idx, const_like(c, idx, (double)pad)));
  bag = sel(c, valid, bag, const_like(c, bag, 0.0));
  tpu_hlo_value rows = rows_at(c, tensor_as(c, 0, dt), sel(c, valid, idx, const_like(c, idx, 0.0)));
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
    out = sel(c, cmp(c, TPU_HLO_GT, count_f, const_like(c, count_f, 0.0)), out, tpu_hlo_const_f64(B, &ot, 0.0));
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
    tpu_lower_set_output(c, 3, sel(c, cmp(c, TPU_HLO_LT, first, const_like(c, first, (double)n)), picked, const_like(c, first, -1.0)));
  } else {
    tpu_hlo_value u = rows;
    if (!tpu_lower_is_none(c, 6)) u = mul(c, u, tpu_hlo_broadcast_in_dim(B, tensor_as(c, 6, dt), &rt, &first_dim));
    out = rows_into(c, tpu_hlo_const_f64(B, &ot, 0.0), bag, sel(c, valid_rows, u, zero_rows), TPU_HLO_ADD);
    if (mode == BAG_MEAN) out = dvd(c, out, tpu_hlo_binary(B, TPU_HLO_MAX, count_f, const_like(c, count_f, 1.0)));
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
  tpu_hlo_value valid = cmp(c, TPU_HLO_GE, bag, const_like(c, bag, 0.0));
  return pad < 0 ? valid : and_(c, valid, cmp(c, TPU_HLO_NE, idx, const_like(c, idx, (double)pad)));
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
    u = sel(c, tpu_hlo_reshape(B, has, 2, f2), u, const_like(c, u, 0.0));
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

const tpu_lower_rule tpu_rules_nn[] = {
    {{"_pdist_forward"}, pdist_rule, 0, 0, {TPU_DTS_F32_F64, 0, "pdist"}},
    {{"_embedding_bag", "_embedding_bag.out", "_embedding_bag_forward_only", "_embedding_bag_forward_only.out"},
     embedding_bag_rule, 0, 0},
    {{"embedding_renorm", "embedding_renorm_", "embedding_renorm.out"}, embedding_renorm_rule, 0, 0},
    {{"_embedding_bag_backward"}, embedding_bag_backward_rule, 0, 0},
    {{"_embedding_bag_dense_backward", "_embedding_bag_dense_backward.out"}, embedding_bag_backward_rule, 0, 1},
    {{"_embedding_bag_per_sample_weights_backward", "_embedding_bag_per_sample_weights_backward.out"},
     embedding_bag_weights_backward_rule, 0, 0},
    {{"_weight_norm_interface_backward", "_weight_norm_interface_backward.out"}, weight_norm_backward_rule, 0, 0},
    {{"_pdist_backward"}, pdist_backward_rule, 0, 0, {TPU_DTS_F32_F64, 1, "pdist"}},
    {{"hardshrink_backward", "hardshrink_backward.grad_input"}, shrink_backward_rule, 0, 0},
    {{"softshrink_backward", "softshrink_backward.grad_input"}, shrink_backward_rule, 0, 0},
};
TPU_COUNT_RULES(nn);
