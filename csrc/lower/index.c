/* Gathers and scatters: index_select, gather, scatter and its reductions,
 * index_add/copy/fill, advanced indexing (index, index_put), embedding
 * backward, masked_scatter, take.
 *
 * Every rule is one stablehlo.gather or scatter described by an index_plan:
 * which operand dims an index vector addresses and where the index batch
 * sits in the result (index_select picks whole slices along one dim; gather
 * and scatter address single elements by full coordinates; advanced
 * indexing does both). XLA clamps out-of-range gather indices and drops
 * out-of-range scatter updates silently, so each rule checks its indices at
 * run time and raises PyTorch's exception type. Negative indices wrap only
 * where PyTorch wraps them (index, index_put, index_fill, take). */
#include <stdio.h>
#include <string.h>

#include "lower/rules.h"

static tpu_hlo_value reshape(tpu_lower_ctx *c, tpu_hlo_value x, int rank, const int64_t *dims) {
  return tpu_hlo_reshape(B, x, rank, dims);
}

static int64_t numel_of(tpu_lower_ctx *c, tpu_hlo_value x) { return tpu_hlo_type_numel(tpu_hlo_type_of(B, x)); }

/* |x| as a 1-D value (rank 0 becomes [1]). */
static tpu_hlo_value flat(tpu_lower_ctx *c, tpu_hlo_value x) {
  int64_t n = numel_of(c, x);
  return reshape(c, x, 1, &n);
}

/* At least one dim: PyTorch treats 0-dim operands of these ops as [1]. */
static tpu_hlo_value at_least_1d(tpu_lower_ctx *c, tpu_hlo_value x) {
  return tpu_hlo_rank(B, x) == 0 ? flat(c, x) : x;
}

/* Index tensor |arg| as s64 (int32 indices are accepted too). */
static tpu_hlo_value index_arg(tpu_lower_ctx *c, int arg) {
  return tpu_hlo_convert(B, tpu_lower_tensor(c, arg), TPU_S64);
}


/* Rank-0 i1: every element of s64 |idx| lies in [lo, hi). */
/* Where |lo| <= idx < |hi| (i1, idx's shape). */
static tpu_hlo_value in_range(tpu_lower_ctx *c, tpu_hlo_value idx, int64_t lo, int64_t hi) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, idx);
  return tpu_hlo_binary(B, TPU_HLO_AND, tpu_hlo_compare(B, TPU_HLO_GE, idx, tpu_hlo_const_i64(B, &t, lo)),
                        tpu_hlo_compare(B, TPU_HLO_LT, idx, tpu_hlo_const_i64(B, &t, hi)));
}

static tpu_hlo_value all_in_range(tpu_lower_ctx *c, tpu_hlo_value idx, int64_t lo, int64_t hi) {
  tpu_hlo_value ok = in_range(c, idx, lo, hi);
  int64_t dims[TPU_HLO_MAX_RANK];
  int rank = tpu_hlo_rank(B, ok);
  for (int i = 0; i < rank; i++) dims[i] = i;
  return tpu_lower_reduce(B, ok, TPU_HLO_AND, dims, rank);
}

/* The CPU kernels' bounds message, with the first offending index (in
 * row-major order), the dim and its size. */
static const char IN_BOUNDS[] = "index %lld is out of bounds for dimension %lld with size %lld";

/* Whether every index of |idx| lies in [lo, hi), and the values IN_BOUNDS
 * reports: the first index that does not, |dim| and |size|. */
typedef struct bounds {
  tpu_hlo_value ok, values[3];
} bounds;

static bounds index_bounds(tpu_lower_ctx *c, tpu_hlo_value idx, int64_t lo, int64_t hi, int64_t dim, int64_t size) {
  bounds r;
  r.ok = tpu_lower_all_or_first(c, in_range(c, idx, lo, hi), idx, &r.values[0]);
  r.values[1] = tpu_hlo_scalar_i64(B, TPU_S64, dim);
  r.values[2] = tpu_hlo_scalar_i64(B, TPU_S64, size);
  return r;
}

/* |acc| and |next| as one check, reporting the values of the first that fails. */
static void fold_bounds(tpu_lower_ctx *c, bounds *acc, const bounds *next) {
  for (int i = 0; i < 3; i++) acc->values[i] = tpu_hlo_select(B, acc->ok, next->values[i], acc->values[i]);
  acc->ok = tpu_hlo_binary(B, TPU_HLO_AND, acc->ok, next->ok);
}

/* take's and put's check of flat indices into |n| elements. */
static void require_take(tpu_lower_ctx *c, tpu_hlo_value idx, int64_t n) {
  bounds b = index_bounds(c, idx, -n, n, 0, n);
  tpu_hlo_value values[2] = {b.values[0], b.values[2]};
  tpu_lower_require_values(c, b.ok, 2, values, TPU_ERR_INDEX,
                           "out of range: tried to access index %lld on a tensor of %lld elements.");
}

/* Requires |idx| in [lo, size) along |dim| (lo = -size where negatives
 * count from the end), with the CPU's message |format|: IN_BOUNDS, or
 * another format of its three values. */
static void require_index(tpu_lower_ctx *c, tpu_hlo_value idx, int64_t lo, int64_t size, int64_t dim, tpu_code_t code,
                          const char *format) {
  bounds b = index_bounds(c, idx, lo, size, dim, size);
  tpu_lower_require_values(c, b.ok, 3, b.values, code, format);
}

/* Python-style negative indices: idx + size where idx < 0. */
static tpu_hlo_value wrap_negative(tpu_lower_ctx *c, tpu_hlo_value idx, int64_t size) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, idx);
  tpu_hlo_value neg = tpu_hlo_compare(B, TPU_HLO_LT, idx, tpu_hlo_const_i64(B, &t, 0));
  return tpu_hlo_select(B, neg, tpu_hlo_binary(B, TPU_HLO_ADD, idx, tpu_hlo_const_i64(B, &t, size)), idx);
}

/* --- index plans: one description for gathers and scatters --------------------- */

/* |num| operand dims (increasing) are addressed by index vectors; the index
 * batch (|batch_rank| dims) sits at result position |first|, and the
 * operand's other dims keep their order around it. */
typedef struct index_plan {
  int rank, num, batch_rank, first;
  int64_t dims[TPU_HLO_MAX_RANK];
} index_plan;

/* Whole slices along |dim| picked by a 1-D index ([n, 1] vectors). */
static index_plan along_dim(int rank, int dim) {
  index_plan p = {.rank = rank, .num = 1, .batch_rank = 1, .first = dim};
  p.dims[0] = dim;
  return p;
}

/* Single elements picked by full coordinates (shape batch + [rank]). */
static index_plan by_coords(int rank, int batch_rank) {
  index_plan p = {.rank = rank, .num = rank, .batch_rank = batch_rank, .first = 0};
  for (int i = 0; i < rank; i++) p.dims[i] = i;
  return p;
}

