/* Random ops on the device generator: uniform, normal, bernoulli, dropout, rrelu,
 * random integers, exponential and friends, randperm.
 *
 * Each op draws bits with rng_bit_generator from c->rng_state, a ui64[2]
 * derived on the host from the generator's (seed, offset); the offset
 * advances once per op, so a run is reproducible under torch.manual_seed. The
 * streams differ from PyTorch's CPU generator (as CUDA's do): tests check
 * distributions, not bits. */
#include <math.h>
#include <string.h>

#include "lower/rules.h"

/* Random words of |type| from the op's state, as a buffer: XLA expands the
 * generator into a computation shared by the draws of one shape, inlined
 * where it has one caller only, so a draw's arithmetic compiled otherwise
 * in a program of two draws (the last bit of a logarithm), and fused eager
 * must give strict's bits. */
static tpu_hlo_value draw(tpu_lower_ctx *c, const tpu_hlo_type *type) {
  tpu_hlo_value state, bits;
  tpu_hlo_rng_bits(B, c->rng_state, type, &state, &bits);
  return tpu_lower_boundary(B, c->kernels, bits);
}

/* Uniform floats in [0, 1) of |shape| and |dtype| (f32 or f64): the top
 * mantissa bits of random words placed in [1, 2), minus one. */
static tpu_hlo_value uniform01(tpu_lower_ctx *c, const tpu_hlo_type *shape, tpu_dtype_t dtype) {
  bool wide = dtype == TPU_F64;
  tpu_hlo_type bits_t = *shape;
  bits_t.dtype = wide ? TPU_U64 : TPU_U32;
  tpu_hlo_value bits = draw(c, &bits_t);
  tpu_hlo_value mant = tpu_hlo_binary(B, TPU_HLO_SHR_LOGIC, bits, tpu_hlo_const_i64(B, &bits_t, wide ? 12 : 9));
  tpu_hlo_value one_bits = tpu_hlo_const_i64(B, &bits_t, wide ? 0x3FF0000000000000LL : 0x3F800000LL);
  tpu_hlo_type ft = *shape;
  ft.dtype = wide ? TPU_F64 : TPU_F32;
  tpu_hlo_value f = tpu_hlo_bitcast(B, tpu_hlo_binary(B, TPU_HLO_OR, mant, one_bits), &ft);
  return tpu_hlo_binary(B, TPU_HLO_SUB, f, tpu_hlo_const_f64(B, &ft, 1.0));
}

/* The compute type for random floats of |t|: f64 stays, the rest use f32. */
static tpu_dtype_t float_math(tpu_dtype_t t) { return t == TPU_F64 ? TPU_F64 : TPU_F32; }

static tpu_hlo_value scalar_arg(tpu_lower_ctx *c, int arg, tpu_dtype_t t, double if_none) {
  if (tpu_lower_is_none(c, arg)) return tpu_hlo_scalar_f64(B, t, if_none);
  if (c->args[arg].kind == TPU_ARG_FLOAT || c->args[arg].kind == TPU_ARG_INT)
    return tpu_hlo_scalar_f64(B, t, tpu_lower_float(c, arg, if_none));
  return tpu_lower_scalar(c, arg, t);
}

static tpu_hlo_value bcast_to(tpu_lower_ctx *c, tpu_hlo_value s, const tpu_hlo_type *shape, tpu_dtype_t t) {
  tpu_hlo_type to = *shape;
  to.dtype = t;
  return tpu_hlo_broadcast_to(B, s, &to);
}

static tpu_hlo_value bcast(tpu_lower_ctx *c, tpu_hlo_value s, tpu_dtype_t t) { return bcast_to(c, s, OUT, t); }

/* The shape uniform_ and normal_ draw in: the output's, or for a complex
 * output its real view (view_as_real: real and imaginary parts along a last
 * dim of 2), which PyTorch's kernels fill as a real tensor. */
static tpu_hlo_type draw_shape(tpu_lower_ctx *c) {
  tpu_hlo_type t = *OUT;
  if (tpu_dtype_is_complex(t.dtype)) {
    t.dtype = tpu_dtype_real(t.dtype);
    t.dims[t.rank++] = 2;
  }
  return t;
}

