/* Reductions: sum, mean, prod, amax/amin, max/min with indices, argmax/argmin,
 * var/std, logsumexp, vector norms, all/any, count_nonzero, hash_tensor,
 * segment reductions, softmax and log_softmax with their backwards,
 * cumulative sums, products and logcumsumexp; _assert_async, the runtime
 * assertion PyTorch's decompositions (one_hot's class check) put in graphs.
 *
 * Sums accumulate in the output's opmath type (float32 for half types) and
 * round once, as PyTorch's CPU kernels do; integer and bool sums accumulate
 * in the output type PyTorch's meta chose (int64). Keepdim needs no code:
 * tpu_lower_set_output reshapes a reduced value to the output's shape. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/strbuf.h"
#include "lower/rules.h"


/* The type sums accumulate in: opmath, and int64 for a bool result (a sum
 * cast to bool is "any element nonzero"). */
static tpu_dtype_t acc_of(tpu_dtype_t t) { return t == TPU_BOOL ? TPU_S64 : tpu_lower_opmath(t); }

/* Where PyTorch's CPU kernel accumulates in acc_type<T, false> (scans,
 * variances): double for float32, complex<double> for complex64, else
 * opmath. */
static tpu_dtype_t cpu_acc_of(tpu_dtype_t t) {
  return t == TPU_F32 ? TPU_F64 : t == TPU_C64 ? TPU_C128 : tpu_lower_opmath(t);
}

/* Input 0 converted to |dtype|. */
static tpu_hlo_value input(tpu_lower_ctx *c, tpu_dtype_t dtype) { return tpu_hlo_convert(B, tpu_lower_tensor(c, 0), dtype); }

/* Input 0 as PyTorch's sums and products see it: cast to the result's dtype
 * (the dtype argument, or the out= tensor's), then widened to accumulate. */
static tpu_hlo_value acc_input(tpu_lower_ctx *c) {
  return tpu_hlo_convert(B, input(c, OUT->dtype), acc_of(OUT->dtype));
}

/* The dims argument |arg| reduces over input 0 (None or [] = all). An
 * argument that is not a dim (the dtype of the full-reduction overloads)
 * means all dims. */
static int dims_arg(const tpu_lower_ctx *c, int arg, int64_t *dims) {
  tpu_arg_kind_t kind = arg < c->num_args ? c->args[arg].kind : TPU_ARG_NONE;
  if (kind != TPU_ARG_INT && kind != TPU_ARG_INT_LIST) arg = c->num_args;
  return tpu_lower_reduce_dims(c, arg, c->args[0].rank, dims);
}

/* How many elements of input 0 each output element reduces. */
static int64_t count_of(const tpu_lower_ctx *c, const int64_t *dims, int n) {
  int64_t count = 1;
  for (int i = 0; i < n; i++) count *= c->args[0].sizes[dims[i]];
  return count;
}

static int64_t numel_of(const tpu_lower_ctx *c, int arg) {
  int64_t numel = 1;
  for (int i = 0; i < c->args[arg].rank; i++) numel *= c->args[arg].sizes[i];
  return numel;
}

/* |r|, a reduction of |x| over |dims|, broadcast back to |x|'s shape. */
static tpu_hlo_value unreduce(tpu_lower_ctx *c, tpu_hlo_value r, tpu_hlo_value x, const int64_t *dims, int n) {
  tpu_hlo_type to = *tpu_hlo_type_of(B, x);
  to.dtype = tpu_hlo_dtype(B, r);
  int64_t kept[TPU_HLO_MAX_RANK];
  int nk = 0;
  for (int i = 0, j = 0; i < to.rank; i++) {
    if (j < n && dims[j] == i) j++;
    else kept[nk++] = i;
  }
  return tpu_hlo_broadcast_in_dim(B, r, &to, kept);
}

/* max (min) of |x| over |dims|; NaN wins, as in PyTorch's max/min/amax. */
static tpu_hlo_value extreme(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_binary_t op, const int64_t *dims, int n) {
  tpu_dtype_t t = tpu_hlo_dtype(B, x);
  if (t == TPU_BOOL) return tpu_lower_reduce(B, x, op == TPU_HLO_MAX ? TPU_HLO_OR : TPU_HLO_AND, dims, n);
  tpu_hlo_value r = tpu_lower_reduce(B, x, op, dims, n);
  if (!tpu_dtype_is_float(t)) return r;
  tpu_hlo_value any_nan = tpu_lower_reduce(B, is_nan(c, x), TPU_HLO_OR, dims, n);
  return tpu_hlo_select(B, any_nan, const_like(c, r, NAN), r);
}

/* The max (min) of |x| along |dim| and its first index. */
static void arg_extreme(tpu_lower_ctx *c, tpu_hlo_value x, bool is_max, int dim, tpu_hlo_value *out_value,
                        tpu_hlo_value *out_index) {
  if (tpu_hlo_dtype(B, x) == TPU_BOOL) x = tpu_hlo_convert(B, x, TPU_U8); /* compares as a number */
  tpu_dtype_t t = tpu_hlo_dtype(B, x);
  tpu_hlo_type it = *tpu_hlo_type_of(B, x);
  it.dtype = TPU_S64;
  tpu_hlo_value xs[2] = {x, tpu_hlo_iota(B, &it, dim)};
  /* (lowest, INT64_MAX) is the body's identity: every element beats it. */
  tpu_hlo_value inits[2] = {is_max ? tpu_hlo_scalar_min(B, t) : tpu_hlo_scalar_max(B, t),
                            tpu_hlo_scalar_i64(B, TPU_S64, INT64_MAX)};
  tpu_hlo_region body;
  tpu_lower_extreme_body(c, t, is_max, false, &body);
  int64_t dims[1] = {dim};
  tpu_hlo_value out[2];
  tpu_hlo_reduce(B, xs, inits, 2, dims, 1, &body, out);
  *out_value = out[0];
  *out_index = out[1];
}

