/* Fused optimizer steps (torch.optim with fused=True): one parameter's update
 * of _fused_adam_, _fused_adamw_, _fused_sgd_ and _fused_adagrad_. The eager layer applies a
 * rule to every parameter of the call in one program (TPU_RULE_PER_ITEM), so
 * a whole optimizer step is one program.
 *
 * The math is PyTorch's CPU fused kernels': half types compute in float32,
 * Adam's bias corrections in float64 from the step tensor; the gradient is
 * written back divided by grad_scale (not negated by maximize); where
 * found_inf is 1 nothing changes. The numbers (lr, betas, weight decay …) are
 * runtime values (TPU_RULE_RUNTIME_FLOATS), so a learning-rate schedule
 * reuses the program; a weight decay or momentum of 0 selects the update
 * without it, exactly (an inf parameter stays inf). */
#include "lower/rules.h"

enum {
  ADAM_PARAM, ADAM_GRAD, ADAM_EXP_AVG, ADAM_EXP_AVG_SQ, ADAM_MAX_EXP_AVG_SQ, ADAM_STEP, ADAM_LR, ADAM_BETA1,
  ADAM_BETA2, ADAM_WEIGHT_DECAY, ADAM_EPS, ADAM_AMSGRAD, ADAM_MAXIMIZE, ADAM_GRAD_SCALE, ADAM_FOUND_INF
};
enum {
  SGD_PARAM, SGD_GRAD, SGD_MOMENTUM_BUFFER, SGD_WEIGHT_DECAY, SGD_MOMENTUM, SGD_LR, SGD_DAMPENING, SGD_NESTEROV,
  SGD_MAXIMIZE, SGD_IS_FIRST_STEP, SGD_GRAD_SCALE, SGD_FOUND_INF
};

/* PyTorch's check that list |arg| (named |name|) has an item for every
 * parameter, and ours that the item has the parameter's shape. */
static tpu_status_t check_item(tpu_lower_ctx *c, int arg, const char *name) {
  if (tpu_lower_is_none(c, arg))
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "Expected %s.size() == n_tensors to be true, but got false.", name);
  const tpu_lower_arg *a = &c->args[arg], *p = &c->args[0];
  bool same = a->rank == p->rank;
  for (int d = 0; same && d < a->rank; d++) same = a->sizes[d] == p->sizes[d];
  if (!same)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "%s: every tensor of %s must have its parameter's shape", c->op, name);
  return NULL;
}

/* A number, or a one-element tensor (a tensor lr, grad_scale), as a rank-0
 * value of |dtype|. */
static tpu_hlo_value number(tpu_lower_ctx *c, int arg, tpu_dtype_t dtype) {
  tpu_hlo_value v = tpu_lower_tensor(c, arg);
  if (tpu_hlo_rank(B, v) != 0) v = tpu_hlo_reshape(B, v, 0, NULL);
  return tpu_hlo_convert(B, v, dtype);
}

/* |v| (rank 0) spread over the parameter's type |t|. */
static tpu_hlo_value spread(tpu_lower_ctx *c, tpu_hlo_value v, const tpu_hlo_type *t) {
  tpu_hlo_type to = *t;
  to.dtype = tpu_hlo_dtype(B, v);
  return tpu_hlo_broadcast_to(B, v, &to);
}

/* A rank-0 value (a float64 step size) in the parameter's math type, spread
 * over |t|. */
static tpu_hlo_value as_math(tpu_lower_ctx *c, tpu_hlo_value v, const tpu_hlo_type *t) {
  return spread(c, tpu_hlo_convert(B, v, t->dtype), t);
}

/* |number| argument |arg| in the parameter's math type, spread over |t|. */
static tpu_hlo_value scalar_arg(tpu_lower_ctx *c, int arg, const tpu_hlo_type *t) {
  return as_math(c, number(c, arg, t->dtype), t);
}

/* |x| where number argument |arg| is 0, else |y|. */
static tpu_hlo_value unless_zero(tpu_lower_ctx *c, int arg, tpu_hlo_value x, tpu_hlo_value y, const tpu_hlo_type *t) {
  tpu_hlo_value n = number(c, arg, TPU_F64);
  tpu_hlo_value zero = cmp(c, TPU_HLO_EQ, n, tpu_hlo_scalar_f64(B, TPU_F64, 0.0));
  return sel(c, spread(c, zero, t), x, y);
}