/* Values drawn in draw_shape as the output. */
static tpu_hlo_value from_draw_shape(tpu_lower_ctx *c, tpu_hlo_value v) {
  if (!tpu_dtype_is_complex(OUT->dtype)) return v;
  const int r = OUT->rank;
  tpu_hlo_value re = tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, v, r, 0, 1, 1), r, OUT->dims);
  tpu_hlo_value im = tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, v, r, 1, 2, 1), r, OUT->dims);
  return tpu_hlo_binary(B, TPU_HLO_COMPLEX, re, im);
}

/* uniform_(self, from=0, to=1, *, generator) */
static tpu_status_t uniform_rule(tpu_lower_ctx *c) {
  double from = tpu_lower_float(c, 1, 0.0), to = tpu_lower_float(c, 2, 1.0);
  if (from > to)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "uniform_ expects to return a [from, to) range, but found from=%g > to=%g",
                           from, to);
  const tpu_hlo_type shape = draw_shape(c);
  tpu_dtype_t t = float_math(shape.dtype);
  tpu_hlo_value u = uniform01(c, &shape, t);
  tpu_hlo_value lo = bcast_to(c, scalar_arg(c, 1, t, 0.0), &shape, t), hi = bcast_to(c, scalar_arg(c, 2, t, 1.0), &shape, t);
  tpu_hlo_value r = tpu_hlo_binary(B, TPU_HLO_ADD, lo, tpu_hlo_binary(B, TPU_HLO_MUL, u, tpu_hlo_binary(B, TPU_HLO_SUB, hi, lo)));
  /* Rounding to a narrower type must not reach |to|. */
  if (shape.dtype != t) {
    tpu_hlo_value n = tpu_hlo_convert(B, r, shape.dtype);
    tpu_hlo_value back = tpu_hlo_convert(B, n, t);
    tpu_hlo_value prev = tpu_hlo_binary(B, TPU_HLO_NEXTAFTER, tpu_hlo_convert(B, hi, shape.dtype), tpu_hlo_convert(B, lo, shape.dtype));
    r = tpu_hlo_select(B, tpu_hlo_compare(B, TPU_HLO_GE, back, hi), tpu_hlo_convert(B, prev, t), r);
  }
  tpu_lower_set_output(c, 0, from_draw_shape(c, r));
  return NULL;
}

/* Standard normals of |shape| by Box-Muller on two uniform draws. */
static tpu_hlo_value standard_normal(tpu_lower_ctx *c, const tpu_hlo_type *shape, tpu_dtype_t t) {
  int64_t n = tpu_hlo_type_numel(shape);
  int64_t two_n[2] = {2, n};
  tpu_hlo_type pair_t = tpu_hlo_make_type(t, 2, two_n);
  tpu_hlo_value u = uniform01(c, &pair_t, t);
  int64_t flat_shape[1] = {n};
  tpu_hlo_value u1 = tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, u, 0, 0, 1, 1), 1, flat_shape);
  tpu_hlo_value u2 = tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, u, 0, 1, 2, 1), 1, flat_shape);
  tpu_hlo_type ft = tpu_hlo_make_type(t, 1, flat_shape);
  /* 1 - u1 is in (0, 1]: log is finite */
  tpu_hlo_value r = tpu_hlo_unary(B, TPU_HLO_SQRT, tpu_hlo_binary(B, TPU_HLO_MUL, tpu_hlo_const_f64(B, &ft, -2.0),
      tpu_hlo_unary(B, TPU_HLO_LOG, tpu_hlo_binary(B, TPU_HLO_SUB, tpu_hlo_const_f64(B, &ft, 1.0), u1))));
  tpu_hlo_value th = tpu_hlo_binary(B, TPU_HLO_MUL, tpu_hlo_const_f64(B, &ft, 2.0 * M_PI), u2);
  tpu_hlo_value z = tpu_hlo_binary(B, TPU_HLO_MUL, r, tpu_hlo_unary(B, TPU_HLO_COS, th));
  return tpu_hlo_reshape(B, z, shape->rank, shape->dims);
}