/* --- sums and products ------------------------------------------------------ */

enum { SUM, NANSUM, MEAN };

/* sum / nansum / mean (data), full or over dims: (self, [dim, keepdim,] *, dtype). */
static tpu_status_t sum_rule(tpu_lower_ctx *c) {
  int64_t dims[TPU_HLO_MAX_RANK];
  int n = dims_arg(c, 1, dims);
  tpu_hlo_value x = acc_input(c);
  if (c->data == NANSUM && tpu_dtype_is_float(tpu_hlo_dtype(B, x)))
    x = tpu_hlo_select(B, is_nan(c, x), const_like(c, x, 0.0), x);
  tpu_hlo_value r = tpu_lower_reduce(B, x, TPU_HLO_ADD, dims, n);
  /* mean of no elements is 0/0 = NaN, as in PyTorch */
  if (c->data == MEAN) r = dvd(c, r, const_like(c, r, (double)count_of(c, dims, n)));
  tpu_lower_set_output(c, 0, r);
  return NULL;
}

/* prod(self, [dim, keepdim,] *, dtype) */
static tpu_status_t prod_rule(tpu_lower_ctx *c) {
  int64_t dims[TPU_HLO_MAX_RANK];
  int n = dims_arg(c, 1, dims);
  tpu_lower_set_output(c, 0, tpu_lower_reduce(B, acc_input(c), TPU_HLO_MUL, dims, n));
  return NULL;
}

/* --- max and min ------------------------------------------------------------- */

static const char *minmax_name(tpu_lower_ctx *c) { return c->data == TPU_HLO_MAX ? "max" : "min"; }

/* amax/amin(self, dim[], keepdim); data: MAX or MIN. PyTorch's meta function
 * refuses to reduce an empty dim. */
static tpu_status_t amax_rule(tpu_lower_ctx *c) {
  int64_t dims[TPU_HLO_MAX_RANK];
  int n = dims_arg(c, 1, dims);
  tpu_lower_set_output(c, 0, extreme(c, tpu_lower_tensor(c, 0), (tpu_hlo_binary_t)c->data, dims, n));
  return NULL;
}

/* max()/min(self): all dims. Empty input has no max, an error; the out=
 * overload (self, out) returns the identity instead, as PyTorch's CPU kernel
 * does. */
static tpu_status_t max_all_rule(tpu_lower_ctx *c) {
  if (numel_of(c, 0) == 0 && c->num_args == 1)
    return tpu_lower_error(c, TPU_ERR_RUNTIME,
                           "%s(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                           "reduction dim with the 'dim' argument.", minmax_name(c));
  return amax_rule(c);
}

/* max.dim/min.dim(self, dim, keepdim) -> (values, indices); data: MAX or MIN. */
static tpu_status_t max_dim_rule(tpu_lower_ctx *c) {
  int rank = c->args[0].rank;
  int dim = tpu_lower_wrap_dim(c, tpu_lower_int(c, 1, 0), rank);
  if (rank > 0 && c->args[0].sizes[dim] == 0)
    return tpu_lower_error(c, TPU_ERR_INDEX, "%s(): Expected reduction dim %d to have non-zero size.",
                           minmax_name(c), dim);
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  if (rank == 0) x = tpu_hlo_reshape(B, x, 1, (int64_t[]){1}); /* reduces as a 1-element vector */
  tpu_hlo_value value, index;
  arg_extreme(c, x, c->data == TPU_HLO_MAX, dim, &value, &index);
  tpu_lower_set_output(c, 0, value);
  tpu_lower_set_output(c, 1, index);
  return NULL;
}

/* argmax/argmin(self, dim?, keepdim); dim None means the flattened input. */
static tpu_status_t argmax_rule(tpu_lower_ctx *c) {
  const char *name = c->data == TPU_HLO_MAX ? "argmax" : "argmin";
  if (c->args[0].dtype == TPU_BOOL)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "%s(): does not support bool input", name);
  int rank = c->args[0].rank;
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  int dim = 0;
  if (tpu_lower_is_none(c, 1) || rank == 0) {
    int64_t numel = numel_of(c, 0);
    x = tpu_hlo_reshape(B, x, 1, &numel);
  } else {
    dim = tpu_lower_wrap_dim(c, c->args[1].i, rank);
  }
  tpu_hlo_value value, index;
  arg_extreme(c, x, c->data == TPU_HLO_MAX, dim, &value, &index);
  tpu_lower_set_output(c, 0, index);
  return NULL;
}

/* --- statistics ------------------------------------------------------------------ */

enum { VAR = 0, STD = 1, WITH_MEAN = 2 };

/* var/std/var_mean/std_mean.correction(self, dim?, *, correction?, keepdim);
 * data: STD and WITH_MEAN bits. Two passes (mean, then the sum of squared
 * deviations) in opmath, in double for float32 (complex64), as PyTorch's CPU
 * kernel accumulates them (in float32 a var over 1024 elements came out 2x
 * further from float64 than the CPU's); the divisor max(N - correction, 0)
 * gives inf or NaN when it reaches 0, as in PyTorch. */
