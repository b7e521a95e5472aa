/* Sorting and the ops built on it: sort, topk, kthvalue, median/nanmedian,
 * mode; the running max/min with indices (cummax/cummin); searchsorted and
 * histc.
 *
 * Every sort is one stable stablehlo.sort of (values, iota) in PyTorch's
 * order, where NaN is greater than every number: ascending puts NaNs last,
 * descending first, and equal keys keep their input order. Selections at a
 * per-row position (the median, the mode) pick that position with a one-hot
 * reduce rather than a gather, which keeps the ops rank-generic. */
#include <math.h>

#include "lower/rules.h"

/* Input 0, a 0-dim tensor seen as a one-element vector (its one dim is 0). */
static tpu_hlo_value input_vector(tpu_lower_ctx *c) {
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  return c->args[0].rank == 0 ? tpu_hlo_reshape(B, x, 1, (int64_t[]){1}) : x;
}

/* The dim argument |arg| of input 0 wrapped (0 for a 0-dim input). */
static int dim_arg(const tpu_lower_ctx *c, int arg, int64_t if_none) {
  return tpu_lower_wrap_dim(c, tpu_lower_int(c, arg, if_none), c->args[0].rank);
}

/* A comparator of PyTorch's order on (key, index) pairs: |a| precedes |b|. */
static tpu_hlo_value precedes(tpu_lower_ctx *c, tpu_hlo_value a, tpu_hlo_value b, bool descending) {
  tpu_hlo_value r = cmp(c, descending ? TPU_HLO_GT : TPU_HLO_LT, a, b);
  if (!tpu_dtype_is_float(tpu_hlo_dtype(B, a))) return r;
  tpu_hlo_value nan_first = descending ? a : b, other = descending ? b : a;
  return or_(c, r, and_(c, is_nan(c, nan_first), un(c, TPU_HLO_NOT, is_nan(c, other))));
}

/* |x| stably sorted along |dim| and the s64 input positions of the sorted
 * elements. */
static void sort_dim(tpu_lower_ctx *c, tpu_hlo_value x, int dim, bool descending, tpu_hlo_value *out_values,
                     tpu_hlo_value *out_indices) {
  tpu_hlo_type it = *tpu_hlo_type_of(B, x);
  tpu_dtype_t t = it.dtype;
  it.dtype = TPU_S64;
  tpu_hlo_type s[4] = {tpu_hlo_make_type(t, 0, NULL), tpu_hlo_make_type(t, 0, NULL),
                       tpu_hlo_make_type(TPU_S64, 0, NULL), tpu_hlo_make_type(TPU_S64, 0, NULL)};
  tpu_hlo_value a[4];
  tpu_hlo_region order;
  tpu_hlo_region_begin(B, 4, s, a);
  tpu_hlo_value r = precedes(c, a[0], a[1], descending);
  tpu_hlo_region_end(B, &r, 1, &order);
  tpu_hlo_value xs[2] = {x, tpu_hlo_iota(B, &it, dim)}, sorted[2];
  tpu_hlo_sort(B, xs, 2, dim, true, &order, sorted);
  *out_values = sorted[0];
  *out_indices = sorted[1];
}

/* |x|'s elements at position |pos| along |dim|; |pos| (s64) has |x|'s shape
 * without |dim|. -0.0 is the float sum's identity, so a picked -0.0 and NaN
 * come through unchanged. */
static tpu_hlo_value pick(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value pos, int dim) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, x), it = t;
  it.dtype = TPU_S64;
  int64_t kept[TPU_HLO_MAX_RANK];
  for (int i = 0, j = 0; i < t.rank; i++)
    if (i != dim) kept[j++] = i;
  tpu_hlo_value at = cmp(c, TPU_HLO_EQ, tpu_hlo_iota(B, &it, dim), tpu_hlo_broadcast_in_dim(B, pos, &it, kept));
  bool is_float = tpu_dtype_is_float(t.dtype) || tpu_dtype_is_complex(t.dtype);
  tpu_hlo_value zero = tpu_hlo_const_f64(B, &t, is_float ? -0.0 : 0.0);
  tpu_hlo_binary_t op = t.dtype == TPU_BOOL ? TPU_HLO_OR : TPU_HLO_ADD;
  return tpu_hlo_reduce_simple(B, sel(c, at, x, zero), tpu_hlo_scalar_f64(B, t.dtype, is_float ? -0.0 : 0.0), op,
                               (int64_t[]){dim}, 1);
}