static bool plan_indexes(const index_plan *p, int64_t d) {
  for (int i = 0; i < p->num; i++)
    if (p->dims[i] == d) return true;
  return false;
}

/* The result positions of the operand dims the plan does not index. */
static int plan_offsets(const index_plan *p, int64_t *out) {
  int n = 0;
  for (int d = 0; d < p->rank; d++) {
    if (plan_indexes(p, d)) continue;
    out[n] = n < p->first ? n : n + p->batch_rank;
    n++;
  }
  return n;
}

/* The gather result: |x|'s dtype, the index batch at |first|. */
static tpu_hlo_type plan_result(const index_plan *p, const tpu_hlo_type *x, const tpu_hlo_type *idx) {
  tpu_hlo_type t = tpu_hlo_make_type(x->dtype, 0, NULL);
  int64_t offsets[TPU_HLO_MAX_RANK];
  int n = plan_offsets(p, offsets), k = 0;
  t.rank = p->batch_rank + n;
  for (int d = 0; d < p->rank; d++)
    if (!plan_indexes(p, d)) t.dims[offsets[k++]] = x->dims[d];
  for (int i = 0; i < p->batch_rank; i++) t.dims[p->first + i] = idx->dims[i];
  return t;
}

static tpu_hlo_value plan_gather(tpu_lower_ctx *c, const index_plan *p, tpu_hlo_value x, tpu_hlo_value idx) {
  if (tpu_hlo_failed(B)) return TPU_HLO_NONE;
  tpu_hlo_type xt = *tpu_hlo_type_of(B, x);
  tpu_hlo_type out = plan_result(p, &xt, tpu_hlo_type_of(B, idx));
  /* Slices of an empty operand are out of its bounds; the result is empty
   * or the index check fails. */
  if (tpu_hlo_type_numel(&xt) == 0 || tpu_hlo_type_numel(&out) == 0) return tpu_hlo_const_f64(B, &out, 0.0);
  tpu_hlo_gather_dims g = {0};
  int64_t slice[TPU_HLO_MAX_RANK];
  g.num_offset = plan_offsets(p, g.offset_dims);
  g.num_collapsed = g.num_start_map = p->num;
  for (int d = 0; d < p->rank; d++) slice[d] = xt.dims[d];
  for (int i = 0; i < p->num; i++) {
    g.collapsed_slice_dims[i] = g.start_index_map[i] = p->dims[i];
    slice[p->dims[i]] = 1;
  }
  g.index_vector_dim = p->batch_rank;
  return tpu_hlo_gather(B, x, idx, &g, slice, &out);
}

/* How a scatter combines an update with the operand element. */
typedef enum combine { REPLACE, COMBINE_ADD, COMBINE_MUL, COMBINE_MAX, COMBINE_MIN } combine_t;

/* The scatter body for |op| on scalars of |t|: bool sums are ORs and
 * products ANDs; float max/min propagate NaN as PyTorch's kernels do. */
static void combine_region(tpu_lower_ctx *c, combine_t op, tpu_dtype_t t, tpu_hlo_region *out) {
  static const tpu_hlo_binary_t ops[] = {TPU_HLO_ADD, TPU_HLO_ADD, TPU_HLO_MUL, TPU_HLO_MAX, TPU_HLO_MIN};
  tpu_hlo_binary_t bop = ops[op];
  if (t == TPU_BOOL) bop = op == COMBINE_ADD || op == COMBINE_MAX ? TPU_HLO_OR : TPU_HLO_AND;
  if (!tpu_dtype_is_float(t) || (op != COMBINE_MAX && op != COMBINE_MIN)) {
    tpu_hlo_region_binary(B, bop, t, out);
    return;
  }
  tpu_hlo_type s[2] = {tpu_hlo_make_type(t, 0, NULL), tpu_hlo_make_type(t, 0, NULL)};
  tpu_hlo_value a[2];
  tpu_hlo_region_begin(B, 2, s, a);
  tpu_hlo_value r = tpu_hlo_binary(B, bop, a[0], a[1]);
  r = tpu_hlo_select(B, tpu_hlo_compare(B, TPU_HLO_NE, a[1], a[1]), a[1], r);
  r = tpu_hlo_select(B, tpu_hlo_compare(B, TPU_HLO_NE, a[0], a[0]), a[0], r);
  tpu_hlo_region_end(B, &r, 1, out);
}

/* |x| with |upd| (x's dtype, laid out as plan_result) combined in at |idx|. */
static tpu_hlo_value plan_scatter(tpu_lower_ctx *c, const index_plan *p, tpu_hlo_value x, tpu_hlo_value idx,
                                  tpu_hlo_value upd, combine_t op) {
  if (tpu_hlo_failed(B)) return TPU_HLO_NONE;
  /* Nothing to write, or nowhere to write it (then the index check fails). */
  if (numel_of(c, x) == 0 || numel_of(c, upd) == 0) return x;
  tpu_hlo_scatter_dims s = {0};
  s.num_update_window = plan_offsets(p, s.update_window_dims);
  s.num_inserted = s.num_to_operand = p->num;
  for (int i = 0; i < p->num; i++) s.inserted_window_dims[i] = s.scatter_dims_to_operand_dims[i] = p->dims[i];
  s.index_vector_dim = p->batch_rank;
  if (op == REPLACE) return tpu_hlo_scatter(B, x, idx, upd, &s, NULL, false);
  tpu_hlo_region body;
  combine_region(c, op, tpu_hlo_dtype(B, x), &body);
  return tpu_hlo_scatter(B, x, idx, upd, &s, &body, false);
}

/* A 1-D index as [n, 1] index vectors for along_dim plans. */
static tpu_hlo_value as_vectors(tpu_lower_ctx *c, tpu_hlo_value idx) {
  int64_t dims[2] = {numel_of(c, idx), 1};
  return reshape(c, idx, 2, dims);
}

/* Full coordinates of each element of |idx| (rank r) with dim |dim| taken
 * from idx's values: shape idx + [r]. */
static tpu_hlo_value coords_along(tpu_lower_ctx *c, tpu_hlo_value idx, int dim) {
  tpu_hlo_type one = *tpu_hlo_type_of(B, idx);
  int r = one.rank;
  one.dims[one.rank++] = 1;
  tpu_hlo_value parts[TPU_HLO_MAX_RANK];
  for (int d = 0; d < r; d++) parts[d] = d == dim ? reshape(c, idx, one.rank, one.dims) : tpu_hlo_iota(B, &one, d);
  return tpu_hlo_concatenate(B, parts, r, r);
}

/* --- index_select, gather, take ------------------------------------------------- */