/* normal_(self, mean=0, std=1, *, generator); a complex tensor's real and
 * imaginary parts each get std / sqrt(2), as PyTorch's normal_ gives them
 * (the variance of the complex value is std^2). */
static tpu_status_t normal_rule(tpu_lower_ctx *c) {
  const tpu_hlo_type shape = draw_shape(c);
  tpu_dtype_t t = float_math(shape.dtype);
  tpu_hlo_value z = standard_normal(c, &shape, t);
  tpu_hlo_value std = scalar_arg(c, 2, t, 1.0);
  if (tpu_dtype_is_complex(OUT->dtype)) std = tpu_hlo_binary(B, TPU_HLO_DIV, std, tpu_hlo_scalar_f64(B, t, M_SQRT2));
  tpu_hlo_value mean = bcast_to(c, scalar_arg(c, 1, t, 0.0), &shape, t);
  tpu_hlo_value r = tpu_hlo_binary(B, TPU_HLO_ADD, mean, tpu_hlo_binary(B, TPU_HLO_MUL, z, bcast_to(c, std, &shape, t)));
  tpu_lower_set_output(c, 0, from_draw_shape(c, r));
  return NULL;
}

/* log_normal_(self, mean=1, std=2): exp of a normal. */
static tpu_status_t log_normal_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = float_math(OUT->dtype);
  tpu_hlo_value z = standard_normal(c, OUT, t);
  tpu_hlo_value mean = bcast(c, scalar_arg(c, 1, t, 1.0), t), std = bcast(c, scalar_arg(c, 2, t, 2.0), t);
  tpu_hlo_value x = tpu_hlo_binary(B, TPU_HLO_ADD, mean, tpu_hlo_binary(B, TPU_HLO_MUL, z, std));
  tpu_lower_set_output(c, 0, tpu_hlo_unary(B, TPU_HLO_EXP, x));
  return NULL;
}

/* exponential_(self, lambd=1): -log(1 - u) / lambd */
static tpu_status_t exponential_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = float_math(OUT->dtype);
  tpu_hlo_value u = uniform01(c, OUT, t);
  tpu_hlo_value e = tpu_hlo_unary(B, TPU_HLO_NEG, tpu_hlo_unary(B, TPU_HLO_LOG1P, tpu_hlo_unary(B, TPU_HLO_NEG, u)));
  tpu_lower_set_output(c, 0, tpu_hlo_binary(B, TPU_HLO_DIV, e, bcast(c, scalar_arg(c, 1, t, 1.0), t)));
  return NULL;
}

/* cauchy_(self, median=0, sigma=1): median + sigma * tan(pi * (u - 1/2)) */
static tpu_status_t cauchy_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = float_math(OUT->dtype);
  tpu_hlo_value u = uniform01(c, OUT, t);
  tpu_hlo_value a = tpu_hlo_binary(B, TPU_HLO_MUL, bcast(c, tpu_hlo_scalar_f64(B, t, M_PI), t),
                                   tpu_hlo_binary(B, TPU_HLO_SUB, u, bcast(c, tpu_hlo_scalar_f64(B, t, 0.5), t)));
  tpu_hlo_value r = tpu_hlo_binary(B, TPU_HLO_MUL, bcast(c, scalar_arg(c, 2, t, 1.0), t), tpu_hlo_unary(B, TPU_HLO_TAN, a));
  tpu_lower_set_output(c, 0, tpu_hlo_binary(B, TPU_HLO_ADD, bcast(c, scalar_arg(c, 1, t, 0.0), t), r));
  return NULL;
}