/* The s64 constant |v| shaped like |x| without |dim|. */
static tpu_hlo_value positions(tpu_lower_ctx *c, tpu_hlo_value x, int dim, int64_t v) {
  const tpu_hlo_type *t = tpu_hlo_type_of(B, x);
  tpu_hlo_type pt = tpu_hlo_make_type(TPU_S64, 0, NULL);
  for (int i = 0; i < t->rank; i++)
    if (i != dim) pt.dims[pt.rank++] = t->dims[i];
  return tpu_hlo_const_i64(B, &pt, v);
}

/* --- sort and selection ------------------------------------------------------ */

/* sort.stable(self, *, stable, dim, descending) -> (values, indices); every
 * sort is stable. Complex values have no order. */
static tpu_status_t sort_rule(tpu_lower_ctx *c) {
  if (tpu_dtype_is_complex(c->args[0].dtype))
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "Sort does not support complex dtypes on CPU");
  tpu_hlo_value values, indices;
  sort_dim(c, input_vector(c), dim_arg(c, 2, -1), tpu_lower_bool(c, 3, false), &values, &indices);
  tpu_lower_set_output(c, 0, values);
  tpu_lower_set_output(c, 1, indices);
  return NULL;
}

/* topk(self, k, dim, largest, sorted): the first k of a sort (so always
 * sorted). PyTorch's meta function checks k, as kthvalue's does. */
static tpu_status_t topk_rule(tpu_lower_ctx *c) {
  int dim = dim_arg(c, 2, -1);
  int64_t k = tpu_lower_int(c, 1, 0);
  tpu_hlo_value values, indices;
  sort_dim(c, input_vector(c), dim, tpu_lower_bool(c, 3, true), &values, &indices);
  tpu_lower_set_output(c, 0, tpu_hlo_slice_dim(B, values, dim, 0, k, 1));
  tpu_lower_set_output(c, 1, tpu_hlo_slice_dim(B, indices, dim, 0, k, 1));
  return NULL;
}

/* The sorted element at per-row position |pos| as outputs 0 (value) and 1
 * (index, when the op has it). */
static void set_picked(tpu_lower_ctx *c, tpu_hlo_value values, tpu_hlo_value indices, tpu_hlo_value pos, int dim) {
  tpu_lower_set_output(c, 0, pick(c, values, pos, dim));
  if (c->num_outputs > 1) tpu_lower_set_output(c, 1, pick(c, indices, pos, dim));
}

/* kthvalue(self, k, dim, keepdim): the k-th smallest (1-based). */
static tpu_status_t kthvalue_rule(tpu_lower_ctx *c) {
  int dim = dim_arg(c, 2, -1);
  int64_t k = tpu_lower_int(c, 1, 0);
  tpu_hlo_value values, indices;
  sort_dim(c, input_vector(c), dim, false, &values, &indices);
  set_picked(c, values, indices, positions(c, values, dim, k - 1), dim);
  return NULL;
}

enum { MEDIAN, NANMEDIAN };

/* median/nanmedian(self) and .dim(self, dim, keepdim); data: MEDIAN or
 * NANMEDIAN. The lower median of the sorted row; median returns the first NaN
 * of a row that has one, nanmedian the lower median of the numbers (the first
 * NaN when all are NaN), as PyTorch's CPU kernel. */
