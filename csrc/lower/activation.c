/* Activation rules and their backwards (relu, gelu, silu, mish, elu,
 * softplus, hard* and threshold families, logit) and erf, which gelu
 * builds on; the elementwise conventions of elementwise.c hold: operands
 * broadcast to the output's shape, math in the output's opmath type, one
 * rounding at the end, PyTorch's CPU formulas where the order of operations
 * changes the rounding. */
#include <math.h>

#include "lower/rules.h"

/* --- activations ------------------------------------------------------------- */

static tpu_status_t relu_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0), zero = out_const(c, 0.0);
  return done(c, sel(c, cmp(c, TPU_HLO_LT, x, zero), zero, x)); /* NaN stays NaN */
}

static tpu_status_t leaky_relu_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0);
  tpu_hlo_value slope = tpu_lower_is_none(c, 1) ? out_const(c, 0.01) : in(c, 1);
  return done(c, sel(c, cmp(c, TPU_HLO_GT, x, out_const(c, 0.0)), x, mul(c, x, slope)));
}

/* erf as the CPU's rounds it. chlo.erf's float32 rational stops short of
 * +-1 (erf(-10) came out -0.99999982), and gelu's 0.5 x (1 + erf(x / sqrt 2))
 * then made a large negative x a large negative number instead of -0
 * (gelu(-1e4) = -8.9e-4, gelu(-3e38) = -2.7e31). Past |x| = 1, erf is
 * 1 - erfc(|x|) with the sign of x: erfc's tail is accurate, and the
 * difference rounds to +-1 where the CPU's erf does. */
static tpu_hlo_value erf_of(tpu_lower_ctx *c, tpu_hlo_value x) {
  tpu_hlo_value ax = un(c, TPU_HLO_ABS, x);
  tpu_hlo_value tail = sub(c, out_const(c, 1.0), un(c, TPU_HLO_ERFC, ax));
  tpu_hlo_value signed_tail = sel(c, cmp(c, TPU_HLO_LT, x, out_const(c, 0.0)), neg(c, tail), tail);
  return sel(c, cmp(c, TPU_HLO_LT, ax, out_const(c, 1.0)), un(c, TPU_HLO_ERF, x), signed_tail);
}

static tpu_status_t erf_rule(tpu_lower_ctx *c) { return done(c, erf_of(c, in(c, 0))); }

static tpu_status_t gelu_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0);
  bool tanh_mode = !tpu_lower_is_none(c, 1) && c->args[1].kind == TPU_ARG_STRING && strcmp(c->args[1].s, "tanh") == 0;
  if (tanh_mode) {
    tpu_hlo_value inner = mul(c, out_const(c, M_SQRT2 * M_2_SQRTPI * 0.5), add(c, x, mul(c, out_const(c, 0.044715), mul(c, mul(c, x, x), x))));
    return done(c, mul(c, mul(c, out_const(c, 0.5), x), add(c, out_const(c, 1.0), un(c, TPU_HLO_TANH, inner))));
  }
  tpu_hlo_value cdf = mul(c, out_const(c, 0.5), add(c, out_const(c, 1.0), erf_of(c, mul(c, x, out_const(c, M_SQRT1_2)))));
  return done(c, mul(c, x, cdf));
}