/* index_select(self, dim, index) */
static tpu_status_t index_select_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = at_least_1d(c, tpu_lower_tensor(c, 0));
  int rank = tpu_hlo_rank(B, x), dim = tpu_lower_wrap_dim(c, tpu_lower_int(c, 1, 0), rank);
  tpu_hlo_value idx = flat(c, index_arg(c, 2));
  int64_t size = tpu_hlo_type_of(B, x)->dims[dim];
  if (size == 0 && rank > 1 && numel_of(c, idx) > 0) /* the CPU kernel's shape check, before any index */
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "index_select(): self indexing axis dim should be positive");
  tpu_lower_require(c, all_in_range(c, idx, 0, size), TPU_ERR_INDEX, "index out of range in self");
  index_plan p = along_dim(rank, dim);
  return done(c, plan_gather(c, &p, x, as_vectors(c, idx)));
}

/* embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse): the
 * rows of weight the indices name, in the indices' shape. */
static tpu_status_t embedding_rule(tpu_lower_ctx *c) {
  tpu_hlo_value w = tpu_lower_tensor(c, 0);
  tpu_hlo_value idx = flat(c, index_arg(c, 1));
  tpu_lower_require(c, all_in_range(c, idx, 0, c->args[0].sizes[0]), TPU_ERR_INDEX, "index out of range in self");
  index_plan p = along_dim(c->args[0].rank, 0);
  return done(c, reshape(c, plan_gather(c, &p, w, as_vectors(c, idx)), OUT->rank, OUT->dims));
}

/* gather(self, dim, index, *, sparse_grad) */
static tpu_status_t gather_rule(tpu_lower_ctx *c) {
  /* PyTorch skips its rank check for an empty index: the result is empty. */
  if (tpu_hlo_type_numel(OUT) == 0) return done(c, tpu_hlo_const_f64(B, OUT, 0.0));
  tpu_hlo_value x = at_least_1d(c, tpu_lower_tensor(c, 0));
  tpu_hlo_value idx = at_least_1d(c, index_arg(c, 2));
  int rank = tpu_hlo_rank(B, x), dim = tpu_lower_wrap_dim(c, tpu_lower_int(c, 1, 0), rank);
  require_index(c, idx, 0, tpu_hlo_type_of(B, x)->dims[dim], dim, TPU_ERR_RUNTIME, IN_BOUNDS);
  index_plan p = by_coords(rank, rank);
  return done(c, plan_gather(c, &p, x, coords_along(c, idx, dim)));
}

/* take(self, index): self flattened; negative indices count from the end. */
static tpu_status_t take_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = flat(c, tpu_lower_tensor(c, 0));
  tpu_hlo_value idx = index_arg(c, 1);
  int64_t n = numel_of(c, x);
  require_take(c, idx, n);
  tpu_hlo_type vt = *tpu_hlo_type_of(B, idx);
  vt.dims[vt.rank++] = 1;
  index_plan p = by_coords(1, vt.rank - 1);
  return done(c, plan_gather(c, &p, x, reshape(c, wrap_negative(c, idx, n), vt.rank, vt.dims)));
}

/* put_(self, index, source, accumulate): take's inverse, source's k-th
 * element written (or added) at self's flat index[k]. */
static tpu_status_t put_rule(tpu_lower_ctx *c) {
  const tpu_lower_arg *xa = &c->args[0], *ia = &c->args[1], *sa = &c->args[2];
  int64_t k = 1, m = 1;
  for (int i = 0; i < ia->rank; i++) k *= ia->sizes[i];
  for (int i = 0; i < sa->rank; i++) m *= sa->sizes[i];
  /* The CPU kernel's checks, in its order (the meta function has none). */
  if (m != k)
    return tpu_lower_error(c, TPU_ERR_INDEX, "put_(): Expected source and index to have the same number of elements, "
                           "but got source.numel() = %lld, index.numel() = %lld", (long long)m, (long long)k);
  if (sa->dtype != xa->dtype)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "put_(): self and source expected to have the same dtype, but got "
                           "self.dtype = %s and source.dtype = %s", tpu_dtype_scalar_type(xa->dtype),
                           tpu_dtype_scalar_type(sa->dtype));
  if (ia->dtype != TPU_S64)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "put_(): Expected a long tensor for index, but got %s",
                           tpu_dtype_scalar_type(ia->dtype));
  bool accumulate = tpu_lower_bool(c, 3, false);
  tpu_dtype_t t = accumulate ? tpu_lower_opmath(OUT->dtype) : OUT->dtype;
  tpu_hlo_value x = flat(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t));
  tpu_hlo_value idx = flat(c, index_arg(c, 1));
  int64_t n = numel_of(c, x);
  require_take(c, idx, n);
  tpu_hlo_value src = flat(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 2), t));
  index_plan p = by_coords(1, 1);
  tpu_hlo_value r = plan_scatter(c, &p, x, as_vectors(c, wrap_negative(c, idx, n)), src, accumulate ? COMBINE_ADD : REPLACE);
  return done(c, reshape(c, r, OUT->rank, OUT->dims));
}

/* --- scatter and its reductions --------------------------------------------------- */

/* data: which overload family, for the reduction and the source argument. */
enum { SCATTER, SCATTER_LEGACY_REDUCE, SCATTER_ADD, SCATTER_REDUCE_TWO, INDEX_REDUCE };

typedef struct scatter_op {
  combine_t op;
  bool mean;
} scatter_op;

static tpu_status_t scatter_reduction(tpu_lower_ctx *c, scatter_op *out) {
  const char *name = NULL;
  switch (c->data) {
    case SCATTER: out->op = REPLACE; return NULL;
    case SCATTER_ADD: out->op = COMBINE_ADD; return NULL;
    default: name = c->args[4].s; break;
  }
  /* |in|: the overload families (1 << c->data) that accept the name. */
  enum { LEGACY = 1 << SCATTER_LEGACY_REDUCE, TWO = 1 << SCATTER_REDUCE_TWO, INDEX = 1 << INDEX_REDUCE };
  static const struct { const char *name; combine_t op; bool mean; unsigned in; } names[] = {
      {"add", COMBINE_ADD, false, LEGACY},      {"multiply", COMBINE_MUL, false, LEGACY},
      {"sum", COMBINE_ADD, false, TWO},         {"prod", COMBINE_MUL, false, TWO | INDEX},
      {"mean", COMBINE_ADD, true, TWO | INDEX}, {"amax", COMBINE_MAX, false, TWO | INDEX},
      {"amin", COMBINE_MIN, false, TWO | INDEX},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if ((names[i].in & (1u << c->data)) && strcmp(names[i].name, name) == 0) {
      out->op = names[i].op;
      out->mean = names[i].mean;
      return NULL;
    }
  }
  if (c->data == SCATTER_LEGACY_REDUCE)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "reduce argument must be either add or multiply.");
  if (c->data == INDEX_REDUCE)
    return tpu_lower_error(c, TPU_ERR_RUNTIME,
                           "index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got %s.", name);
  return tpu_lower_error(c, TPU_ERR_RUNTIME,
                         "reduce argument must be either sum, prod, mean, amax or amin, got %s", name);
}