/* The grad divided by grad_scale, as the fused kernels do before anything else. */
static tpu_hlo_value unscaled_grad(tpu_lower_ctx *c, int grad, int grad_scale, const tpu_hlo_type *t) {
  tpu_hlo_value g = tensor_as(c, grad, t->dtype);
  return tpu_lower_is_none(c, grad_scale) ? g : dvd(c, g, scalar_arg(c, grad_scale, t));
}

/* Sets the outputs to |values|, or to |old| where found_inf is 1. */
static tpu_status_t finish(tpu_lower_ctx *c, int found_inf, const tpu_hlo_value *old, const tpu_hlo_value *values,
                           int n, const tpu_hlo_type *t) {
  tpu_hlo_value skip = TPU_HLO_NONE;
  if (!tpu_lower_is_none(c, found_inf))
    skip = spread(c, cmp(c, TPU_HLO_EQ, number(c, found_inf, TPU_F32), tpu_hlo_scalar_f64(B, TPU_F32, 1.0)), t);
  for (int i = 0; i < n; i++)
    if (values[i] != TPU_HLO_NONE) tpu_lower_set_output(c, i, skip == TPU_HLO_NONE ? values[i] : sel(c, skip, old[i], values[i]));
  return NULL;
}

/* One parameter of _fused_adam(w)_. Outputs: param, grad, exp_avg,
 * exp_avg_sq, max_exp_avg_sq. */
enum { ADAM, ADAMW };
static tpu_status_t adam_rule(tpu_lower_ctx *c) {
  const bool adamw = c->data == ADAMW;
  tpu_hlo_type t = c->out_types[ADAM_PARAM];
  t.dtype = tpu_lower_opmath(t.dtype);
  const bool amsgrad = tpu_lower_bool(c, ADAM_AMSGRAD, false);
  TPU_RETURN_IF_ERROR(check_item(c, ADAM_GRAD, "grads"));
  TPU_RETURN_IF_ERROR(check_item(c, ADAM_EXP_AVG, "exp_avgs"));
  TPU_RETURN_IF_ERROR(check_item(c, ADAM_EXP_AVG_SQ, "exp_avg_sqs"));
  if (amsgrad) TPU_RETURN_IF_ERROR(check_item(c, ADAM_MAX_EXP_AVG_SQ, "max_exp_avg_sqs"));
  if (tpu_lower_is_none(c, ADAM_STEP))
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "Expected state_steps.size() == n_tensors to be true, but got false.");
  tpu_hlo_value old[5] = {tensor_as(c, ADAM_PARAM, t.dtype), tensor_as(c, ADAM_GRAD, t.dtype),
                          tensor_as(c, ADAM_EXP_AVG, t.dtype), tensor_as(c, ADAM_EXP_AVG_SQ, t.dtype),
                          tpu_lower_is_none(c, ADAM_MAX_EXP_AVG_SQ) ? TPU_HLO_NONE
                                                                    : tensor_as(c, ADAM_MAX_EXP_AVG_SQ, t.dtype)};
  tpu_hlo_value param = old[0], grad = unscaled_grad(c, ADAM_GRAD, ADAM_GRAD_SCALE, &t);
  tpu_hlo_value scaled = grad;
  if (tpu_lower_bool(c, ADAM_MAXIMIZE, false)) grad = neg(c, grad);
  tpu_hlo_value lr = number(c, ADAM_LR, TPU_F64), beta1 = number(c, ADAM_BETA1, TPU_F64);
  tpu_hlo_value beta2 = number(c, ADAM_BETA2, TPU_F64), one = tpu_hlo_scalar_f64(B, TPU_F64, 1.0);
  if (adamw) {
    tpu_hlo_value decay = as_math(c, mul(c, lr, number(c, ADAM_WEIGHT_DECAY, TPU_F64)), &t);
    param = unless_zero(c, ADAM_WEIGHT_DECAY, param, sub(c, param, mul(c, decay, param)), &t);
  } else {
    grad = unless_zero(c, ADAM_WEIGHT_DECAY, grad, add(c, grad, mul(c, param, scalar_arg(c, ADAM_WEIGHT_DECAY, &t))), &t);
  }
  tpu_hlo_value m = lerp_of(c, old[2], grad, as_math(c, sub(c, one, beta1), &t));
  tpu_hlo_value v = add(c, mul(c, old[3], as_math(c, beta2, &t)),
                        mul(c, mul(c, as_math(c, sub(c, one, beta2), &t), grad), grad));
  tpu_hlo_value step = number(c, ADAM_STEP, TPU_F64);
  tpu_hlo_value step_size = dvd(c, lr, sub(c, one, tpu_hlo_binary(B, TPU_HLO_POW, beta1, step)));
  tpu_hlo_value bc2_sqrt = un(c, TPU_HLO_SQRT, sub(c, one, tpu_hlo_binary(B, TPU_HLO_POW, beta2, step)));
  tpu_hlo_value v_max = TPU_HLO_NONE, denom_of = v;
  if (amsgrad) { /* torch.maximum: NaN wins */
    v_max = extreme_of(c, TPU_HLO_MAX, old[4], v);
    denom_of = v_max;
  }
  tpu_hlo_value denom =
      add(c, dvd(c, un(c, TPU_HLO_SQRT, denom_of), as_math(c, bc2_sqrt, &t)), scalar_arg(c, ADAM_EPS, &t));
  tpu_hlo_value update = dvd(c, mul(c, as_math(c, step_size, &t), m), denom);
  tpu_hlo_value values[5] = {sub(c, param, update), scaled, m, v, amsgrad ? v_max : old[4]};
  return finish(c, ADAM_FOUND_INF, old, values, 5, &t);
}