static tpu_status_t var_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = c->args[0].dtype;
  if (!tpu_dtype_is_float(t) && !tpu_dtype_is_complex(t)) {
    const char *name = c->data & WITH_MEAN ? (c->data & STD ? "std_mean" : "var_mean") : "std and var";
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "%s only support floating point and complex dtypes", name);
  }
  int64_t dims[TPU_HLO_MAX_RANK];
  int n = dims_arg(c, 1, dims);
  double count = (double)count_of(c, dims, n);
  tpu_hlo_value x = input(c, cpu_acc_of(t));
  tpu_hlo_value sum = tpu_lower_reduce(B, x, TPU_HLO_ADD, dims, n);
  tpu_hlo_value mean = dvd(c, sum, const_like(c, sum, count));
  tpu_hlo_value d = sub(c, x, unreduce(c, mean, x, dims, n));
  if (tpu_dtype_is_complex(t)) d = un(c, TPU_HLO_ABS, d);
  tpu_hlo_value m2 = tpu_lower_reduce(B, mul(c, d, d), TPU_HLO_ADD, dims, n);
  double divisor = fmax(count - tpu_lower_float(c, 2, 1.0), 0.0);
  tpu_hlo_value var = dvd(c, m2, const_like(c, m2, divisor));
  tpu_lower_set_output(c, 0, c->data & STD ? un(c, TPU_HLO_SQRT, var) : var);
  if (c->data & WITH_MEAN) tpu_lower_set_output(c, 1, mean);
  return NULL;
}

/* logsumexp(self, dim[], keepdim): log(sum(exp(x - m))) + m with m the max,
 * taken as 0 where it is infinite (PyTorch's formula: an all -inf row gives
 * -inf, a +inf element gives +inf, not NaN). */
static tpu_status_t logsumexp_rule(tpu_lower_ctx *c) {
  int64_t dims[TPU_HLO_MAX_RANK];
  int n = dims_arg(c, 1, dims);
  tpu_hlo_value x = input(c, tpu_lower_opmath(OUT->dtype));
  const tpu_dtype_t t = tpu_hlo_dtype(B, x);
  /* a complex input's shift is its largest real part, as the CPU's kernel takes it */
  tpu_hlo_value m = tpu_lower_reduce(B, tpu_dtype_is_complex(t) ? un(c, TPU_HLO_REAL, x) : x, TPU_HLO_MAX, dims, n);
  m = tpu_hlo_select(B, cmp(c, TPU_HLO_EQ, un(c, TPU_HLO_ABS, m), const_like(c, m, INFINITY)), const_like(c, m, 0.0), m);
  m = tpu_hlo_convert(B, m, t);
  tpu_hlo_value e = un(c, TPU_HLO_EXP, sub(c, x, unreduce(c, m, x, dims, n)));
  tpu_hlo_value s = tpu_lower_reduce(B, e, TPU_HLO_ADD, dims, n);
  tpu_lower_set_output(c, 0, add(c, un(c, TPU_HLO_LOG, s), m));
  return NULL;
}

/* linalg_vector_norm(self, ord, dim?, keepdim, *, dtype?); ord is a
 * constant. Computed on |x| in the result's opmath type. */
static tpu_status_t norm_rule(tpu_lower_ctx *c) {
  int64_t dims[TPU_HLO_MAX_RANK];
  int n = dims_arg(c, 2, dims);
  double ord = tpu_lower_float(c, 1, 2.0);
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  if (tpu_dtype_is_complex(tpu_hlo_dtype(B, x))) x = un(c, TPU_HLO_ABS, x);
  x = un(c, TPU_HLO_ABS, tpu_hlo_convert(B, x, tpu_lower_opmath(OUT->dtype)));
  tpu_hlo_value r;
  if (isinf(ord)) {
    r = extreme(c, x, ord > 0 ? TPU_HLO_MAX : TPU_HLO_MIN, dims, n);
  } else if (ord == 0) {
    tpu_hlo_value nonzero = tpu_hlo_convert(B, cmp(c, TPU_HLO_NE, x, const_like(c, x, 0.0)), tpu_hlo_dtype(B, x));
    r = tpu_lower_reduce(B, nonzero, TPU_HLO_ADD, dims, n);
  } else if (ord == 1) {
    r = tpu_lower_reduce(B, x, TPU_HLO_ADD, dims, n);
  } else if (ord == 2) {
    r = un(c, TPU_HLO_SQRT, tpu_lower_reduce(B, mul(c, x, x), TPU_HLO_ADD, dims, n));
  } else {
    tpu_hlo_value s = tpu_lower_reduce(B, tpu_hlo_binary(B, TPU_HLO_POW, x, const_like(c, x, ord)), TPU_HLO_ADD, dims, n);
    r = tpu_hlo_binary(B, TPU_HLO_POW, s, const_like(c, s, 1.0 / ord));
  }
  tpu_lower_set_output(c, 0, r);
  return NULL;
}

/* --- logical ------------------------------------------------------------------------ */

/* all/any(self, [dim | dim[]?, keepdim]); data: AND or OR. Any input counts
 * as "nonzero"; an empty dim list reduces nothing (unlike sum's). */
static tpu_status_t all_any_rule(tpu_lower_ctx *c) {
  int64_t dims[TPU_HLO_MAX_RANK];
  bool none = c->num_args > 1 && c->args[1].kind == TPU_ARG_INT_LIST && c->args[1].n == 0;
  int n = none ? 0 : dims_arg(c, 1, dims);
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  x = cmp(c, TPU_HLO_NE, x, const_like(c, x, 0.0));
  tpu_lower_set_output(c, 0, tpu_lower_reduce(B, x, (tpu_hlo_binary_t)c->data, dims, n));
  return NULL;
}