/* The identity of |op| (what include_self=False starts from). */
static tpu_hlo_value combine_identity(tpu_lower_ctx *c, combine_t op, tpu_dtype_t t) {
  switch (op) {
    case COMBINE_MUL: return tpu_hlo_scalar_i64(B, t, 1);
    case COMBINE_MAX: return tpu_hlo_scalar_min(B, t);
    case COMBINE_MIN: return tpu_hlo_scalar_max(B, t);
    default: return tpu_hlo_scalar_i64(B, t, 0);
  }
}

/* |upd| combined into |x| at |at| as plan_scatter does, for the reductions
 * of scatter_reduce and index_reduce: with include_self=False touched
 * elements start from the reduction's identity; mean divides by the number
 * of values combined, self counting once if included, and integers divide
 * with floor as PyTorch does. */
static tpu_hlo_value reduce_into(tpu_lower_ctx *c, const index_plan *p, tpu_hlo_value x, tpu_hlo_value at,
                                 tpu_hlo_value upd, scatter_op so, bool include_self) {
  if (!include_self) {
    tpu_hlo_value untouched = const_like(c, x, 0.0);
    tpu_hlo_value touched = plan_scatter(c, p, tpu_hlo_convert(B, untouched, TPU_BOOL), at,
                                         tpu_hlo_convert(B, const_like(c, upd, 1.0), TPU_BOOL), REPLACE);
    tpu_hlo_type xt = *tpu_hlo_type_of(B, x);
    tpu_hlo_value id = tpu_hlo_broadcast_to(B, combine_identity(c, so.op, xt.dtype), &xt);
    x = tpu_hlo_select(B, touched, id, x);
  }
  tpu_hlo_value r = plan_scatter(c, p, x, at, upd, so.op);
  if (!so.mean) return r;
  tpu_hlo_value count = plan_scatter(c, p, const_like(c, x, include_self ? 1.0 : 0.0), at, const_like(c, upd, 1.0),
                                     COMBINE_ADD);
  count = tpu_hlo_binary(B, TPU_HLO_MAX, count, const_like(c, count, 1.0));
  tpu_hlo_value q = tpu_hlo_binary(B, TPU_HLO_DIV, r, count);
  if (tpu_dtype_is_int(tpu_hlo_dtype(B, r))) {
    tpu_hlo_value rem = tpu_hlo_binary(B, TPU_HLO_REM, r, count), zero = const_like(c, r, 0.0);
    tpu_hlo_value down = tpu_hlo_binary(B, TPU_HLO_AND, tpu_hlo_compare(B, TPU_HLO_NE, rem, zero),
                                        tpu_hlo_compare(B, TPU_HLO_LT, r, zero));
    q = tpu_hlo_select(B, down, tpu_hlo_binary(B, TPU_HLO_SUB, q, const_like(c, q, 1.0)), q);
  }
  return q;
}

/* scatter.src/.value(self, dim, index, src|value), scatter.reduce/.value_reduce
 * (…, *, reduce), scatter_add(self, dim, index, src),
 * scatter_reduce.two(self, dim, index, src, reduce, *, include_self). */
static tpu_status_t scatter_rule(tpu_lower_ctx *c) {
  scatter_op so = {REPLACE, false};
  TPU_RETURN_IF_ERROR(scatter_reduction(c, &so));
  bool include_self = c->data != SCATTER_REDUCE_TWO || tpu_lower_bool(c, 5, true);
  tpu_dtype_t t = so.op == REPLACE ? OUT->dtype : tpu_lower_opmath(OUT->dtype);
  tpu_hlo_value x = tpu_hlo_convert(B, at_least_1d(c, tpu_lower_tensor(c, 0)), t);
  tpu_hlo_value idx = at_least_1d(c, index_arg(c, 2));
  int rank = tpu_hlo_rank(B, x), dim = tpu_lower_wrap_dim(c, tpu_lower_int(c, 1, 0), rank);
  tpu_hlo_type it = *tpu_hlo_type_of(B, idx);
  tpu_hlo_type ut = with_dtype(&it, t);
  tpu_hlo_value upd;
  if (c->args[3].kind == TPU_ARG_SCALAR) {
    upd = tpu_hlo_broadcast_to(B, tpu_lower_scalar(c, 3, t), &ut);
  } else { /* src may be larger than index: its leading corner is used */
    int64_t start[TPU_HLO_MAX_RANK] = {0};
    upd = tpu_hlo_convert(B, at_least_1d(c, tpu_lower_tensor(c, 3)), t);
    upd = tpu_hlo_slice(B, upd, start, it.dims, NULL);
  }
  require_index(c, idx, 0, tpu_hlo_type_of(B, x)->dims[dim], dim, TPU_ERR_RUNTIME, IN_BOUNDS);
  index_plan p = by_coords(rank, it.rank);
  return done(c, reduce_into(c, &p, x, coords_along(c, idx, dim), upd, so, include_self));
}

/* --- index_add, index_copy, index_reduce, index_fill ---------------------------- */

/* The operands of index_add/copy/reduce(self, dim, index, source, …) in
 * |t|: self (at least 1-D), the flat index, and source shaped as self with
 * the index's length along dim; returns the wrapped dim. */
static int index_operands(tpu_lower_ctx *c, tpu_dtype_t t, tpu_hlo_value *x, tpu_hlo_value *idx, tpu_hlo_value *src) {
  *x = tpu_hlo_convert(B, at_least_1d(c, tpu_lower_tensor(c, 0)), t);
  int rank = tpu_hlo_rank(B, *x), dim = tpu_lower_wrap_dim(c, tpu_lower_int(c, 1, 0), rank);
  *idx = flat(c, index_arg(c, 2));
  tpu_hlo_type st = *tpu_hlo_type_of(B, *x);
  st.dims[dim] = numel_of(c, *idx);
  *src = reshape(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 3), t), st.rank, st.dims);
  return dim;
}

/* index_add(self, dim, index, source, *, alpha) (data COMBINE_ADD) and
 * index_copy(self, dim, index, source) (data REPLACE). */
static tpu_status_t index_add_rule(tpu_lower_ctx *c) {
  combine_t op = (combine_t)c->data;
  tpu_dtype_t t = op == REPLACE ? OUT->dtype : tpu_lower_opmath(OUT->dtype);
  tpu_hlo_value x, idx, src;
  int dim = index_operands(c, t, &x, &idx, &src);
  if (op == COMBINE_ADD && !tpu_lower_is_none(c, 4)) {
    tpu_hlo_value alpha = tpu_hlo_broadcast_to(B, tpu_lower_scalar(c, 4, t), tpu_hlo_type_of(B, src));
    src = tpu_hlo_binary(B, t == TPU_BOOL ? TPU_HLO_AND : TPU_HLO_MUL, src, alpha);
  }
  int64_t size = tpu_hlo_type_of(B, x)->dims[dim];
  if (op == REPLACE)
    require_index(c, idx, 0, size, dim, TPU_ERR_INDEX,
                  "index_copy_(): index %lld is out of bounds for dimension %lld with size %lld");
  else
    require_index(c, idx, 0, size, dim, TPU_ERR_RUNTIME, IN_BOUNDS);
  index_plan p = along_dim(tpu_hlo_rank(B, x), dim);
  return done(c, plan_scatter(c, &p, x, as_vectors(c, idx), src, op));
}