static tpu_status_t median_rule(tpu_lower_ctx *c) {
  bool all = c->num_args == 1;
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  int dim = 0;
  if (all) x = tpu_hlo_reshape(B, x, 1, (int64_t[]){tpu_hlo_type_numel(tpu_hlo_type_of(B, x))});
  else if (c->args[0].rank == 0) x = input_vector(c);
  else dim = dim_arg(c, 1, 0);
  int64_t size = tpu_hlo_type_of(B, x)->dims[dim];
  if (size == 0) {
    if (all) return done(c, tpu_hlo_scalar_f64(B, OUT->dtype, NAN));
    return tpu_lower_error(c, TPU_ERR_INDEX, "median(): Expected reduction dim %d to have non-zero size.", dim);
  }
  tpu_hlo_value values, indices;
  sort_dim(c, x, dim, false, &values, &indices);
  tpu_hlo_value pos = positions(c, values, dim, (size - 1) / 2);
  if (tpu_dtype_is_float(tpu_hlo_dtype(B, x))) {
    tpu_hlo_value nans = tpu_lower_reduce(B, tpu_hlo_convert(B, is_nan(c, x), TPU_S64), TPU_HLO_ADD,
                                          (int64_t[]){dim}, 1);
    tpu_hlo_value n = positions(c, values, dim, size), zero = positions(c, values, dim, 0);
    tpu_hlo_value numbers = sub(c, n, nans);
    if (c->data == MEDIAN) {
      pos = sel(c, cmp(c, TPU_HLO_GT, nans, zero), numbers, pos);
    } else {
      tpu_hlo_value half = dvd(c, sub(c, numbers, positions(c, values, dim, 1)), positions(c, values, dim, 2));
      pos = tpu_hlo_binary(B, TPU_HLO_MAX, half, zero);
    }
  }
  set_picked(c, values, indices, pos, dim);
  return NULL;
}

/* mode(self, dim, keepdim): the most frequent value of each row, the smallest
 * among equally frequent ones, with the index of its last occurrence. The
 * sorted row is cut into runs of equal values; a run's length is read at its
 * end. */
static tpu_status_t mode_rule(tpu_lower_ctx *c) {
  int dim = dim_arg(c, 1, -1);
  tpu_hlo_value x = input_vector(c);
  tpu_hlo_type xt = *tpu_hlo_type_of(B, x);
  int64_t size = xt.dims[dim];
  if (size == 0)
    return tpu_lower_error(c, TPU_ERR_INDEX, "mode(): Expected reduction dim %d to have non-zero size.", dim);
  tpu_hlo_value values, indices;
  sort_dim(c, x, dim, false, &values, &indices);
  tpu_hlo_type it = xt;
  it.dtype = TPU_S64;
  tpu_hlo_value pos = tpu_hlo_iota(B, &it, dim);
  /* new[i]: the run starts at i; end[i]: it ends at i */
  tpu_hlo_value prev = tpu_hlo_slice_dim(B, values, dim, 0, size - 1, 1);
  tpu_hlo_value next = tpu_hlo_slice_dim(B, values, dim, 1, size, 1);
  tpu_hlo_value differs = cmp(c, TPU_HLO_NE, prev, next);
  tpu_hlo_value yes = tpu_hlo_scalar_i64(B, TPU_BOOL, 1);
  int64_t lo[TPU_HLO_MAX_RANK] = {0}, hi[TPU_HLO_MAX_RANK] = {0}, interior[TPU_HLO_MAX_RANK] = {0};
  lo[dim] = 1;
  tpu_hlo_value is_new = tpu_hlo_pad(B, differs, yes, lo, hi, interior);
  lo[dim] = 0;
  hi[dim] = 1;
  tpu_hlo_value is_end = tpu_hlo_pad(B, differs, yes, lo, hi, interior);
  tpu_hlo_value zeros = tpu_hlo_const_i64(B, &it, 0);
  tpu_hlo_value start = tpu_lower_scan(B, sel(c, is_new, pos, zeros), dim, TPU_HLO_MAX);
  tpu_hlo_value length = sel(c, is_end, add(c, sub(c, pos, start), tpu_hlo_const_i64(B, &it, 1)), zeros);
  tpu_hlo_value longest = tpu_lower_reduce(B, length, TPU_HLO_MAX, (int64_t[]){dim}, 1);
  int64_t bdims[TPU_HLO_MAX_RANK];
  for (int i = 0, j = 0; i < xt.rank; i++)
    if (i != dim) bdims[j++] = i;
  tpu_hlo_value is_longest = cmp(c, TPU_HLO_EQ, length, tpu_hlo_broadcast_in_dim(B, longest, &it, bdims));
  tpu_hlo_value end = tpu_hlo_reduce_simple(B, sel(c, is_longest, pos, tpu_hlo_const_i64(B, &it, size)),
                                            tpu_hlo_scalar_i64(B, TPU_S64, size), TPU_HLO_MIN, (int64_t[]){dim}, 1);
  set_picked(c, values, indices, end, dim);
  return NULL;
}