/* count_nonzero(self, dim? | dim[]) */
static tpu_status_t count_nonzero_rule(tpu_lower_ctx *c) {
  int64_t dims[TPU_HLO_MAX_RANK];
  int n = dims_arg(c, 1, dims);
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  x = tpu_hlo_convert(B, cmp(c, TPU_HLO_NE, x, const_like(c, x, 0.0)), TPU_S64);
  tpu_lower_set_output(c, 0, tpu_lower_reduce(B, x, TPU_HLO_ADD, dims, n));
  return NULL;
}

/* hash_tensor(self, dim[], *, keepdim, mode): the XOR of the elements' 64-bit
 * patterns, as PyTorch's mode 0: floats as float64 bits, integers
 * sign-extended. */
static tpu_status_t hash_tensor_rule(tpu_lower_ctx *c) {
  int64_t dims[TPU_HLO_MAX_RANK];
  int n = dims_arg(c, 1, dims);
  bool is_float = tpu_dtype_is_float(c->args[0].dtype);
  tpu_hlo_value x = input(c, is_float ? TPU_F64 : TPU_S64);
  tpu_hlo_type bits = *tpu_hlo_type_of(B, x);
  bits.dtype = TPU_U64;
  x = tpu_hlo_bitcast(B, x, &bits);
  tpu_lower_set_output(c, 0, tpu_lower_reduce(B, x, TPU_HLO_XOR, dims, n));
  return NULL;
}

/* --- segment reductions ------------------------------------------------------------ */

enum { SEG_SUM, SEG_MEAN, SEG_MAX, SEG_MIN, SEG_PROD, SEG_COUNT_ };
static const char *const seg_names[SEG_COUNT_] = {"sum", "mean", "max", "min", "prod"};
static const tpu_hlo_binary_t seg_ops[SEG_COUNT_] = {TPU_HLO_ADD, TPU_HLO_ADD, TPU_HLO_MAX, TPU_HLO_MIN,
                                                     TPU_HLO_MUL};

/* The reduction named by string argument |arg|, or -1. */
static int seg_kind(const tpu_lower_ctx *c, int arg) {
  for (int i = 0; i < SEG_COUNT_; i++)
    if (strcmp(c->args[arg].s, seg_names[i]) == 0) return i;
  return -1;
}

static tpu_status_t seg_kind_error(tpu_lower_ctx *c, int arg) {
  return tpu_lower_error(c, TPU_ERR_RUNTIME, "reduce argument must be either sum, prod, mean, amax or amin, got %s",
                         c->args[arg].s);
}

/* The segments along |axis| of tensor argument |data|, from the lengths
 * argument or, when it is None, the offsets: |*mask| (i1 [lead..., S, D]) is
 * true where data element j lies in segment s; |*lengths| ([lead..., S], s64)
 * holds the segment lengths. */
static void segments(tpu_lower_ctx *c, int data, int lengths_arg, int offsets_arg, int axis, tpu_hlo_value *mask,
                     tpu_hlo_value *lengths) {
  tpu_hlo_value start, len;
  if (!tpu_lower_is_none(c, lengths_arg)) {
    len = tpu_hlo_convert(B, tpu_lower_tensor(c, lengths_arg), TPU_S64);
    start = sub(c, tpu_lower_scan(B, len, axis, TPU_HLO_ADD), len);
  } else {
    tpu_hlo_value off = tpu_hlo_convert(B, tpu_lower_tensor(c, offsets_arg), TPU_S64);
    int64_t n = c->args[offsets_arg].sizes[axis];
    start = tpu_hlo_slice_dim(B, off, axis, 0, n - 1, 1);
    len = sub(c, tpu_hlo_slice_dim(B, off, axis, 1, n, 1), start);
  }
  tpu_hlo_type grid = *tpu_hlo_type_of(B, start);
  grid.dims[grid.rank++] = c->args[data].sizes[axis];
  int64_t kept[TPU_HLO_MAX_RANK];
  for (int i = 0; i < grid.rank - 1; i++) kept[i] = i;
  tpu_hlo_value j = tpu_hlo_iota(B, &grid, grid.rank - 1);
  tpu_hlo_value lo = tpu_hlo_broadcast_in_dim(B, start, &grid, kept);
  tpu_hlo_value hi = add(c, lo, tpu_hlo_broadcast_in_dim(B, len, &grid, kept));
  *mask = and_(c, cmp(c, TPU_HLO_GE, j, lo), cmp(c, TPU_HLO_LT, j, hi));
  *lengths = len;
}

/* The work shape [lead..., S, D, inner...]: output |out| ([lead..., S,
 * inner...]) with the data's |axis| size D after S, in |dtype|. */
static tpu_hlo_type seg_grid(const tpu_lower_ctx *c, const tpu_hlo_type *out, int data, int axis, tpu_dtype_t dtype) {
  tpu_hlo_type t = *out;
  t.dtype = dtype;
  for (int i = t.rank; i > axis + 1; i--) t.dims[i] = t.dims[i - 1];
  t.dims[axis + 1] = c->args[data].sizes[axis];
  t.rank++;
  return t;
}

/* |v| broadcast to |grid|: its dims from |skip| on move one up (the data
 * skips S at |axis|, an output skips D at |axis| + 1, the mask and lengths
 * skip nothing). */
static tpu_hlo_value seg_spread(tpu_lower_ctx *c, tpu_hlo_value v, const tpu_hlo_type *grid, int skip) {
  int64_t map[TPU_HLO_MAX_RANK];
  for (int i = 0; i < tpu_hlo_rank(B, v); i++) map[i] = i < skip ? i : i + 1;
  tpu_hlo_type to = *grid;
  to.dtype = tpu_hlo_dtype(B, v);
  return tpu_hlo_broadcast_in_dim(B, v, &to, map);
}