/* index_reduce(self, dim, index, source, reduce, *, include_self): the
 * reductions of scatter_reduce applied to whole slices along dim. */
static tpu_status_t index_reduce_rule(tpu_lower_ctx *c) {
  scatter_op so = {REPLACE, false};
  TPU_RETURN_IF_ERROR(scatter_reduction(c, &so));
  tpu_hlo_value x, idx, src;
  int dim = index_operands(c, tpu_lower_opmath(OUT->dtype), &x, &idx, &src);
  tpu_lower_require(c, all_in_range(c, idx, 0, tpu_hlo_type_of(B, x)->dims[dim]), TPU_ERR_INDEX,
                    "index out of range in self");
  index_plan p = along_dim(tpu_hlo_rank(B, x), dim);
  return done(c, reduce_into(c, &p, x, as_vectors(c, idx), src, so, tpu_lower_bool(c, 5, true)));
}

/* index_fill(self, dim, index, value): value a Scalar or a 0-dim tensor. */
static tpu_status_t index_fill_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = at_least_1d(c, tpu_lower_tensor(c, 0));
  tpu_hlo_type xt = *tpu_hlo_type_of(B, x);
  int rank = xt.rank, dim = tpu_lower_wrap_dim(c, tpu_lower_int(c, 1, 0), rank);
  int64_t size = xt.dims[dim];
  tpu_hlo_value idx = flat(c, index_arg(c, 2));
  require_index(c, idx, -size, size, dim, TPU_ERR_INDEX, IN_BOUNDS);
  /* A mask along dim: true at every index, broadcast across the rest. */
  tpu_hlo_type mt = tpu_hlo_make_type(TPU_BOOL, 1, &size);
  tpu_hlo_value ones = tpu_hlo_convert(B, const_like(c, idx, 1.0), TPU_BOOL);
  index_plan p = along_dim(1, 0);
  tpu_hlo_value mask = plan_scatter(c, &p, tpu_hlo_const_f64(B, &mt, 0.0), as_vectors(c, wrap_negative(c, idx, size)),
                                    ones, REPLACE);
  tpu_hlo_type bt = with_dtype(&xt, TPU_BOOL);
  int64_t bdim = dim;
  mask = tpu_hlo_broadcast_in_dim(B, mask, &bt, &bdim);
  tpu_hlo_value v = tpu_hlo_broadcast_to(B, tpu_lower_scalar(c, 3, OUT->dtype), &xt);
  return done(c, tpu_hlo_select(B, mask, v, x));
}

/* --- advanced indexing: index, index_put ------------------------------------------ */

/* "[2], [3]": the shapes of the index tensors in list |l|. */
static void index_shapes(const tpu_lower_arg *l, char *buf, size_t cap) {
  buf[0] = '\0';
  for (int i = 0; i < l->n; i++) {
    if (l->item_dtypes[i] == TPU_INVALID) continue;
    size_t n = strlen(buf);
    if (n > 0) n += (size_t)snprintf(buf + n, cap - n, ", ");
    if (n < cap) tpu_lower_shape_str(buf + n, cap - n, l->item_ranks[i], l->item_sizes[i]);
  }
}

static bool is_mask(tpu_dtype_t t) { return t == TPU_BOOL || t == TPU_U8; }

/* PyTorch's checks of an index list (arg 1) against self (arg 0); finds the
 * list position of the first boolean mask (-1 if none) and counts the index
 * tensors. */
static tpu_status_t check_indices(tpu_lower_ctx *c, int *out_mask, int *out_tensors) {
  const tpu_lower_arg *l = &c->args[1];
  int used = 0;
  *out_mask = -1;
  *out_tensors = 0;
  for (int i = 0; i < l->n; i++) {
    tpu_dtype_t t = l->item_dtypes[i];
    if (t == TPU_INVALID) {
      used++;
      continue;
    }
    if (t != TPU_S64 && t != TPU_S32 && !is_mask(t))
      return tpu_lower_error(c, TPU_ERR_INDEX, "tensors used as indices must be long, int, byte or bool tensors");
    if (is_mask(t) && *out_mask < 0) *out_mask = i;
    used += is_mask(t) ? l->item_ranks[i] : 1;
    ++*out_tensors;
  }
  if (used > c->args[0].rank)
    return tpu_lower_error(c, TPU_ERR_INDEX, "too many indices for tensor of dimension %d (got %d)", c->args[0].rank, used);
  return NULL;
}

/* Integer index tensors, broadcast together: the plan, the coordinates
 * (broadcast shape + [number of index tensors], negatives wrapped) and
 * whether every index is in range. Adjacent index tensors put the broadcast
 * dims where they stand; separated ones put them first (NumPy's rule). */
typedef struct advanced_index {
  index_plan plan;
  tpu_hlo_value coords;
  bounds in_range; /* IN_BOUNDS's, the dim being the index tensor's place among them */
} advanced_index;

static tpu_status_t advanced(tpu_lower_ctx *c, advanced_index *a) {
  const tpu_lower_arg *x = &c->args[0], *l = &c->args[1];
  index_plan *p = &a->plan;
  *p = (index_plan){.rank = x->rank};
  int64_t shape[TPU_HLO_MAX_RANK];
  int srank = 0;
  bool adjacent = true;
  for (int i = 0; i < l->n; i++) {
    if (l->item_dtypes[i] == TPU_INVALID) continue;
    if (p->num > 0 && p->dims[p->num - 1] != i - 1) adjacent = false;
    p->dims[p->num++] = i;
    int r = l->item_ranks[i];
    const int64_t *s = l->item_sizes[i];
    bool ok = true;
    for (int k = 0; k < r && k < srank; k++) {
      int64_t *d = &shape[srank - 1 - k], e = s[r - 1 - k];
      if (*d == 1) *d = e;
      else if (e != 1 && e != *d) ok = false;
    }
    if (!ok) {
      char shapes[512];
      index_shapes(l, shapes, sizeof shapes);
      return tpu_lower_error(c, TPU_ERR_INDEX,
                             "shape mismatch: indexing tensors could not be broadcast together with shapes %s", shapes);
    }
    if (r > srank) {
      memmove(shape + (r - srank), shape, (size_t)srank * sizeof *shape);
      for (int k = 0; k < r - srank; k++) shape[k] = s[k];
      srank = r;
    }
  }
  p->batch_rank = srank;
  p->first = adjacent ? (int)p->dims[0] : 0;
  tpu_hlo_type one = tpu_hlo_make_type(TPU_S64, srank + 1, shape);
  one.dims[srank] = 1;
  tpu_hlo_type bt = tpu_hlo_make_type(TPU_S64, srank, shape);
  tpu_hlo_value parts[TPU_HLO_MAX_RANK];
  for (int i = 0; i < p->num; i++) {
    int64_t size = x->sizes[p->dims[i]];
    tpu_hlo_value idx = tpu_hlo_broadcast_to(B, tpu_lower_list_item(c, 1, (int)p->dims[i]), &bt);
    bounds ok = index_bounds(c, idx, -size, size, i, size);
    if (i == 0) a->in_range = ok;
    else fold_bounds(c, &a->in_range, &ok);
    parts[i] = reshape(c, wrap_negative(c, idx, size), one.rank, one.dims);
  }
  a->coords = tpu_hlo_concatenate(B, parts, p->num, srank);
  return NULL;
}