static tpu_status_t gelu_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_value g = in(c, 0), x = in(c, 1);
  bool tanh_mode = !tpu_lower_is_none(c, 2) && c->args[2].kind == TPU_ARG_STRING && strcmp(c->args[2].s, "tanh") == 0;
  if (tanh_mode) {
    double beta = M_SQRT2 * M_2_SQRTPI * 0.5, kappa = 0.044715;
    tpu_hlo_value x_sq = mul(c, x, x), x_cube = mul(c, x_sq, x);
    tpu_hlo_value inner = mul(c, out_const(c, beta), add(c, x, mul(c, out_const(c, kappa), x_cube)));
    tpu_hlo_value t = un(c, TPU_HLO_TANH, inner);
    tpu_hlo_value left = mul(c, out_const(c, 0.5), x), right = add(c, out_const(c, 1.0), t);
    tpu_hlo_value left_d = mul(c, out_const(c, 0.5), right);
    tpu_hlo_value tanh_d = sub(c, out_const(c, 1.0), mul(c, t, t));
    tpu_hlo_value inner_d = mul(c, out_const(c, beta), add(c, out_const(c, 1.0), mul(c, out_const(c, 3.0 * kappa), x_sq)));
    tpu_hlo_value right_d = mul(c, mul(c, left, tanh_d), inner_d);
    return done(c, mul(c, g, add(c, left_d, right_d)));
  }
  tpu_hlo_value cdf = mul(c, out_const(c, 0.5), add(c, out_const(c, 1.0), erf_of(c, mul(c, x, out_const(c, M_SQRT1_2)))));
  tpu_hlo_value pdf = mul(c, un(c, TPU_HLO_EXP, mul(c, out_const(c, -0.5), mul(c, x, x))), out_const(c, M_2_SQRTPI * M_SQRT1_2 * 0.5));
  return done(c, mul(c, g, add(c, cdf, mul(c, x, pdf))));
}

static tpu_status_t silu_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0);
  return done(c, dvd(c, x, add(c, out_const(c, 1.0), un(c, TPU_HLO_EXP, un(c, TPU_HLO_NEG, x)))));
}

static tpu_status_t silu_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_value g = in(c, 0), x = in(c, 1);
  tpu_hlo_value s = sigmoid_of(c, x);
  return done(c, mul(c, mul(c, g, s), add(c, out_const(c, 1.0), mul(c, x, sub(c, out_const(c, 1.0), s)))));
}

static tpu_status_t mish_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0);
  tpu_hlo_value sp = un(c, TPU_HLO_LOG1P, un(c, TPU_HLO_EXP, x));
  return done(c, mul(c, x, un(c, TPU_HLO_TANH, sp)));
}

static tpu_status_t mish_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_value g = in(c, 0), x = in(c, 1);
  tpu_hlo_value s = sigmoid_of(c, x);
  tpu_hlo_value t = un(c, TPU_HLO_TANH, un(c, TPU_HLO_LOG1P, un(c, TPU_HLO_EXP, x)));
  return done(c, mul(c, g, add(c, t, mul(c, mul(c, x, s), sub(c, out_const(c, 1.0), mul(c, t, t))))));
}

static tpu_status_t sigmoid_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_value g = in(c, 0), y = in(c, 1);
  return done(c, mul(c, mul(c, g, sub(c, out_const(c, 1.0), y)), y));
}

static tpu_status_t tanh_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_value g = in(c, 0), y = in(c, 1);
  return done(c, mul(c, g, sub(c, out_const(c, 1.0), mul(c, y, y))));
}

/* threshold(self, threshold, value): x > threshold ? x : value */
static tpu_status_t threshold_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0);
  return done(c, sel(c, cmp(c, TPU_HLO_LE, x, in(c, 1)), in(c, 2), x));
}

/* threshold_backward(grad_output, self, threshold): self <= t ? 0 : grad */
static tpu_status_t threshold_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_value g = in(c, 0), x = in(c, 1);
  return done(c, sel(c, cmp(c, TPU_HLO_LE, x, in(c, 2)), out_const(c, 0.0), g));
}

/* leaky_relu_backward(grad_output, self, negative_slope, self_is_result) */
static tpu_status_t leaky_relu_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_value g = in(c, 0), x = in(c, 1);
  return done(c, sel(c, cmp(c, TPU_HLO_GT, x, out_const(c, 0.0)), g, mul(c, g, in(c, 2))));
}

/* hardtanh(self, min_val, max_val) */
static tpu_status_t hardtanh_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0);
  tpu_hlo_value lo = tpu_lower_is_none(c, 1) ? out_const(c, -1.0) : in(c, 1);
  tpu_hlo_value hi = tpu_lower_is_none(c, 2) ? out_const(c, 1.0) : in(c, 2);
  x = sel(c, cmp(c, TPU_HLO_LT, x, lo), lo, x);
  return done(c, sel(c, cmp(c, TPU_HLO_GT, x, hi), hi, x));
}