/* The identity of segment reduction |kind| shaped like |like|. */
static tpu_hlo_value seg_identity(tpu_lower_ctx *c, int kind, tpu_hlo_value like) {
  tpu_dtype_t t = tpu_hlo_dtype(B, like);
  tpu_hlo_value s = kind == SEG_MAX   ? tpu_hlo_scalar_min(B, t)
                    : kind == SEG_MIN ? tpu_hlo_scalar_max(B, t)
                                      : tpu_hlo_scalar_f64(B, t, kind == SEG_PROD ? 1.0 : 0.0);
  return tpu_hlo_broadcast_to(B, s, tpu_hlo_type_of(B, like));
}

/* segment_reduce(data, reduce, *, lengths, indices, offsets, axis, unsafe,
 * initial): each segment's elements reduced from initial (or the op's
 * identity) in opmath, as PyTorch's kernel: max and min propagate NaN, a mean
 * divides by the length and is NaN for an empty segment without initial.
 * Unless unsafe, the lengths are checked as PyTorch does. */
static tpu_status_t segment_reduce_rule(tpu_lower_ctx *c) {
  int kind = seg_kind(c, 1);
  if (kind < 0) return seg_kind_error(c, 1);
  int axis = tpu_lower_wrap_dim(c, tpu_lower_int(c, 5, 0), c->args[0].rank);
  tpu_dtype_t t = tpu_lower_opmath(OUT->dtype);
  tpu_hlo_value mask, len;
  segments(c, 0, 2, 4, axis, &mask, &len);
  if (!tpu_lower_bool(c, 6, false) && !tpu_lower_is_none(c, 2)) {
    int64_t all[TPU_HLO_MAX_RANK];
    int n = tpu_lower_reduce_dims(c, c->num_args, axis + 1, all);
    tpu_hlo_value zero = tpu_hlo_const_i64(B, tpu_hlo_type_of(B, len), 0);
    tpu_lower_require(c, tpu_lower_reduce(B, cmp(c, TPU_HLO_GE, len, zero), TPU_HLO_AND, all, n), TPU_ERR_RUNTIME,
                      "lengths contains negative value!");
    tpu_hlo_value total = tpu_lower_reduce(B, len, TPU_HLO_ADD, (int64_t[]){axis}, 1);
    tpu_hlo_value size = tpu_hlo_const_i64(B, tpu_hlo_type_of(B, total), c->args[0].sizes[axis]);
    tpu_lower_require(c, tpu_lower_reduce(B, cmp(c, TPU_HLO_EQ, total, size), TPU_HLO_AND, all, n - 1),
                      TPU_ERR_RUNTIME,
                      "segment_reduce(): Expected all rows of lengths along axis to sum to "
                      "data.size(lengths.dim()-1) when !unsafe.");
  }
  tpu_hlo_type grid = seg_grid(c, OUT, 0, axis, t);
  tpu_hlo_value x = seg_spread(c, input(c, t), &grid, axis);
  tpu_hlo_value in = seg_spread(c, mask, &grid, axis + 2);
  int64_t d[1] = {axis + 1};
  tpu_hlo_value r = tpu_lower_reduce(B, sel(c, in, x, seg_identity(c, kind, x)), seg_ops[kind], d, 1);
  bool has_initial = !tpu_lower_is_none(c, 7);
  if (has_initial) {
    tpu_hlo_value init = tpu_hlo_broadcast_to(B, tpu_lower_scalar(c, 7, t), tpu_hlo_type_of(B, r));
    tpu_hlo_value both = tpu_hlo_binary(B, seg_ops[kind], r, init);
    r = sel(c, is_nan(c, init), init, both);
  }
  if (kind == SEG_MAX || kind == SEG_MIN) {
    tpu_hlo_value nan = tpu_lower_reduce(B, and_(c, in, is_nan(c, x)), TPU_HLO_OR, d, 1);
    r = sel(c, nan, const_like(c, r, NAN), r);
  }
  if (kind == SEG_MEAN) {
    tpu_hlo_value n = seg_spread(c, len, tpu_hlo_type_of(B, r), axis + 1);
    tpu_hlo_value empty = cmp(c, TPU_HLO_EQ, n, tpu_hlo_const_i64(B, tpu_hlo_type_of(B, n), 0));
    r = sel(c, empty, has_initial ? r : const_like(c, r, NAN), dvd(c, r, tpu_hlo_convert(B, n, t)));
  }
  return done(c, r);
}

/* _segment_reduce_backward(grad, output, data, reduce, *, lengths, offsets,
 * axis, initial): PyTorch's CPU formulas. Sum and mean spread the grad (over
 * the length); max and min give it to the elements equal to the output (or
 * NaN), a positive grad split among ties; prod gives grad * output / x, and
 * to a zero the product of the others with initial. */