/* index.Tensor(self, indices): None entries are full slices. */
static tpu_status_t index_rule(tpu_lower_ctx *c) {
  int mask, tensors;
  TPU_RETURN_IF_ERROR(check_indices(c, &mask, &tensors));
  if (mask >= 0)
    return tpu_lower_error(c, TPU_ERR_NOT_IMPLEMENTED,
                           "%s: boolean mask indices give a result whose size depends on the data; "
                           "they are not lowered to a program", c->op);
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  if (tensors == 0) return done(c, x);
  advanced_index a;
  TPU_RETURN_IF_ERROR(advanced(c, &a));
  tpu_lower_require_values(c, a.in_range.ok, 3, a.in_range.values, TPU_ERR_INDEX, IN_BOUNDS);
  return done(c, plan_gather(c, &a.plan, x, a.coords));
}

/* Whether |v| (rank vr) broadcasts to |to| (rank tr), trailing dims aligned. */
static bool broadcasts(int vr, const int64_t *v, int tr, const int64_t *to) {
  if (vr > tr) return false;
  for (int i = 0; i < vr; i++) {
    int64_t a = v[vr - 1 - i], b = to[tr - 1 - i];
    if (a != 1 && a != b) return false;
  }
  return true;
}

static tpu_status_t value_shape_error(tpu_lower_ctx *c, int rank, const int64_t *dims) {
  char v[256], r[256];
  tpu_lower_shape_str(v, sizeof v, c->args[2].rank, c->args[2].sizes);
  tpu_lower_shape_str(r, sizeof r, rank, dims);
  return tpu_lower_error(c, TPU_ERR_RUNTIME, "shape mismatch: value tensor of shape %s cannot be broadcast to indexing result of shape %s", v, r);
}

/* x[mask] = v for one boolean mask among full slices (self = P + M + Q with
 * the mask's shape M at list position p). The indexing result P + [n] + Q
 * has n = the number of True elements, known only at run time: a v that
 * broadcasts along n is a select; a v with n values along that dim is
 * picked by each True element's rank (a prefix count), n checked at run
 * time. */
static tpu_status_t mask_put(tpu_lower_ctx *c, int pos, bool accumulate) {
  const tpu_lower_arg *xa = &c->args[0], *l = &c->args[1], *va = &c->args[2];
  int p = pos, k = l->item_ranks[pos], q = xa->rank - p - k;
  const int64_t *ms = l->item_sizes[pos];
  for (int j = 0; j < k; j++) {
    if (ms[j] == xa->sizes[p + j]) continue;
    char m[256], s[256];
    tpu_lower_shape_str(m, sizeof m, k, ms);
    tpu_lower_shape_str(s, sizeof s, xa->rank, xa->sizes);
    return tpu_lower_error(c, TPU_ERR_INDEX, "The shape of the mask %s at index %d does not match the shape of the indexed tensor %s at index %d", m, j, s, p + j);
  }
  /* The indexing result with n unknown: P + [n] + Q. */
  int64_t r[TPU_HLO_MAX_RANK];
  int rr = p + 1 + q;
  memcpy(r, xa->sizes, (size_t)p * sizeof *r);
  memcpy(r + p + 1, xa->sizes + p + k, (size_t)q * sizeof *r);
  int vr = va->rank;
  int64_t m = vr > q ? va->sizes[vr - 1 - q] : 1;
  r[p] = m;
  if (!broadcasts(vr, va->sizes, rr, r)) return value_shape_error(c, rr, r);

  tpu_dtype_t t = accumulate ? tpu_lower_opmath(OUT->dtype) : OUT->dtype;
  tpu_hlo_value x = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t);
  tpu_hlo_type xt = tpu_hlo_make_type(t, xa->rank, xa->sizes);
  tpu_hlo_type vt = tpu_hlo_make_type(t, rr, r);
  tpu_hlo_value v = tpu_hlo_broadcast_to(B, tpu_lower_tensor(c, 2), &vt);
  /* The mask over self: P and Q as size-1 dims. */
  tpu_hlo_type mt = tpu_hlo_make_type(TPU_BOOL, xa->rank, xa->sizes);
  for (int d = 0; d < xa->rank; d++)
    if (d < p || d >= p + k) mt.dims[d] = 1;
  tpu_hlo_value mask = tpu_hlo_convert(B, tpu_lower_list_item(c, 1, pos), TPU_BOOL);
  mask = reshape(c, mask, mt.rank, mt.dims);
  tpu_hlo_value picked;
  if (m == 1) {
    tpu_hlo_type one = xt; /* v with [1]*k in place of n */
    for (int d = p; d < p + k; d++) one.dims[d] = 1;
    picked = tpu_hlo_broadcast_to(B, reshape(c, v, one.rank, one.dims), &xt);
  } else {
    tpu_hlo_value mflat = flat(c, tpu_hlo_convert(B, mask, TPU_S64));
    tpu_hlo_value rank1 = tpu_lower_scan(B, mflat, 0, TPU_HLO_ADD);
    tpu_hlo_value count = tpu_lower_reduce(B, mflat, TPU_HLO_ADD, (int64_t[]){0}, 1);
    tpu_lower_require(c, tpu_hlo_compare(B, TPU_HLO_EQ, count, tpu_hlo_scalar_i64(B, TPU_S64, m)), TPU_ERR_RUNTIME,
                      "shape mismatch: value tensor cannot be broadcast to indexing result (one value per True element of the mask)");
    tpu_hlo_value at = tpu_hlo_clamp(B, tpu_hlo_scalar_i64(B, TPU_S64, 0),
                                     tpu_hlo_binary(B, TPU_HLO_SUB, rank1, const_like(c, rank1, 1.0)),
                                     tpu_hlo_scalar_i64(B, TPU_S64, m > 0 ? m - 1 : 0));
    index_plan pl = along_dim(rr, p);
    picked = plan_gather(c, &pl, v, as_vectors(c, at)); /* P + [mask elements] + Q */
    picked = reshape(c, picked, xt.rank, xt.dims);
  }
  tpu_hlo_type bt = with_dtype(&xt, TPU_BOOL);
  mask = tpu_hlo_broadcast_to(B, mask, &bt);
  if (accumulate) picked = tpu_hlo_binary(B, t == TPU_BOOL ? TPU_HLO_OR : TPU_HLO_ADD, x, picked);
  return done(c, tpu_hlo_select(B, mask, picked, x));
}