/* --- running extremes ---------------------------------------------------------- */

/* cummax/cummin(self, dim) -> (values, indices); data: MAX or MIN. A
 * reduce_window over (value, index) reaching back over the whole dim, padded
 * with (lowest, -1), which every element beats. */
static tpu_status_t running_rule(tpu_lower_ctx *c) {
  bool is_max = c->data == TPU_HLO_MAX;
  int dim = dim_arg(c, 1, 0);
  tpu_hlo_value x = input_vector(c);
  if (tpu_hlo_dtype(B, x) == TPU_BOOL) x = tpu_hlo_convert(B, x, TPU_U8); /* orders as a number */
  tpu_hlo_type it = *tpu_hlo_type_of(B, x);
  tpu_dtype_t t = it.dtype;
  it.dtype = TPU_S64;
  int64_t size = it.dims[dim];
  tpu_hlo_value xs[2] = {x, tpu_hlo_iota(B, &it, dim)}, out[2] = {xs[0], xs[1]};
  if (size > 1) {
    tpu_hlo_window w;
    tpu_hlo_window_init(&w, it.rank);
    w.dims[dim] = size;
    w.pad_lo[dim] = size - 1;
    tpu_hlo_value inits[2] = {is_max ? tpu_hlo_scalar_min(B, t) : tpu_hlo_scalar_max(B, t),
                              tpu_hlo_scalar_i64(B, TPU_S64, -1)};
    tpu_hlo_region body;
    /* PyTorch takes x >= the running max: the later index wins ties. */
    tpu_lower_extreme_body(c, t, is_max, true, &body);
    tpu_hlo_reduce_window(B, xs, inits, 2, &w, &body, out);
  }
  tpu_lower_set_output(c, 0, out[0]);
  tpu_lower_set_output(c, 1, out[1]);
  return NULL;
}

/* --- searching and counting ------------------------------------------------------ */

/* flat[idx] for a 1-D |flat| and an s64 |idx| of any shape; an index out of
 * range is clamped (gather's rule). */
static tpu_hlo_value take(tpu_lower_ctx *c, tpu_hlo_value flat, tpu_hlo_value idx) {
  tpu_hlo_type out = *tpu_hlo_type_of(B, idx);
  out.dtype = tpu_hlo_dtype(B, flat);
  tpu_hlo_gather_dims g = {.num_collapsed = 1, .num_start_map = 1, .index_vector_dim = out.rank};
  return tpu_hlo_gather(B, flat, idx, &g, (int64_t[]){1}, &out);
}

/* searchsorted.Tensor/.Scalar(sorted_sequence, self, *, out_int32, right,
 * side, sorter): PyTorch's binary search, step by step for every value at
 * once (floor(log2 n) + 1 steps over its row of n boundaries, read through
 * sorter when given), so that even unsorted or NaN boundaries give the CPU's
 * answer. Left moves past a boundary b when !(b >= v), right when !(b > v). */