/* geometric_(self, p): ceil(log(1 - u) / log(1 - p)), at least 1 */
static tpu_status_t geometric_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = TPU_F64;
  tpu_hlo_value u = uniform01(c, OUT, t);
  tpu_hlo_value p = bcast(c, scalar_arg(c, 1, t, 0.5), t);
  tpu_hlo_value num = tpu_hlo_unary(B, TPU_HLO_LOG1P, tpu_hlo_unary(B, TPU_HLO_NEG, u));
  tpu_hlo_value den = tpu_hlo_unary(B, TPU_HLO_LOG1P, tpu_hlo_unary(B, TPU_HLO_NEG, p));
  tpu_hlo_value g = tpu_hlo_unary(B, TPU_HLO_CEIL, tpu_hlo_binary(B, TPU_HLO_DIV, num, den));
  tpu_lower_set_output(c, 0, tpu_hlo_binary(B, TPU_HLO_MAX, g, bcast(c, tpu_hlo_scalar_f64(B, t, 1.0), t)));
  return NULL;
}

/* bernoulli_(self, p) and bernoulli(self = probabilities): u < p, the
 * probabilities |p| or (BERNOULLI_SELF) |self| itself. Probabilities outside
 * [0, 1] (or NaN) are refused, a tensor's at run time as on CPU. */
enum { BERNOULLI_P, BERNOULLI_SELF };
static tpu_status_t bernoulli_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = c->data == BERNOULLI_SELF ? float_math(c->args[0].dtype) : TPU_F64;
  tpu_hlo_value u = uniform01(c, OUT, t);
  tpu_hlo_value p;
  if (c->data == BERNOULLI_SELF || c->args[1].kind == TPU_ARG_TENSOR) {
    p = tpu_lower_operand(c, c->data == BERNOULLI_SELF ? 0 : 1, t, OUT);
    tpu_hlo_value ok = and_(c, cmp(c, TPU_HLO_GE, p, const_like(c, p, 0.0)),
                            cmp(c, TPU_HLO_LE, p, const_like(c, p, 1.0)));
    int64_t dims[TPU_HLO_MAX_RANK];
    for (int i = 0; i < OUT->rank; i++) dims[i] = i;
    tpu_lower_require(c, tpu_lower_reduce(B, ok, TPU_HLO_AND, dims, OUT->rank), TPU_ERR_RUNTIME,
                      "Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error message be "
                      "improved?  If so, please report an enhancement request to PyTorch.)");
  } else {
    double pf = tpu_lower_float(c, 1, 0.5);
    if (!(pf >= 0.0 && pf <= 1.0))
      return tpu_lower_error(c, TPU_ERR_RUNTIME, "bernoulli_ expects p to be in [0, 1], but got p=%g", pf);
    p = bcast(c, scalar_arg(c, 1, t, 0.5), t);
  }
  tpu_lower_set_output(c, 0, tpu_hlo_compare(B, TPU_HLO_LT, u, p));
  return NULL;
}

static tpu_status_t empty_range(tpu_lower_ctx *c, int64_t from, int64_t to) {
  return tpu_lower_error(c, TPU_ERR_RUNTIME, "random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld",
                         (long long)from, (long long)to);
}

/* random_(self), random_.to(self, to), random_.from(self, from, to?):
 * integers in [from, to) (the dtype's full range or mantissa by default, as
 * PyTorch). */