/* _index_put_impl_(self, indices, values, accumulate, unsafe), index_put(_)
 * (self, indices, values, accumulate). */
static tpu_status_t index_put_rule(tpu_lower_ctx *c) {
  bool accumulate = tpu_lower_bool(c, 3, false);
  c->writes_add = accumulate;
  const tpu_lower_arg *va = &c->args[2];
  int mask, tensors;
  TPU_RETURN_IF_ERROR(check_indices(c, &mask, &tensors));
  /* PyTorch writes one value through a lone mask with masked_fill_, which
   * converts the value's dtype but takes only bool masks. */
  int64_t values = 1;
  for (int i = 0; i < va->rank; i++) values *= va->sizes[i];
  bool fill = !accumulate && mask >= 0 && tensors == 1 && values == 1;
  if (fill && c->args[1].item_dtypes[mask] != TPU_BOOL)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "masked_fill_ only supports boolean masks, but got mask with dtype %s",
                           tpu_dtype_name(c->args[1].item_dtypes[mask]));
  if (!fill && va->dtype != c->args[0].dtype)
    return tpu_lower_error(c, TPU_ERR_RUNTIME,
                           "Index put requires the source and destination dtypes match, got %s for the destination and %s for the source.",
                           tpu_dtype_name(c->args[0].dtype), tpu_dtype_name(va->dtype));
  if (mask >= 0 && tensors > 1)
    return tpu_lower_error(c, TPU_ERR_NOT_IMPLEMENTED,
                           "%s: a boolean mask together with other index tensors is not supported on tpu", c->op);
  if (mask >= 0) return mask_put(c, mask, accumulate);
  tpu_dtype_t t = accumulate ? tpu_lower_opmath(OUT->dtype) : OUT->dtype;
  tpu_hlo_value x = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t);
  if (tensors == 0) { /* every entry a full slice: the values fill self */
    if (!broadcasts(va->rank, va->sizes, c->args[0].rank, c->args[0].sizes))
      return value_shape_error(c, c->args[0].rank, c->args[0].sizes);
    tpu_hlo_type xt = tpu_hlo_make_type(t, c->args[0].rank, c->args[0].sizes);
    tpu_hlo_value v = tpu_hlo_broadcast_to(B, tpu_lower_tensor(c, 2), &xt);
    if (!accumulate) return done(c, v);
    return done(c, tpu_hlo_binary(B, t == TPU_BOOL ? TPU_HLO_OR : TPU_HLO_ADD, x, v));
  }
  advanced_index a;
  TPU_RETURN_IF_ERROR(advanced(c, &a));
  tpu_hlo_type rt = plan_result(&a.plan, tpu_hlo_type_of(B, x), tpu_hlo_type_of(B, a.coords));
  if (tpu_hlo_failed(B)) return NULL;
  if (!broadcasts(va->rank, va->sizes, rt.rank, rt.dims)) return value_shape_error(c, rt.rank, rt.dims);
  tpu_lower_require_values(c, a.in_range.ok, 3, a.in_range.values, TPU_ERR_INDEX, IN_BOUNDS);
  tpu_hlo_value v = tpu_hlo_broadcast_to(B, tpu_lower_tensor(c, 2), &rt);
  return done(c, plan_scatter(c, &a.plan, x, a.coords, v, accumulate ? COMBINE_ADD : REPLACE));
}

/* --- embedding backward, masked_scatter ------------------------------------------- */

/* embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
 * scale_grad_by_freq): rows summed per index; the padding row gets no
 * gradient; with scale_grad_by_freq each row is divided by how often its
 * index occurs. Out-of-range indices are ignored, as on CPU. */
static tpu_status_t embedding_backward_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = tpu_lower_opmath(OUT->dtype);
  tpu_hlo_value idx = flat(c, index_arg(c, 1));
  int64_t gd[2] = {numel_of(c, idx), OUT->dims[1]};
  tpu_hlo_value g = reshape(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t), 2, gd);
  tpu_hlo_value at = as_vectors(c, idx);
  index_plan rows = along_dim(2, 0), cells = along_dim(1, 0);
  if (tpu_lower_bool(c, 4, false)) {
    int64_t w = OUT->dims[0];
    tpu_hlo_type ct = tpu_hlo_make_type(t, 1, &w);
    tpu_hlo_value ones = tpu_hlo_convert(B, const_like(c, idx, 1.0), t);
    tpu_hlo_value counts = plan_scatter(c, &cells, tpu_hlo_const_f64(B, &ct, 0.0), at, ones, COMBINE_ADD);
    tpu_hlo_value scale = tpu_hlo_binary(B, TPU_HLO_DIV, ones, plan_gather(c, &cells, counts, at));
    tpu_hlo_type bt = *tpu_hlo_type_of(B, g);
    g = tpu_hlo_binary(B, TPU_HLO_MUL, g, tpu_hlo_broadcast_in_dim(B, scale, &bt, (int64_t[]){0}));
  }
  tpu_hlo_value pad = tpu_hlo_compare(B, TPU_HLO_EQ, idx, const_like(c, idx, (double)tpu_lower_int(c, 3, -1)));
  tpu_hlo_type bt = with_dtype(tpu_hlo_type_of(B, g), TPU_BOOL);
  g = tpu_hlo_select(B, tpu_hlo_broadcast_in_dim(B, pad, &bt, (int64_t[]){0}), const_like(c, g, 0.0), g);
  tpu_hlo_type wt = with_dtype(OUT, t);
  return done(c, plan_scatter(c, &rows, tpu_hlo_const_f64(B, &wt, 0.0), at, g, COMBINE_ADD));
}

/* masked_scatter(self, mask, source): the k-th True element (row-major)
 * takes source's k-th element. */