/* hardtanh_backward(grad_output, self, min_val, max_val) */
static tpu_status_t hardtanh_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_value g = in(c, 0), x = in(c, 1);
  tpu_hlo_value out = tpu_hlo_binary(B, TPU_HLO_OR, cmp(c, TPU_HLO_LE, x, in(c, 2)), cmp(c, TPU_HLO_GE, x, in(c, 3)));
  return done(c, sel(c, out, out_const(c, 0.0), g));
}

/* elu(self, alpha, scale, input_scale) */
static tpu_status_t elu_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0);
  tpu_hlo_value alpha = tpu_lower_is_none(c, 1) ? out_const(c, 1.0) : in(c, 1);
  tpu_hlo_value scale = tpu_lower_is_none(c, 2) ? out_const(c, 1.0) : in(c, 2);
  tpu_hlo_value iscale = tpu_lower_is_none(c, 3) ? out_const(c, 1.0) : in(c, 3);
  tpu_hlo_value neg = mul(c, mul(c, alpha, scale), un(c, TPU_HLO_EXPM1, mul(c, x, iscale)));
  return done(c, sel(c, cmp(c, TPU_HLO_GT, x, out_const(c, 0.0)), mul(c, x, scale), neg));
}

/* elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result) */
static tpu_status_t elu_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_value g = in(c, 0), alpha = in(c, 1), scale = in(c, 2), iscale = in(c, 3), x = in(c, 5);
  bool is_result = tpu_lower_bool(c, 4, false);
  tpu_hlo_value neg;
  if (is_result) neg = mul(c, mul(c, g, iscale), add(c, x, mul(c, alpha, scale)));
  else neg = mul(c, mul(c, g, mul(c, mul(c, iscale, alpha), scale)), un(c, TPU_HLO_EXP, mul(c, x, iscale)));
  return done(c, sel(c, cmp(c, TPU_HLO_LE, x, out_const(c, 0.0)), neg, mul(c, g, scale)));
}

/* softplus(self, beta, threshold) */
static tpu_status_t softplus_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0), beta = in(c, 1), th = in(c, 2);
  tpu_hlo_value xb = mul(c, x, beta);
  tpu_hlo_value soft = dvd(c, un(c, TPU_HLO_LOG1P, un(c, TPU_HLO_EXP, xb)), beta);
  return done(c, sel(c, cmp(c, TPU_HLO_GT, xb, th), x, soft));
}

/* softplus_backward(grad_output, self, beta, threshold) */
static tpu_status_t softplus_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_value g = in(c, 0), x = in(c, 1), beta = in(c, 2), th = in(c, 3);
  tpu_hlo_value xb = mul(c, x, beta);
  tpu_hlo_value z = un(c, TPU_HLO_EXP, xb);
  return done(c, sel(c, cmp(c, TPU_HLO_GT, xb, th), g, dvd(c, mul(c, g, z), add(c, z, out_const(c, 1.0)))));
}

static tpu_hlo_value relu6_of(tpu_lower_ctx *c, tpu_hlo_value x) {
  return tpu_hlo_binary(B, TPU_HLO_MIN, tpu_hlo_binary(B, TPU_HLO_MAX, add(c, x, out_const(c, 3.0)), out_const(c, 0.0)), out_const(c, 6.0));
}

static tpu_status_t hardsigmoid_rule(tpu_lower_ctx *c) { return done(c, dvd(c, relu6_of(c, in(c, 0)), out_const(c, 6.0))); }

static tpu_status_t hardswish_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0);
  return done(c, dvd(c, mul(c, x, relu6_of(c, x)), out_const(c, 6.0)));
}

static tpu_status_t hardsigmoid_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_value g = in(c, 0), x = in(c, 1);
  tpu_hlo_value inside = tpu_hlo_binary(B, TPU_HLO_AND, cmp(c, TPU_HLO_GT, x, out_const(c, -3.0)), cmp(c, TPU_HLO_LT, x, out_const(c, 3.0)));
  return done(c, sel(c, inside, dvd(c, g, out_const(c, 6.0)), out_const(c, 0.0)));
}