enum { RANDOM, RANDOM_TO, RANDOM_FROM };
static tpu_status_t random_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = OUT->dtype;
  int64_t from = 0, to = 0;
  bool has_to = false;
  if (c->data == RANDOM_FROM) {
    from = tpu_lower_int(c, 1, 0);
    has_to = !tpu_lower_is_none(c, 2);
    to = tpu_lower_int(c, 2, 0);
  } else if (c->data == RANDOM_TO) {
    has_to = true;
    to = tpu_lower_int(c, 1, 0);
  }
  if (!has_to) {
    if (tpu_dtype_is_float(t)) {
      int digits = t == TPU_F64 ? 53 : t == TPU_F32 ? 24 : t == TPU_BF16 ? 8 : 11;
      to = (int64_t)1 << digits;
      to += 1;
    } else if (t == TPU_BOOL) {
      to = 2;
    } else if (tpu_dtype_is_unsigned_int(t)) {
      to = tpu_dtype_size(t) == 8 ? INT64_MAX : (int64_t)1 << (8 * tpu_dtype_size(t));
    } else {
      to = tpu_dtype_size(t) == 8 ? INT64_MAX : (int64_t)1 << (8 * tpu_dtype_size(t) - 1);
    }
  }
  /* PyTorch checks an explicit |to| first, then the range against the
   * dtype, naming its C++ element type (wider types hold every int64). */
  if (has_to && to <= from) return empty_range(c, from, to);
  static const struct { tpu_dtype_t t; double lo, hi; const char *name; } bounds[] = {
      {TPU_BOOL, 0, 1, "bool"},           {TPU_U8, 0, 255, "unsigned char"},
      {TPU_S8, -128, 127, "signed char"}, {TPU_S16, -32768, 32767, "short int"},
      {TPU_S32, -2147483648.0, 2147483647.0, "int"}, {TPU_F16, -65504, 65504, "c10::Half"},
  };
  for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
    if (bounds[i].t != t) continue;
    if ((double)from < bounds[i].lo || (double)from > bounds[i].hi)
      return tpu_lower_error(c, TPU_ERR_RUNTIME, "from is out of bounds for %s", bounds[i].name);
    if (has_to && ((double)(to - 1) < bounds[i].lo || (double)(to - 1) > bounds[i].hi))
      return tpu_lower_error(c, TPU_ERR_RUNTIME, "to - 1 is out of bounds for %s", bounds[i].name);
  }
  if (to <= from) return empty_range(c, from, to);
  tpu_hlo_type bits_t = *OUT;
  bits_t.dtype = TPU_U64;
  tpu_hlo_value bits = draw(c, &bits_t);
  tpu_hlo_value range = tpu_hlo_const_i64(B, &bits_t, (int64_t)((uint64_t)to - (uint64_t)from));
  tpu_hlo_value r = tpu_hlo_binary(B, TPU_HLO_REM, bits, range);
  tpu_hlo_type st = *OUT;
  st.dtype = TPU_S64;
  r = tpu_hlo_binary(B, TPU_HLO_ADD, tpu_hlo_convert(B, r, TPU_S64), tpu_hlo_const_i64(B, &st, from));
  tpu_lower_set_output(c, 0, r);
  return NULL;
}

/* native_dropout(input, p, train) -> (output, mask) */
static tpu_status_t native_dropout_rule(tpu_lower_ctx *c) {
  double p = tpu_lower_float(c, 1, 0.5);
  bool train = tpu_lower_bool(c, 2, true);
  tpu_dtype_t t = tpu_lower_opmath(OUT->dtype);
  tpu_hlo_value x = tpu_lower_operand(c, 0, t, OUT);
  const tpu_hlo_type *mask_t = &c->out_types[1];
  if (!train || p == 0.0) {
    tpu_lower_set_output(c, 0, x);
    tpu_lower_set_output(c, 1, tpu_hlo_const_i64(B, mask_t, 1));
    return NULL;
  }
  if (p >= 1.0) {
    tpu_lower_set_output(c, 0, tpu_hlo_const_f64(B, OUT, 0.0));
    tpu_lower_set_output(c, 1, tpu_hlo_const_i64(B, mask_t, 0));
    return NULL;
  }
  tpu_hlo_value u = uniform01(c, OUT, float_math(t));
  tpu_hlo_type ut = *OUT;
  ut.dtype = float_math(t);
  tpu_hlo_value keep = tpu_hlo_compare(B, TPU_HLO_LT, u, tpu_hlo_const_f64(B, &ut, 1.0 - p));
  tpu_hlo_type xt = *OUT;
  xt.dtype = t;
  tpu_hlo_value scaled = tpu_hlo_binary(B, TPU_HLO_MUL, x, tpu_hlo_const_f64(B, &xt, 1.0 / (1.0 - p)));
  tpu_lower_set_output(c, 0, tpu_hlo_select(B, keep, scaled, tpu_hlo_const_f64(B, &xt, 0.0)));
  tpu_lower_set_output(c, 1, keep);
  return NULL;
}

/* rrelu_with_noise(self, noise!, lower, upper, training, generator) ->
 * (result, noise): in training each element at or below zero is scaled by a
 * slope drawn from U(lower, upper), which noise records (1 elsewhere);
 * otherwise leaky_relu with the mean slope, noise left as it is. */