static tpu_status_t segment_reduce_backward_rule(tpu_lower_ctx *c) {
  int kind = seg_kind(c, 3);
  if (kind < 0) return seg_kind_error(c, 3);
  int axis = tpu_lower_wrap_dim(c, tpu_lower_int(c, 6, 0), c->args[2].rank);
  tpu_dtype_t t = tpu_lower_opmath(OUT->dtype);
  tpu_hlo_value mask, len;
  segments(c, 2, 4, 5, axis, &mask, &len);
  tpu_hlo_type out = tpu_hlo_make_type(t, c->args[1].rank, c->args[1].sizes);
  tpu_hlo_type grid = seg_grid(c, &out, 2, axis, t);
  tpu_hlo_value in = seg_spread(c, mask, &grid, axis + 2);
  tpu_hlo_value g = seg_spread(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t), &grid, axis + 1);
  tpu_hlo_value y = seg_spread(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 1), t), &grid, axis + 1);
  tpu_hlo_value x = seg_spread(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 2), t), &grid, axis);
  tpu_hlo_value zero = const_like(c, x, 0.0), e = g;
  int64_t d[1] = {axis + 1};
  if (kind == SEG_MEAN) {
    e = dvd(c, g, tpu_hlo_convert(B, seg_spread(c, len, &grid, axis + 2), t));
  } else if (kind == SEG_MAX || kind == SEG_MIN) {
    tpu_hlo_value hit = and_(c, in, or_(c, is_nan(c, x), cmp(c, TPU_HLO_EQ, x, y)));
    tpu_hlo_value ties = tpu_lower_reduce(B, tpu_hlo_convert(B, hit, t), TPU_HLO_ADD, d, 1);
    ties = seg_spread(c, ties, &grid, axis + 1);
    e = sel(c, hit, g, zero);
    tpu_hlo_value split = and_(c, cmp(c, TPU_HLO_GE, ties, const_like(c, x, 2.0)), cmp(c, TPU_HLO_GT, e, zero));
    e = sel(c, split, dvd(c, e, ties), e);
  } else if (kind == SEG_PROD) {
    tpu_hlo_value is_zero = cmp(c, TPU_HLO_EQ, x, zero);
    tpu_hlo_value factor = and_(c, in, un(c, TPU_HLO_NOT, is_zero));
    tpu_hlo_value others = tpu_lower_reduce(B, sel(c, factor, x, const_like(c, x, 1.0)), TPU_HLO_MUL, d, 1);
    if (!tpu_lower_is_none(c, 7))
      others = mul(c, others, tpu_hlo_broadcast_to(B, tpu_lower_scalar(c, 7, t), tpu_hlo_type_of(B, others)));
    tpu_hlo_value zeros = tpu_lower_reduce(B, tpu_hlo_convert(B, and_(c, in, is_zero), t), TPU_HLO_ADD, d, 1);
    others = sel(c, cmp(c, TPU_HLO_EQ, zeros, const_like(c, zeros, 1.0)), others, const_like(c, others, 0.0));
    e = sel(c, is_zero, mul(c, g, seg_spread(c, others, &grid, axis + 1)), dvd(c, mul(c, g, y), x));
  }
  return done(c, tpu_lower_reduce(B, sel(c, in, e, zero), TPU_HLO_ADD, (int64_t[]){axis}, 1));
}

/* --- softmax ------------------------------------------------------------------------ */

enum { SOFTMAX, LOG_SOFTMAX };

/* The softmax dim of argument |arg| as a dims list: none for a 0-dim input. */
static int softmax_dims(const tpu_lower_ctx *c, int arg, int rank, int64_t *dims) {
  dims[0] = tpu_lower_wrap_dim(c, tpu_lower_int(c, arg, 0), rank);
  return rank > 0 ? 1 : 0;
}

/* _softmax/_log_softmax(self, dim, half_to_float); data: 1 for log. The
 * output type (float32 with half_to_float) comes from the meta function;
 * half inputs compute in float32 either way. */
static tpu_status_t softmax_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = c->args[0].dtype;
  int rank = c->args[0].rank;
  int64_t dims[1];
  int n = softmax_dims(c, 1, rank, dims);
  if (!tpu_dtype_is_float(t)) { /* the kernel PyTorch names depends on the dim */
    char kernel[64];
    snprintf(kernel, sizeof kernel, "%ssoftmax_%skernel_impl", c->data == LOG_SOFTMAX ? "log_" : "",
             n == 0 || dims[0] == rank - 1 ? "lastdim_" : "");
    return tpu_lower_not_implemented(kernel, t);
  }
  tpu_hlo_value x = input(c, tpu_lower_opmath(OUT->dtype));
  tpu_hlo_value m = tpu_lower_reduce(B, x, TPU_HLO_MAX, dims, n);
  tpu_hlo_value shifted = sub(c, x, unreduce(c, m, x, dims, n));
  tpu_hlo_value e = un(c, TPU_HLO_EXP, shifted);
  tpu_hlo_value s = unreduce(c, tpu_lower_reduce(B, e, TPU_HLO_ADD, dims, n), x, dims, n);
  tpu_lower_set_output(c, 0, c->data == LOG_SOFTMAX ? sub(c, shifted, un(c, TPU_HLO_LOG, s)) : dvd(c, e, s));
  return NULL;
}

/* _softmax/_log_softmax_backward_data(grad_output, output, dim, input_dtype);
 * data: 1 for log.
 *   softmax:     y * (g - sum(g * y))
 *   log_softmax: g - exp(y) * sum(g) */
static tpu_status_t softmax_backward_rule(tpu_lower_ctx *c) {
  int rank = c->args[1].rank;
  int64_t dims[1];
  int n = softmax_dims(c, 2, rank, dims);
  tpu_dtype_t t = tpu_lower_opmath(OUT->dtype);
  tpu_hlo_value g = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t);
  tpu_hlo_value y = tpu_hlo_convert(B, tpu_lower_tensor(c, 1), t);
  tpu_hlo_value r;
  if (c->data == LOG_SOFTMAX) {
    tpu_hlo_value s = unreduce(c, tpu_lower_reduce(B, g, TPU_HLO_ADD, dims, n), g, dims, n);
    r = sub(c, g, mul(c, un(c, TPU_HLO_EXP, y), s));
  } else {
    tpu_hlo_value s = unreduce(c, tpu_lower_reduce(B, mul(c, g, y), TPU_HLO_ADD, dims, n), g, dims, n);
    r = mul(c, y, sub(c, g, s));
  }
  tpu_lower_set_output(c, 0, r);
  return NULL;
}