static tpu_status_t masked_scatter_rule(tpu_lower_ctx *c) {
  if (c->args[1].dtype != TPU_BOOL) /* the CPU kernel's check; the meta function lacks it */
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "masked_scatter_ only supports boolean masks, but got mask with dtype %s",
                           tpu_dtype_name(c->args[1].dtype));
  tpu_hlo_value x = tpu_lower_operand(c, 0, OUT->dtype, OUT);
  tpu_hlo_value mask = tpu_lower_operand(c, 1, TPU_BOOL, OUT);
  tpu_hlo_value src = flat(c, tpu_lower_tensor(c, 2));
  int64_t n = numel_of(c, src);
  tpu_hlo_value mflat = flat(c, tpu_hlo_convert(B, mask, TPU_S64));
  tpu_hlo_value rank1 = tpu_lower_scan(B, mflat, 0, TPU_HLO_ADD);
  tpu_hlo_value count = tpu_lower_reduce(B, mflat, TPU_HLO_ADD, (int64_t[]){0}, 1);
  tpu_lower_require(c, tpu_hlo_compare(B, TPU_HLO_LE, count, tpu_hlo_scalar_i64(B, TPU_S64, n)), TPU_ERR_RUNTIME,
                    "Number of elements of source < number of ones in mask");
  tpu_hlo_value at = tpu_hlo_clamp(B, tpu_hlo_scalar_i64(B, TPU_S64, 0),
                                   tpu_hlo_binary(B, TPU_HLO_SUB, rank1, const_like(c, rank1, 1.0)),
                                   tpu_hlo_scalar_i64(B, TPU_S64, n > 0 ? n - 1 : 0));
  index_plan p = along_dim(1, 0);
  tpu_hlo_value picked = plan_gather(c, &p, tpu_hlo_convert(B, src, OUT->dtype), as_vectors(c, at));
  return done(c, tpu_hlo_select(B, mask, reshape(c, picked, OUT->rank, OUT->dims), x));
}

/* nonzero_static(self, *, size, fill_value): the coordinates of the first
 * |size| nonzero elements in row-major order, rows past the count filled
 * with fill_value. Each nonzero element's rank (a prefix count) is the row
 * it scatters its linear index to; ranks past |size| are dropped. The
 * data-dependent nonzero runs this with the count it reads back. */
static tpu_status_t nonzero_static_rule(tpu_lower_ctx *c) {
  int rank = c->args[0].rank;
  int64_t size = OUT->dims[0];
  tpu_hlo_value x = flat(c, tpu_lower_tensor(c, 0));
  int64_t n = numel_of(c, x);
  tpu_hlo_type nt = tpu_hlo_make_type(TPU_S64, 1, &n);
  tpu_hlo_value nz = tpu_hlo_convert(B, x, TPU_BOOL);
  tpu_hlo_value row = tpu_hlo_binary(B, TPU_HLO_SUB, tpu_lower_scan(B, tpu_hlo_convert(B, nz, TPU_S64), 0, TPU_HLO_ADD),
                                     tpu_hlo_const_i64(B, &nt, 1));
  row = tpu_hlo_select(B, nz, row, tpu_hlo_const_i64(B, &nt, size)); /* zeros go nowhere */
  int64_t rows = size;
  tpu_hlo_type lt = tpu_hlo_make_type(TPU_S64, 1, &rows);
  tpu_hlo_scatter_dims d;
  memset(&d, 0, sizeof d);
  d.num_inserted = d.num_to_operand = 1;
  d.index_vector_dim = 1;
  int64_t idx_shape[2] = {n, 1};
  tpu_hlo_value lin = tpu_hlo_scatter(B, tpu_hlo_const_i64(B, &lt, -1), reshape(c, row, 2, idx_shape),
                                      tpu_hlo_iota(B, &nt, 0), &d, NULL, true);
  tpu_hlo_value missing = tpu_hlo_compare(B, TPU_HLO_LT, lin, tpu_hlo_const_i64(B, &lt, 0));
  tpu_hlo_value fill = tpu_hlo_const_i64(B, &lt, tpu_lower_int(c, 2, -1));
  tpu_hlo_value cols[TPU_HLO_MAX_RANK];
  int64_t stride = 1, col_shape[2] = {rows, 1};
  for (int i = rank - 1; i >= 0; i--) {
    int64_t dim = c->args[0].sizes[i];
    tpu_hlo_value coord = tpu_hlo_binary(B, TPU_HLO_DIV, lin, tpu_hlo_const_i64(B, &lt, stride));
    if (dim > 0) coord = tpu_hlo_binary(B, TPU_HLO_REM, coord, tpu_hlo_const_i64(B, &lt, dim));
    cols[i] = reshape(c, tpu_hlo_select(B, missing, fill, coord), 2, col_shape);
    stride *= dim > 0 ? dim : 1;
  }
  if (rank == 0) return done(c, tpu_hlo_const_i64(B, OUT, 0));
  return done(c, tpu_hlo_concatenate(B, cols, rank, 1));
}

const tpu_lower_rule tpu_rules_index[] = {
    {{"nonzero_static", "nonzero_static.out"}, nonzero_static_rule, 0, 0},
    {{"index_select", "index_select.out"}, index_select_rule, 0, 0},
    {{"embedding", "embedding.out"}, embedding_rule, 0, 0},
    {{"gather", "gather.out"}, gather_rule, 0, 0},
    {{"take", "take.out"}, take_rule, 0, 0},
    {{"put_", "put", "put.out"}, put_rule, 0, 0},
    {{"scatter.src", "scatter_.src", "scatter.src_out"}, scatter_rule, 0, SCATTER},
    {{"scatter.value", "scatter_.value", "scatter.value_out"}, scatter_rule, 0, SCATTER},
    {{"scatter.reduce", "scatter_.reduce", "scatter.reduce_out"}, scatter_rule, 0, SCATTER_LEGACY_REDUCE},
    {{"scatter.value_reduce", "scatter_.value_reduce", "scatter.value_reduce_out"}, scatter_rule, 0, SCATTER_LEGACY_REDUCE},
    {{"scatter_add", "scatter_add_", "scatter_add.out"}, scatter_rule, 0, SCATTER_ADD},
    {{"scatter_reduce.two", "scatter_reduce_.two", "scatter_reduce.two_out"}, scatter_rule, 0, SCATTER_REDUCE_TWO},
    {{"index_add", "index_add_", "index_add.out"}, index_add_rule, 0, COMBINE_ADD},
    {{"index_copy", "index_copy_", "index_copy.out"}, index_add_rule, 0, REPLACE},
    {{"index_reduce", "index_reduce_", "index_reduce.out"}, index_reduce_rule, 0, INDEX_REDUCE},
    {{"index_fill.int_Scalar", "index_fill_.int_Scalar", "index_fill.int_Scalar_out"}, index_fill_rule,
     TPU_RULE_CHECKED_SCALARS, 0},
    {{"index_fill.int_Tensor", "index_fill_.int_Tensor", "index_fill.int_Tensor_out"}, index_fill_rule, 0, 0},
    {{"index.Tensor", "index.Tensor_out"}, index_rule, 0, 0},
    {{"_index_put_impl_", "index_put_", "index_put", "index_put.out"}, index_put_rule, 0, 0},
    {{"embedding_dense_backward", "embedding_dense_backward.out"}, embedding_backward_rule, 0, 0},
    {{"masked_scatter_", "masked_scatter", "masked_scatter.out"}, masked_scatter_rule, 0, 0},
};
TPU_COUNT_RULES(index);