static tpu_status_t searchsorted_rule(tpu_lower_ctx *c) {
  bool right = tpu_lower_bool(c, 3, false);
  if (c->args[4].kind == TPU_ARG_STRING) right = c->args[4].s[0] == 'r';
  tpu_dtype_t t = c->common_dtype;
  tpu_hlo_value v = c->args[1].kind == TPU_ARG_TENSOR ? tpu_hlo_convert(B, tpu_lower_tensor(c, 1), t)
                                                      : tpu_lower_scalar(c, 1, t);
  const tpu_lower_arg *seq = &c->args[0];
  int64_t n = seq->sizes[seq->rank - 1], numel = 1;
  for (int i = 0; i < seq->rank; i++) numel *= seq->sizes[i];
  tpu_hlo_type it = *tpu_hlo_type_of(B, v);
  it.dtype = TPU_S64;
  tpu_hlo_value start = tpu_hlo_const_i64(B, &it, 0), end = tpu_hlo_const_i64(B, &it, n);
  if (n == 0) return done(c, start);
  tpu_hlo_value flat = tpu_hlo_reshape(B, tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t), 1, &numel);
  /* the first boundary of each value's row: rows follow the leading dims */
  tpu_hlo_value base = tpu_hlo_const_i64(B, &it, 0);
  for (int i = 0; seq->rank > 1 && i < it.rank - 1; i++)
    base = add(c, mul(c, base, tpu_hlo_const_i64(B, &it, it.dims[i])), tpu_hlo_iota(B, &it, i));
  base = mul(c, base, tpu_hlo_const_i64(B, &it, n));
  tpu_hlo_value sorter = TPU_HLO_NONE;
  if (!tpu_lower_is_none(c, 5)) {
    sorter = tpu_hlo_reshape(B, tpu_hlo_convert(B, tpu_lower_tensor(c, 5), TPU_S64), 1, &numel);
    tpu_hlo_type st = *tpu_hlo_type_of(B, sorter);
    tpu_hlo_value ok = and_(c, cmp(c, TPU_HLO_GE, sorter, tpu_hlo_const_i64(B, &st, 0)),
                            cmp(c, TPU_HLO_LT, sorter, tpu_hlo_const_i64(B, &st, n)));
    tpu_lower_require(c, tpu_lower_reduce(B, ok, TPU_HLO_AND, (int64_t[]){0}, 1), TPU_ERR_RUNTIME,
                      "torch.searchsorted(): sorter index out of range");
  }
  tpu_hlo_value one = tpu_hlo_const_i64(B, &it, 1);
  for (int64_t steps = n; steps > 0; steps >>= 1) {
    tpu_hlo_value active = cmp(c, TPU_HLO_LT, start, end);
    tpu_hlo_value mid = add(c, start, tpu_hlo_binary(B, TPU_HLO_SHR_ARITH, sub(c, end, start), one));
    tpu_hlo_value at = add(c, base, mid);
    if (sorter != TPU_HLO_NONE) at = add(c, base, take(c, sorter, at));
    tpu_hlo_value b = take(c, flat, at);
    tpu_hlo_value past = and_(c, active, un(c, TPU_HLO_NOT, cmp(c, right ? TPU_HLO_GT : TPU_HLO_GE, b, v)));
    tpu_hlo_value before = and_(c, active, un(c, TPU_HLO_NOT, past));
    start = sel(c, past, add(c, mid, one), start);
    end = sel(c, before, mid, end);
  }
  return done(c, start);
}

/* histc(self, bins, min, max) with constant min/max: counts per bin of
 * [min, max] (the data's extremes when min == max), bin
 * (x - min) * bins / (max - min) in the input's type as PyTorch's kernel,
 * the top edge in the last bin, values outside ignored. PyTorch's meta
 * function checks bins and min < max. */