/* --- cumulative --------------------------------------------------------------------- */

/* cumsum/cumprod(self, dim, *, dtype); data: ADD or MUL. PyTorch's CPU
 * kernel keeps the running value of a float32 (complex64) scan in double
 * (acc_type<float, false>): scanned in float32, a cumsum over 4096 elements
 * came out 5x further from float64 than the CPU's. */
static tpu_status_t cumulative_rule(tpu_lower_ctx *c) {
  int dim = tpu_lower_wrap_dim(c, tpu_lower_int(c, 1, 0), c->args[0].rank);
  tpu_hlo_value x = acc_input(c);
  x = tpu_hlo_convert(B, x, cpu_acc_of(tpu_hlo_dtype(B, x)));
  tpu_lower_set_output(c, 0, tpu_lower_scan(B, x, dim, (tpu_hlo_binary_t)c->data));
  return NULL;
}

/* One step of a complex logcumsumexp along dim 0 of state[0]: the running
 * value (state[1], one row) combined with row k, as the CPU's kernel
 * combines them (the element first), written to row k of state[2]. */
static void complex_logcumsumexp_step(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *state) {
  const tpu_hlo_type *t = tpu_hlo_type_of(B, state[0]);
  tpu_hlo_value at[TPU_HLO_MAX_RANK];
  int64_t row[TPU_HLO_MAX_RANK];
  at[0] = k;
  row[0] = 1;
  for (int i = 1; i < t->rank; i++) {
    at[i] = tpu_hlo_scalar_i64(B, TPU_S64, 0);
    row[i] = t->dims[i];
  }
  tpu_hlo_value x = tpu_hlo_dynamic_slice(B, state[0], at, row);
  state[1] = complex_logaddexp_of(c, x, state[1]);
  state[2] = tpu_hlo_dynamic_update_slice(B, state[2], state[1], at);
}

/* logcumsumexp(self, dim): a scan of log(exp(a) + exp(b)) written as PyTorch
 * does, max + log1p(exp(min - max)), keeping a when both are the same
 * infinity; computed where the CPU's kernel accumulates (cpu_acc_of: in
 * float32, 4000 elements came out 3.4x further from float64). Complex values combine as the CPU's kernel
 * does, shifted by the one of larger real part (complex_logaddexp_of), in
 * its order, one element after another: each step's log1p picks the
 * principal branch, so another grouping reached imaginary parts 2 pi away. */
static tpu_status_t logcumsumexp_rule(tpu_lower_ctx *c) {
  int rank = c->args[0].rank;
  int dim = tpu_lower_wrap_dim(c, tpu_lower_int(c, 1, 0), rank);
  tpu_dtype_t t = cpu_acc_of(OUT->dtype);
  tpu_hlo_value x = input(c, t);
  if (rank == 0) x = tpu_hlo_reshape(B, x, 1, (int64_t[]){1});
  const tpu_hlo_type *xt = tpu_hlo_type_of(B, x);
  int64_t size = xt->dims[dim];
  if (size > 1 && tpu_dtype_is_complex(t)) {
    int64_t perm[TPU_HLO_MAX_RANK], back[TPU_HLO_MAX_RANK];
    for (int i = 0, k = 1; i < xt->rank; i++)
      if (i != dim) perm[k++] = i;
    perm[0] = dim;
    for (int i = 0; i < xt->rank; i++) back[perm[i]] = i;
    tpu_hlo_value state[3] = {tpu_hlo_transpose(B, x, perm)};
    const tpu_hlo_type *st = tpu_hlo_type_of(B, state[0]);
    tpu_hlo_type rt = *st; /* the running value: one row */
    rt.dims[0] = 1;
    state[1] = tpu_hlo_broadcast_to(B, tpu_hlo_scalar_f64(B, t, -INFINITY), &rt);
    state[2] = state[0];
    tpu_lower_loop(c, size, 3, state, complex_logcumsumexp_step);
    x = tpu_hlo_transpose(B, state[2], back);
  } else if (size > 1) {
    tpu_hlo_type s[2] = {tpu_hlo_make_type(t, 0, NULL), tpu_hlo_make_type(t, 0, NULL)};
    tpu_hlo_value a[2];
    tpu_hlo_region body;
    tpu_hlo_window w;
    tpu_hlo_window_init(&w, xt->rank);
    w.dims[dim] = size;
    w.pad_lo[dim] = size - 1;
    tpu_hlo_region_begin(B, 2, s, a);
    tpu_hlo_value hi = tpu_hlo_binary(B, TPU_HLO_MAX, a[0], a[1]), lo = tpu_hlo_binary(B, TPU_HLO_MIN, a[0], a[1]);
    tpu_hlo_value r = add(c, un(c, TPU_HLO_LOG1P, un(c, TPU_HLO_EXP, sub(c, lo, hi))), hi);
    tpu_hlo_value general = or_(c, cmp(c, TPU_HLO_NE, lo, hi), un(c, TPU_HLO_IS_FINITE, lo));
    r = sel(c, general, r, a[0]);
    /* XLA's max and min may drop a NaN; PyTorch's formula propagates it */
    r = sel(c, is_nan(c, a[1]), a[1], sel(c, is_nan(c, a[0]), a[0], r));
    tpu_hlo_region_end(B, &r, 1, &body);
    tpu_hlo_value init = tpu_hlo_scalar_f64(B, t, -INFINITY);
    tpu_hlo_reduce_window(B, &x, &init, 1, &w, &body, &x);
  }
  return done(c, x);
}