/* One parameter of _fused_sgd_. Outputs: param, grad, momentum_buffer. */
static tpu_status_t sgd_rule(tpu_lower_ctx *c) {
  tpu_hlo_type t = c->out_types[SGD_PARAM];
  t.dtype = tpu_lower_opmath(t.dtype);
  const bool has_buffer = !tpu_lower_is_none(c, SGD_MOMENTUM_BUFFER);
  TPU_RETURN_IF_ERROR(check_item(c, SGD_GRAD, "grads"));
  if (has_buffer) TPU_RETURN_IF_ERROR(check_item(c, SGD_MOMENTUM_BUFFER, "momentum_buffer_list"));
  tpu_hlo_value old[3] = {tensor_as(c, SGD_PARAM, t.dtype), tensor_as(c, SGD_GRAD, t.dtype),
                          has_buffer ? tensor_as(c, SGD_MOMENTUM_BUFFER, t.dtype) : TPU_HLO_NONE};
  tpu_hlo_value param = old[0], grad = unscaled_grad(c, SGD_GRAD, SGD_GRAD_SCALE, &t);
  tpu_hlo_value values[3] = {TPU_HLO_NONE, grad, TPU_HLO_NONE};
  if (tpu_lower_bool(c, SGD_MAXIMIZE, false)) grad = neg(c, grad);
  grad = unless_zero(c, SGD_WEIGHT_DECAY, grad, add(c, grad, mul(c, param, scalar_arg(c, SGD_WEIGHT_DECAY, &t))), &t);
  if (has_buffer) {
    tpu_hlo_value momentum = scalar_arg(c, SGD_MOMENTUM, &t), buf = grad;
    if (!tpu_lower_bool(c, SGD_IS_FIRST_STEP, false)) {
      tpu_hlo_value one = tpu_hlo_scalar_f64(B, TPU_F64, 1.0);
      tpu_hlo_value keep = as_math(c, sub(c, one, number(c, SGD_DAMPENING, TPU_F64)), &t);
      buf = add(c, mul(c, old[2], momentum), mul(c, grad, keep));
    }
    tpu_hlo_value moved = tpu_lower_bool(c, SGD_NESTEROV, false) ? add(c, grad, mul(c, buf, momentum)) : buf;
    grad = unless_zero(c, SGD_MOMENTUM, grad, moved, &t);
    values[2] = unless_zero(c, SGD_MOMENTUM, old[2], buf, &t);
  }
  values[0] = sub(c, param, mul(c, grad, scalar_arg(c, SGD_LR, &t)));
  return finish(c, SGD_FOUND_INF, old, values, 3, &t);
}