static tpu_status_t rrelu_rule(tpu_lower_ctx *c) {
  const tpu_lower_arg *self = &c->args[0], *noise = &c->args[1];
  bool same = self->rank == noise->rank &&
              (self->rank == 0 || memcmp(self->sizes, noise->sizes, sizeof(int64_t) * (size_t)self->rank) == 0);
  if (!same) {
    char a[128], b[128];
    tpu_lower_shape_str(a, sizeof a, self->rank, self->sizes);
    tpu_lower_shape_str(b, sizeof b, noise->rank, noise->sizes);
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "noise tensor shape must match self tensor shape. Got self.shape = %s "
                           "noise.shape = %s", a, b);
  }
  if (noise->dtype != OUT->dtype)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "expected scalar type %s but found %s",
                           tpu_dtype_scalar_type(OUT->dtype), tpu_dtype_scalar_type(noise->dtype));
  double lower = tpu_lower_float(c, 2, 0.125), upper = tpu_lower_float(c, 3, 1.0 / 3.0);
  tpu_dtype_t t = tpu_lower_opmath(OUT->dtype);
  tpu_hlo_value x = tpu_lower_operand(c, 0, t, OUT);
  tpu_hlo_type xt = *OUT;
  xt.dtype = t;
  tpu_hlo_value scaled = tpu_hlo_compare(B, TPU_HLO_LE, x, tpu_hlo_const_f64(B, &xt, 0.0));
  if (!tpu_lower_bool(c, 4, false)) {
    tpu_hlo_value slope = tpu_hlo_const_f64(B, &xt, (lower + upper) / 2);
    tpu_lower_set_output(c, 0, tpu_hlo_select(B, scaled, tpu_hlo_binary(B, TPU_HLO_MUL, x, slope), x));
    tpu_lower_set_output(c, 1, tpu_lower_tensor(c, 1));
    return NULL;
  }
  /* The CPU kernel checks the bounds when it first draws a slope. */
  if (lower > upper) {
    int64_t all[TPU_HLO_MAX_RANK];
    for (int i = 0; i < xt.rank; i++) all[i] = i;
    tpu_hlo_value none = tpu_hlo_unary(B, TPU_HLO_NOT, tpu_lower_reduce(B, scaled, TPU_HLO_OR, all, xt.rank));
    tpu_lower_require(c, none, TPU_ERR_RUNTIME, "Expected from <= to to be true, but got false.  (Could this error "
                      "message be improved?  If so, please report an enhancement request to PyTorch.)");
  }
  tpu_hlo_value u = tpu_hlo_convert(B, uniform01(c, OUT, float_math(t)), t);
  tpu_hlo_value r = tpu_hlo_binary(B, TPU_HLO_ADD, tpu_hlo_const_f64(B, &xt, lower),
                                   tpu_hlo_binary(B, TPU_HLO_MUL, u, tpu_hlo_const_f64(B, &xt, upper - lower)));
  tpu_hlo_value slope = tpu_hlo_select(B, scaled, r, tpu_hlo_const_f64(B, &xt, 1.0));
  tpu_lower_set_output(c, 0, tpu_hlo_binary(B, TPU_HLO_MUL, x, slope));
  tpu_lower_set_output(c, 1, slope);
  return NULL;
}

/* native_dropout_backward(grad_output, mask, scale) */
static tpu_status_t native_dropout_backward_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = tpu_lower_opmath(OUT->dtype);
  tpu_hlo_value g = tpu_lower_operand(c, 0, t, OUT);
  tpu_hlo_value m = tpu_lower_operand(c, 1, t, OUT);
  tpu_hlo_value s = tpu_hlo_broadcast_to(B, tpu_hlo_scalar_f64(B, t, tpu_lower_float(c, 2, 1.0)), tpu_hlo_type_of(B, g));
  tpu_lower_set_output(c, 0, tpu_hlo_binary(B, TPU_HLO_MUL, tpu_hlo_binary(B, TPU_HLO_MUL, g, m), s));
  return NULL;
}