/* _assert_async(self) and _assert_async.msg(self, assert_msg): a runtime
 * check that the one-element tensor is nonzero, raising RuntimeError with the
 * message (PyTorch's for the plain form); the program waits for it, as
 * PyTorch's CPU kernel reads the value. The message outlives the call in the
 * cached program, so it is interned. */
static tpu_status_t assert_async_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  const int64_t n = tpu_hlo_type_numel(tpu_hlo_type_of(B, x));
  if (n != 1)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "Boolean value of Tensor with %s is ambiguous",
                           n == 0 ? "no values" : "more than one value");
  const char *message = tpu_lower_is_none(c, 1) ? "Expected Tensor with single nonzero value, but got zero"
                                                : tpu_str_intern(c->args[1].s);
  if (message == NULL) return tpu_lower_error(c, TPU_ERR_RUNTIME, "out of memory");
  tpu_lower_require(c, tpu_hlo_convert(B, tpu_hlo_reshape(B, x, 0, NULL), TPU_BOOL), TPU_ERR_RUNTIME, message);
  return NULL;
}

/* --- the table ------------------------------------------------------------------------ */

const tpu_lower_rule tpu_rules_reduce[] = {
    {{"_assert_async", "_assert_async.msg"}, assert_async_rule, 0, 0},
    {{"sum", "sum.out"}, sum_rule, 0, SUM},
    {{"sum.dim_IntList", "sum.IntList_out"}, sum_rule, 0, SUM},
    {{"nansum", "nansum.out"}, sum_rule, 0, NANSUM},
    {{"mean", "mean.dtype_out"}, sum_rule, 0, MEAN},
    {{"mean.dim", "mean.out"}, sum_rule, 0, MEAN},
    {{"prod", "prod.out"}, prod_rule, 0, 0},
    {{"prod.dim_int", "prod.int_out"}, prod_rule, 0, 0},

    {{"amax", "amax.out"}, amax_rule, 0, TPU_HLO_MAX},
    {{"amin", "amin.out"}, amax_rule, 0, TPU_HLO_MIN},
    {{"max", "max.unary_out"}, max_all_rule, 0, TPU_HLO_MAX},
    {{"min", "min.unary_out"}, max_all_rule, 0, TPU_HLO_MIN},
    {{"max.dim", "max.dim_max"}, max_dim_rule, 0, TPU_HLO_MAX},
    {{"min.dim", "min.dim_min"}, max_dim_rule, 0, TPU_HLO_MIN},
    {{"argmax", "argmax.out"}, argmax_rule, 0, TPU_HLO_MAX},
    {{"argmin", "argmin.out"}, argmax_rule, 0, TPU_HLO_MIN},

    {{"var.correction", "var.correction_out"}, var_rule, TPU_RULE_CONST_SCALARS, VAR},
    {{"std.correction", "std.correction_out"}, var_rule, TPU_RULE_CONST_SCALARS, STD},
    {{"var_mean.correction", "var_mean.correction_out"}, var_rule, TPU_RULE_CONST_SCALARS, VAR | WITH_MEAN},
    {{"std_mean.correction", "std_mean.correction_out"}, var_rule, TPU_RULE_CONST_SCALARS, STD | WITH_MEAN},
    {{"logsumexp", "logsumexp.out"}, logsumexp_rule, 0, 0},
    {{"linalg_vector_norm", "linalg_vector_norm.out"}, norm_rule, TPU_RULE_CONST_SCALARS, 0},

    {{"all", "all.all_out"}, all_any_rule, 0, TPU_HLO_AND},
    {{"all.dim", "all.out"}, all_any_rule, 0, TPU_HLO_AND},
    {{"all.dims", "all.dims_out"}, all_any_rule, 0, TPU_HLO_AND},
    {{"any", "any.all_out"}, all_any_rule, 0, TPU_HLO_OR},
    {{"any.dim", "any.out"}, all_any_rule, 0, TPU_HLO_OR},
    {{"any.dims", "any.dims_out"}, all_any_rule, 0, TPU_HLO_OR},
    {{"count_nonzero", "count_nonzero.out"}, count_nonzero_rule, 0, 0},
    {{"count_nonzero.dim_IntList", "count_nonzero.dim_IntList_out"}, count_nonzero_rule, 0, 0},
    {{"hash_tensor", "hash_tensor.out"}, hash_tensor_rule, 0, 0},
    {{"segment_reduce", "segment_reduce.out"}, segment_reduce_rule, 0, 0},
    {{"_segment_reduce_backward", "_segment_reduce_backward.out"}, segment_reduce_backward_rule, 0, 0},

    {{"_softmax", "_softmax.out"}, softmax_rule, 0, SOFTMAX},
    {{"_log_softmax", "_log_softmax.out"}, softmax_rule, 0, LOG_SOFTMAX},
    {{"_softmax_backward_data", "_softmax_backward_data.out"}, softmax_backward_rule, 0, SOFTMAX},
    {{"_log_softmax_backward_data", "_log_softmax_backward_data.out"}, softmax_backward_rule, 0, LOG_SOFTMAX},

    {{"cumsum", "cumsum_", "cumsum.out"}, cumulative_rule, 0, TPU_HLO_ADD},
    {{"cumprod", "cumprod_", "cumprod.out"}, cumulative_rule, 0, TPU_HLO_MUL},
    {{"logcumsumexp", "logcumsumexp.out"}, logcumsumexp_rule, 0, 0,
     {TPU_DTS_ANY_FLOAT | TPU_DTS_COMPLEX, 0, "logcumsumexp_out_cpu"}},
};
TPU_COUNT_RULES(reduce);