static tpu_status_t histc_rule(tpu_lower_ctx *c) {
  int64_t bins = tpu_lower_int(c, 1, 100);
  double lo = tpu_lower_float(c, 2, 0.0), hi = tpu_lower_float(c, 3, 0.0);
  tpu_dtype_t t = OUT->dtype;
  tpu_hlo_value x = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t);
  int64_t numel = tpu_hlo_type_numel(tpu_hlo_type_of(B, x));
  x = tpu_hlo_reshape(B, x, 1, &numel);
  tpu_hlo_value left = tpu_hlo_scalar_f64(B, t, lo), right = tpu_hlo_scalar_f64(B, t, hi);
  if (lo == hi && numel > 0) {
    left = tpu_hlo_reduce_simple(B, x, tpu_hlo_scalar_max(B, t), TPU_HLO_MIN, (int64_t[]){0}, 1);
    right = tpu_hlo_reduce_simple(B, x, tpu_hlo_scalar_min(B, t), TPU_HLO_MAX, (int64_t[]){0}, 1);
    tpu_hlo_value one = tpu_hlo_scalar_f64(B, t, 1.0), same = cmp(c, TPU_HLO_EQ, left, right);
    left = sel(c, same, sub(c, left, one), left);
    right = sel(c, same, add(c, right, one), right);
    /* XLA's min and max may skip a NaN, PyTorch's range check sees it */
    tpu_hlo_value any_nan = tpu_hlo_reduce_simple(B, is_nan(c, x), tpu_hlo_scalar_i64(B, TPU_BOOL, 0), TPU_HLO_OR,
                                                  (int64_t[]){0}, 1);
    tpu_hlo_value finite = and_(c, un(c, TPU_HLO_IS_FINITE, left), un(c, TPU_HLO_IS_FINITE, right));
    tpu_lower_require(c, and_(c, finite, un(c, TPU_HLO_NOT, any_nan)), TPU_ERR_RUNTIME,
                      "torch.histc: range of [min, max] is not finite");
  } else {
    if (lo == hi) lo -= 1, hi += 1;
    if (!isfinite(lo) || !isfinite(hi))
      return tpu_lower_error(c, TPU_ERR_RUNTIME, "torch.histc: range of [%g, %g] is not finite", lo, hi);
    left = tpu_hlo_scalar_f64(B, t, lo);
    right = tpu_hlo_scalar_f64(B, t, hi);
  }
  tpu_hlo_type xt = *tpu_hlo_type_of(B, x);
  tpu_hlo_value bl = tpu_hlo_broadcast_to(B, left, &xt), br = tpu_hlo_broadcast_to(B, right, &xt);
  tpu_hlo_value inside = and_(c, cmp(c, TPU_HLO_GE, x, bl), cmp(c, TPU_HLO_LE, x, br));
  tpu_hlo_value scaled = dvd(c, mul(c, sub(c, x, bl), tpu_hlo_const_f64(B, &xt, (double)bins)), sub(c, br, bl));
  xt.dtype = TPU_S64;
  tpu_hlo_value bin = tpu_hlo_convert(B, sel(c, inside, scaled, const_like(c, x, -1.0)),
                                      TPU_S64);
  bin = tpu_hlo_binary(B, TPU_HLO_MIN, bin, tpu_hlo_const_i64(B, &xt, bins - 1));
  /* [numel, bins] one-hot counts; -1 (outside) matches no bin */
  tpu_hlo_type grid = tpu_hlo_make_type(TPU_S64, 2, (int64_t[]){numel, bins});
  tpu_hlo_value hit = cmp(c, TPU_HLO_EQ, tpu_hlo_broadcast_in_dim(B, bin, &grid, (int64_t[]){0}),
                          tpu_hlo_iota(B, &grid, 1));
  tpu_hlo_value counts = tpu_lower_reduce(B, tpu_hlo_convert(B, hit, tpu_lower_opmath(t)), TPU_HLO_ADD,
                                          (int64_t[]){0}, 1);
  return done(c, counts);
}

const tpu_lower_rule tpu_rules_sort[] = {
    {{"sort.stable", "sort.values_stable"}, sort_rule, 0, 0},
    {{"topk", "topk.values"}, topk_rule, 0, 0},
    {{"kthvalue", "kthvalue.values"}, kthvalue_rule, 0, 0},
    {{"median", "median.out"}, median_rule, 0, MEDIAN},
    {{"median.dim", "median.dim_values"}, median_rule, 0, MEDIAN},
    {{"nanmedian", "nanmedian.out"}, median_rule, 0, NANMEDIAN},
    {{"nanmedian.dim", "nanmedian.dim_values"}, median_rule, 0, NANMEDIAN},
    {{"mode", "mode.values"}, mode_rule, 0, 0},
    {{"cummax", "cummax.out"}, running_rule, 0, TPU_HLO_MAX},
    {{"cummin", "cummin.out"}, running_rule, 0, TPU_HLO_MIN},
    {{"searchsorted.Tensor", "searchsorted.Tensor_out"}, searchsorted_rule, 0, 0},
    {{"searchsorted.Scalar", "searchsorted.Scalar_out"}, searchsorted_rule, 0, 0},
    {{"histc", "histc.out"}, histc_rule, TPU_RULE_CONST_SCALARS, 0},
};
TPU_COUNT_RULES(sort);