/* The s64 positions along |dim| that put |keys| in ascending order (a
 * stable sort carrying iota). */
static tpu_hlo_value argsort(tpu_lower_ctx *c, tpu_hlo_value keys, int dim) {
  tpu_hlo_type kt = *tpu_hlo_type_of(B, keys);
  tpu_hlo_type it = kt;
  it.dtype = TPU_S64;
  tpu_hlo_value idx = tpu_hlo_iota(B, &it, dim);
  tpu_hlo_type sk = tpu_hlo_make_type(kt.dtype, 0, NULL), si = tpu_hlo_make_type(TPU_S64, 0, NULL);
  tpu_hlo_type ts[4] = {sk, sk, si, si};
  tpu_hlo_value a[4];
  tpu_hlo_region order;
  tpu_hlo_region_begin(B, 4, ts, a);
  tpu_hlo_value lt = tpu_hlo_compare(B, TPU_HLO_LT, a[0], a[1]);
  tpu_hlo_region_end(B, &lt, 1, &order);
  tpu_hlo_value xs[2] = {keys, idx}, sorted[2];
  tpu_hlo_sort(B, xs, 2, dim, true, &order, sorted);
  return sorted[1];
}

/* randperm(n, *, generator, out): the order of random words. */
static tpu_status_t randperm_rule(tpu_lower_ctx *c) {
  tpu_hlo_type kt = tpu_hlo_make_type(TPU_U64, 1, OUT->dims);
  tpu_hlo_value keys = draw(c, &kt);
  return done(c, argsort(c, keys, 0));
}

/* multinomial(self, num_samples, replacement, *, generator): category
 * indices drawn from each row of probabilities. With replacement a sample
 * inverts the row's cumulative sums at a uniform draw (never landing on the
 * zero-probability tail); without, the categories with the smallest keys
 * e / p win (e ~ Exp(1): the CPU kernel's top-k of p / e). */
static tpu_status_t multinomial_rule(tpu_lower_ctx *c) {
  const tpu_lower_arg *pa = &c->args[0];
  int64_t k = tpu_lower_int(c, 1, 1), cats = pa->sizes[pa->rank - 1], rows = pa->rank == 2 ? pa->sizes[0] : 1;
  bool replacement = tpu_lower_bool(c, 2, false);
  /* The CPU kernel's static checks are in the meta function (_meta.py). */
  if (cats == 0)
    return tpu_lower_error(c, TPU_ERR_RUNTIME,
                           "aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity.");
  if (rows == 0) return done(c, tpu_hlo_const_i64(B, OUT, 0));
  tpu_dtype_t t = float_math(pa->dtype);
  int64_t pd[2] = {rows, cats}, all[2] = {0, 1};
  tpu_hlo_type pt = tpu_hlo_make_type(t, 2, pd);
  tpu_hlo_value p = tpu_hlo_reshape(B, tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t), 2, pd);
  tpu_hlo_value zero = tpu_hlo_const_f64(B, &pt, 0.0);
  tpu_hlo_value valid = and_(c, cmp(c, TPU_HLO_GE, p, zero), un(c, TPU_HLO_IS_FINITE, p));
  tpu_lower_require(c, tpu_lower_reduce(B, valid, TPU_HLO_AND, all, 2), TPU_ERR_RUNTIME,
                    "probability tensor contains either `inf`, `nan` or element < 0");
  tpu_hlo_value cdf = tpu_lower_scan(B, p, 1, TPU_HLO_ADD);
  tpu_hlo_value total = tpu_hlo_slice_dim(B, cdf, 1, cats - 1, cats, 1); /* [rows, 1] */
  tpu_hlo_value positive = cmp(c, TPU_HLO_GT, total, const_like(c, total, 0.0));
  tpu_lower_require(c, tpu_lower_reduce(B, positive, TPU_HLO_AND, all, 2), TPU_ERR_RUNTIME,
                    "invalid multinomial distribution (sum of probabilities <= 0)");
  tpu_hlo_value idx;
  if (replacement) {
    int64_t sd[2] = {rows, k}, cd[3] = {rows, k, cats};
    tpu_hlo_type st = tpu_hlo_make_type(t, 2, sd), ct = tpu_hlo_make_type(t, 3, cd);
    tpu_hlo_value v = tpu_hlo_broadcast_in_dim(B, mul(c, uniform01(c, &st, t), tpu_hlo_broadcast_to(B, total, &st)), &ct,
                                               (int64_t[]){0, 1});
    tpu_hlo_value cdf3 = tpu_hlo_broadcast_in_dim(B, cdf, &ct, (int64_t[]){0, 2});
    tpu_hlo_value total3 = tpu_hlo_broadcast_in_dim(B, total, &ct, (int64_t[]){0, 2});
    tpu_hlo_value below = and_(c, cmp(c, TPU_HLO_LE, cdf3, v), cmp(c, TPU_HLO_LT, cdf3, total3));
    idx = tpu_lower_reduce(B, tpu_hlo_convert(B, below, TPU_S64), TPU_HLO_ADD, (int64_t[]){2}, 1);
  } else {
    tpu_hlo_value e = neg(c, un(c, TPU_HLO_LOG1P, neg(c, uniform01(c, &pt, t))));
    tpu_hlo_value never = tpu_hlo_broadcast_to(B, tpu_hlo_scalar_max(B, t), &pt);
    tpu_hlo_value key = sel(c, cmp(c, TPU_HLO_GT, p, zero), dvd(c, e, p), never);
    idx = tpu_hlo_slice_dim(B, argsort(c, key, 1), 1, 0, k, 1);
  }
  return done(c, tpu_hlo_reshape(B, idx, OUT->rank, OUT->dims));
}