static tpu_status_t hardswish_backward_rule(tpu_lower_ctx *c) {
  tpu_hlo_value g = in(c, 0), x = in(c, 1);
  tpu_hlo_value mid = mul(c, g, add(c, dvd(c, x, out_const(c, 3.0)), out_const(c, 0.5)));
  tpu_hlo_value r = sel(c, cmp(c, TPU_HLO_LE, x, out_const(c, 3.0)), mid, g);
  return done(c, sel(c, cmp(c, TPU_HLO_LT, x, out_const(c, -3.0)), out_const(c, 0.0), r));
}

/* logit(self, eps?) */
static tpu_status_t logit_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0);
  if (!tpu_lower_is_none(c, 1)) {
    double eps = tpu_lower_float(c, 1, 0.0);
    x = tpu_hlo_clamp(B, tpu_hlo_scalar_f64(B, out_math(c), eps), x, tpu_hlo_scalar_f64(B, out_math(c), 1.0 - eps));
  }
  return done(c, un(c, TPU_HLO_LOG, dvd(c, x, sub(c, out_const(c, 1.0), x))));
}

/* --- the table ------------------------------------------------------------- */

const tpu_lower_rule tpu_rules_activation[] = {
    {{"erf", "erf_", "erf.out"}, erf_rule, 0, 0},
    {{"relu", "relu_"}, relu_rule, 0, 0},
    {{"leaky_relu", "leaky_relu_", "leaky_relu.out"}, leaky_relu_rule, 0, 0},
    {{"gelu", "gelu_", "gelu.out"}, gelu_rule, 0, 0},
    {{"gelu_backward", "gelu_backward.grad_input"}, gelu_backward_rule, 0, 0},
    {{"silu", "silu_", "silu.out"}, silu_rule, 0, 0},
    {{"silu_backward", "silu_backward.grad_input"}, silu_backward_rule, 0, 0},
    {{"mish", "mish_", "mish.out"}, mish_rule, 0, 0},
    {{"mish_backward"}, mish_backward_rule, 0, 0},
    {{"sigmoid_backward", "sigmoid_backward.grad_input"}, sigmoid_backward_rule, 0, 0},
    {{"tanh_backward", "tanh_backward.grad_input"}, tanh_backward_rule, 0, 0},
    {{"threshold", "threshold_", "threshold.out"}, threshold_rule, 0, 0},
    {{"threshold_backward", "threshold_backward.grad_input"}, threshold_backward_rule, 0, 0},
    {{"leaky_relu_backward", "leaky_relu_backward.grad_input"}, leaky_relu_backward_rule, 0, 0},
    {{"hardtanh", "hardtanh_", "hardtanh.out"}, hardtanh_rule, 0, 0},
    {{"hardtanh_backward", "hardtanh_backward.grad_input"}, hardtanh_backward_rule, 0, 0},
    {{"elu", "elu_", "elu.out"}, elu_rule, 0, 0},
    {{"elu_backward", "elu_backward.grad_input"}, elu_backward_rule, 0, 0},
    {{"softplus", "softplus.out"}, softplus_rule, 0, 0},
    {{"softplus_backward", "softplus_backward.grad_input"}, softplus_backward_rule, 0, 0},
    {{"hardsigmoid", "hardsigmoid_", "hardsigmoid.out"}, hardsigmoid_rule, 0, 0},
    {{"hardsigmoid_backward", "hardsigmoid_backward.grad_input"}, hardsigmoid_backward_rule, 0, 0},
    {{"hardswish", "hardswish_", "hardswish.out"}, hardswish_rule, 0, 0},
    {{"hardswish_backward", "hardswish_backward.out"}, hardswish_backward_rule, 0, 0},
    {{"logit", "logit_", "logit.out"}, logit_rule, 0, 0},
};
TPU_COUNT_RULES(activation);