enum {
  ADAGRAD_PARAM, ADAGRAD_GRAD, ADAGRAD_STATE_SUM, ADAGRAD_STEP, ADAGRAD_LR, ADAGRAD_LR_DECAY, ADAGRAD_WEIGHT_DECAY,
  ADAGRAD_EPS, ADAGRAD_MAXIMIZE, ADAGRAD_GRAD_SCALE, ADAGRAD_FOUND_INF
};

/* One parameter of _fused_adagrad_. Outputs: param, grad, state_sum, and (in
 * the float-lr overload, whose schema marks it written) the step, which the
 * kernel does not change: the optimizer counts steps itself. */
static tpu_status_t adagrad_rule(tpu_lower_ctx *c) {
  tpu_hlo_type t = c->out_types[ADAGRAD_PARAM];
  t.dtype = tpu_lower_opmath(t.dtype);
  TPU_RETURN_IF_ERROR(check_item(c, ADAGRAD_GRAD, "grads"));
  TPU_RETURN_IF_ERROR(check_item(c, ADAGRAD_STATE_SUM, "state_sums"));
  if (tpu_lower_is_none(c, ADAGRAD_STEP))
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "Expected state_steps.size() == n_tensors to be true, but got false.");
  tpu_hlo_value old[3] = {tensor_as(c, ADAGRAD_PARAM, t.dtype), tensor_as(c, ADAGRAD_GRAD, t.dtype),
                          tensor_as(c, ADAGRAD_STATE_SUM, t.dtype)};
  tpu_hlo_value param = old[0], grad = unscaled_grad(c, ADAGRAD_GRAD, ADAGRAD_GRAD_SCALE, &t);
  tpu_hlo_value values[3] = {TPU_HLO_NONE, grad, TPU_HLO_NONE};
  if (tpu_lower_bool(c, ADAGRAD_MAXIMIZE, false)) grad = neg(c, grad);
  grad = unless_zero(c, ADAGRAD_WEIGHT_DECAY, grad,
                     add(c, grad, mul(c, param, scalar_arg(c, ADAGRAD_WEIGHT_DECAY, &t))), &t);
  /* clr = lr / (1 + (step - 1) * lr_decay), in float64 */
  tpu_hlo_value one = tpu_hlo_scalar_f64(B, TPU_F64, 1.0), step = number(c, ADAGRAD_STEP, TPU_F64);
  tpu_hlo_value clr = dvd(c, number(c, ADAGRAD_LR, TPU_F64),
                          add(c, one, mul(c, sub(c, step, one), number(c, ADAGRAD_LR_DECAY, TPU_F64))));
  values[2] = add(c, old[2], mul(c, grad, grad));
  tpu_hlo_value std = add(c, un(c, TPU_HLO_SQRT, values[2]), scalar_arg(c, ADAGRAD_EPS, &t));
  values[0] = sub(c, param, dvd(c, mul(c, as_math(c, clr, &t), grad), std));
  if (c->num_outputs > ADAGRAD_STEP) tpu_lower_set_output(c, ADAGRAD_STEP, tpu_lower_tensor(c, ADAGRAD_STEP));
  return finish(c, ADAGRAD_FOUND_INF, old, values, 3, &t);
}

#define FUSED (TPU_RULE_PER_ITEM | TPU_RULE_RUNTIME_FLOATS)

const tpu_lower_rule tpu_rules_optim[] = {
    {{"_fused_adam_", "_fused_adam_.tensor_lr"}, adam_rule, FUSED, ADAM},
    {{"_fused_adamw_", "_fused_adamw_.tensor_lr"}, adam_rule, FUSED, ADAMW},
    {{"_fused_sgd_", "_fused_sgd_.tensor_lr"}, sgd_rule, FUSED, 0},
    {{"_fused_adagrad_", "_fused_adagrad_.tensor_lr"}, adagrad_rule, FUSED, 0},
};
TPU_COUNT_RULES(optim);
