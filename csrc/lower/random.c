/* Random ops on the device generator: uniform, normal, bernoulli, dropout,
 * random integers, exponential and friends, randperm.
 *
 * Each op draws bits with rng_bit_generator from c->rng_state, a ui64[2]
 * derived on the host from the generator's (seed, offset); the offset
 * advances once per op, so a run is reproducible under torch.manual_seed. The
 * streams differ from PyTorch's CPU generator (as CUDA's do): tests check
 * distributions, not bits. */
#include <math.h>

#include "lower/rules.h"

/* Uniform floats in [0, 1) of |shape| and |dtype| (f32 or f64): the top
 * mantissa bits of random words placed in [1, 2), minus one. */
static tpu_hlo_value uniform01(tpu_lower_ctx *c, const tpu_hlo_type *shape, tpu_dtype_t dtype) {
  bool wide = dtype == TPU_F64;
  tpu_hlo_type bits_t = *shape;
  bits_t.dtype = wide ? TPU_U64 : TPU_U32;
  tpu_hlo_value state, bits;
  tpu_hlo_rng_bits(B, c->rng_state, &bits_t, &state, &bits);
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

static tpu_hlo_value bcast(tpu_lower_ctx *c, tpu_hlo_value s, tpu_dtype_t t) {
  tpu_hlo_type to = *OUT;
  to.dtype = t;
  return tpu_hlo_broadcast_to(B, s, &to);
}

/* uniform_(self, from=0, to=1, *, generator) */
static tpu_status_t uniform_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = float_math(OUT->dtype);
  tpu_hlo_value u = uniform01(c, OUT, t);
  tpu_hlo_value lo = bcast(c, scalar_arg(c, 1, t, 0.0), t), hi = bcast(c, scalar_arg(c, 2, t, 1.0), t);
  tpu_hlo_value r = tpu_hlo_binary(B, TPU_HLO_ADD, lo, tpu_hlo_binary(B, TPU_HLO_MUL, u, tpu_hlo_binary(B, TPU_HLO_SUB, hi, lo)));
  /* Rounding to a narrower type must not reach |to|. */
  if (OUT->dtype != t) {
    tpu_hlo_value n = tpu_hlo_convert(B, r, OUT->dtype);
    tpu_hlo_value back = tpu_hlo_convert(B, n, t);
    tpu_hlo_value prev = tpu_hlo_binary(B, TPU_HLO_NEXTAFTER, tpu_hlo_convert(B, hi, OUT->dtype), tpu_hlo_convert(B, lo, OUT->dtype));
    r = tpu_hlo_select(B, tpu_hlo_compare(B, TPU_HLO_GE, back, hi), tpu_hlo_convert(B, prev, t), r);
  }
  tpu_lower_set_output(c, 0, r);
  return NULL;
}

/* Standard normals by Box-Muller on two uniform draws. */
static tpu_hlo_value standard_normal(tpu_lower_ctx *c, tpu_dtype_t t) {
  int64_t n = tpu_hlo_type_numel(OUT);
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
  return tpu_hlo_reshape(B, z, OUT->rank, OUT->dims);
}

/* normal_(self, mean=0, std=1, *, generator) */
static tpu_status_t normal_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = float_math(OUT->dtype);
  tpu_hlo_value z = standard_normal(c, t);
  tpu_hlo_value mean = bcast(c, scalar_arg(c, 1, t, 0.0), t), std = bcast(c, scalar_arg(c, 2, t, 1.0), t);
  tpu_lower_set_output(c, 0, tpu_hlo_binary(B, TPU_HLO_ADD, mean, tpu_hlo_binary(B, TPU_HLO_MUL, z, std)));
  return NULL;
}

/* log_normal_(self, mean=1, std=2): exp of a normal. */
static tpu_status_t log_normal_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = float_math(OUT->dtype);
  tpu_hlo_value z = standard_normal(c, t);
  tpu_hlo_value mean = bcast(c, scalar_arg(c, 1, t, 1.0), t), std = bcast(c, scalar_arg(c, 2, t, 2.0), t);
  tpu_hlo_value x = tpu_hlo_binary(B, TPU_HLO_ADD, mean, tpu_hlo_binary(B, TPU_HLO_MUL, z, std));
  tpu_lower_set_output(c, 0, tpu_hlo_unary(B, TPU_HLO_EXP, x));
  return NULL;
}

/* exponential_(self, lambd=1): -log(1 - u) / lambd */
static tpu_status_t exponential_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = float_math(OUT->dtype);
  tpu_hlo_value u = uniform01(c, OUT, t);
  tpu_hlo_type ft = *OUT;
  ft.dtype = t;
  tpu_hlo_value e = tpu_hlo_unary(B, TPU_HLO_NEG, tpu_hlo_unary(B, TPU_HLO_LOG1P, tpu_hlo_unary(B, TPU_HLO_NEG, u)));
  tpu_lower_set_output(c, 0, tpu_hlo_binary(B, TPU_HLO_DIV, e, bcast(c, scalar_arg(c, 1, t, 1.0), t)));
  (void)ft;
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

/* bernoulli_(self, p) and bernoulli(self = probabilities): u < p. data: 1
 * when the probabilities are |self| itself. */