const tpu_lower_rule tpu_rules_random[] = {
    {{"uniform_", "uniform", "uniform.out"}, uniform_rule, TPU_RULE_RNG, 0,
     {TPU_DTS_ANY_FLOAT | TPU_DTS_COMPLEX, TPU_ADMIT_OUTPUT, "check_uniform_bounds"}},
    {{"normal_", "normal_functional"}, normal_rule, TPU_RULE_RNG, 0},
    {{"log_normal_", "log_normal"}, log_normal_rule, TPU_RULE_RNG, 0},
    {{"exponential_", "exponential"}, exponential_rule, TPU_RULE_RNG, 0},
    {{"cauchy_", "cauchy"}, cauchy_rule, TPU_RULE_RNG, 0},
    {{"geometric_", "geometric"}, geometric_rule, TPU_RULE_RNG, 0},
    {{"bernoulli_.float", "bernoulli.float_out"}, bernoulli_rule, TPU_RULE_RNG, BERNOULLI_P},
    {{"bernoulli_.Tensor", "bernoulli.Tensor"}, bernoulli_rule, TPU_RULE_RNG, BERNOULLI_P},
    {{"bernoulli", "bernoulli.out"}, bernoulli_rule, TPU_RULE_RNG, BERNOULLI_SELF},
    {{"random_", "random"}, random_rule, TPU_RULE_RNG, RANDOM},
    {{"random_.to", "random.to"}, random_rule, TPU_RULE_RNG, RANDOM_TO},
    {{"random_.from", "random.from"}, random_rule, TPU_RULE_RNG, RANDOM_FROM},
    {{"native_dropout", "native_dropout.out"}, native_dropout_rule, TPU_RULE_RNG, 0},
    {{"native_dropout_backward", "native_dropout_backward.out"}, native_dropout_backward_rule, 0, 0},
    {{"rrelu_with_noise", "rrelu_with_noise_", "rrelu_with_noise.out"}, rrelu_rule,
     TPU_RULE_RNG | TPU_RULE_CONST_SCALARS, 0, {TPU_DTS_ANY_FLOAT, TPU_ADMIT_OUTPUT, "rrelu_with_noise_out_cpu"}},
    {{"randperm.generator_out"}, randperm_rule, TPU_RULE_RNG, 0},
    {{"multinomial", "multinomial.out"}, multinomial_rule, TPU_RULE_RNG, 0},
};
TPU_COUNT_RULES(random);