static tpu_status_t bernoulli_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = c->data == 1 ? float_math(c->args[0].dtype) : TPU_F64;
  tpu_hlo_value u = uniform01(c, OUT, t);
  tpu_hlo_value p;
  if (c->data == 1) p = tpu_lower_operand(c, 0, t, OUT);
  else if (c->args[1].kind == TPU_ARG_TENSOR) p = tpu_lower_operand(c, 1, t, OUT);
  else p = bcast(c, scalar_arg(c, 1, t, 0.5), t);
  tpu_lower_set_output(c, 0, tpu_hlo_compare(B, TPU_HLO_LT, u, p));
  return NULL;
}

/* random_(self), random_.to(self, to), random_.from(self, from, to?):
 * integers in [from, to) (the dtype's full range or mantissa by default, as
 * PyTorch). */
static tpu_status_t random_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = OUT->dtype;
  int64_t from = 0, to = 0;
  bool has_to = false;
  if (c->data == 2) { /* from */
    from = tpu_lower_int(c, 1, 0);
    has_to = !tpu_lower_is_none(c, 2);
    to = tpu_lower_int(c, 2, 0);
  } else if (c->data == 1) { /* to */
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
  if (to <= from)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld",
                           (long long)from, (long long)to);
  tpu_hlo_type bits_t = *OUT;
  bits_t.dtype = TPU_U64;
  tpu_hlo_value state, bits;
  tpu_hlo_rng_bits(B, c->rng_state, &bits_t, &state, &bits);
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

/* native_dropout_backward(grad_output, mask, scale) */
static tpu_status_t native_dropout_backward_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = tpu_lower_opmath(OUT->dtype);
  tpu_hlo_value g = tpu_lower_operand(c, 0, t, OUT);
  tpu_hlo_value m = tpu_lower_operand(c, 1, t, OUT);
  tpu_hlo_value s = tpu_hlo_broadcast_to(B, tpu_hlo_scalar_f64(B, t, tpu_lower_float(c, 2, 1.0)), tpu_hlo_type_of(B, g));
  tpu_lower_set_output(c, 0, tpu_hlo_binary(B, TPU_HLO_MUL, tpu_hlo_binary(B, TPU_HLO_MUL, g, m), s));
  return NULL;
}

/* randperm(n, *, generator, out): the ranks of random keys (a stable sort of
 * random words carrying iota). */
static tpu_status_t randperm_rule(tpu_lower_ctx *c) {
  int64_t n = OUT->dims[0];
  tpu_hlo_type kt = tpu_hlo_make_type(TPU_U64, 1, &n), it = tpu_hlo_make_type(TPU_S64, 1, &n);
  tpu_hlo_value state, keys;
  tpu_hlo_rng_bits(B, c->rng_state, &kt, &state, &keys);
  tpu_hlo_value idx = tpu_hlo_iota(B, &it, 0);
  tpu_hlo_type sk = tpu_hlo_make_type(TPU_U64, 0, NULL), si = tpu_hlo_make_type(TPU_S64, 0, NULL);
  tpu_hlo_type ts[4] = {sk, sk, si, si};
  tpu_hlo_value a[4];
  tpu_hlo_region cmp;
  tpu_hlo_region_begin(B, 4, ts, a);
  tpu_hlo_value lt = tpu_hlo_compare(B, TPU_HLO_LT, a[0], a[1]);
  tpu_hlo_region_end(B, &lt, 1, &cmp);
  tpu_hlo_value xs[2] = {keys, idx}, sorted[2];
  tpu_hlo_sort(B, xs, 2, 0, true, &cmp, sorted);
  tpu_lower_set_output(c, 0, sorted[1]);
  return NULL;
}

const tpu_lower_rule tpu_rules_random[] = {
    {{"uniform_", "uniform", "uniform.out"}, uniform_rule, TPU_RULE_RNG, 0},
    {{"normal_", "normal_functional"}, normal_rule, TPU_RULE_RNG, 0},
    {{"log_normal_", "log_normal"}, log_normal_rule, TPU_RULE_RNG, 0},
    {{"exponential_", "exponential"}, exponential_rule, TPU_RULE_RNG, 0},
    {{"cauchy_", "cauchy"}, cauchy_rule, TPU_RULE_RNG, 0},
    {{"geometric_", "geometric"}, geometric_rule, TPU_RULE_RNG, 0},
    {{"bernoulli_.float", "bernoulli.float_out"}, bernoulli_rule, TPU_RULE_RNG, 0},
    {{"bernoulli_.Tensor", "bernoulli.Tensor"}, bernoulli_rule, TPU_RULE_RNG, 0},
    {{"bernoulli", "bernoulli.out"}, bernoulli_rule, TPU_RULE_RNG, 1},
    {{"random_", "random"}, random_rule, TPU_RULE_RNG, 0},
    {{"random_.to", "random.to"}, random_rule, TPU_RULE_RNG, 1},
    {{"random_.from", "random.from"}, random_rule, TPU_RULE_RNG, 2},
    {{"native_dropout", "native_dropout.out"}, native_dropout_rule, TPU_RULE_RNG, 0},
    {{"native_dropout_backward", "native_dropout_backward.out"}, native_dropout_backward_rule, 0, 0},
    {{"randperm.generator_out"}, randperm_rule, TPU_RULE_RNG, 0},
};
TPU_COUNT_RULES(random);
