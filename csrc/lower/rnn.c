/* The fused recurrent cells nn.LSTM, nn.GRU and their Cell modules run on
 * tpu: PyTorch's RNN code calls _thnn_fused_lstm_cell and
 * _thnn_fused_gru_cell for every device but the CPU, then their backwards.
 *
 * A cell gets the gate pre-activations as two products over the last dim
 * (input_gates = x W_ih^T, hidden_gates = h W_hh^T, G gates of H each) and
 * optional biases; the math is PyTorch's CUDA kernels' (RNN.cu), computed
 * in the opmath type (float32 for half types) and rounded once. The
 * workspace a forward hands its backward is what those kernels save:
 *   LSTM [.., 4H]: the activated gates i, f, g, o;
 *   GRU  [.., 5H]: r, z, n, hx and hn (the hidden product's new-gate part,
 *                  its bias included).
 * Bias gradients sum over every dim but the last. */
#include "lower/rules.h"

#define MAXR TPU_HLO_MAX_RANK

static tpu_dtype_t opmath_of(const tpu_lower_ctx *c, int i) { return tpu_lower_opmath(c->args[i].dtype); }

/* Argument |i| (a [.., G*H] product) plus bias argument |bias| ([G*H]) when
 * there is one. */
static tpu_hlo_value with_bias(tpu_lower_ctx *c, int i, int bias, tpu_dtype_t t) {
  tpu_hlo_value v = tensor_as(c, i, t);
  if (!tpu_lower_is_none(c, bias)) v = add(c, v, tpu_lower_operand(c, bias, t, tpu_hlo_type_of(B, v)));
  return v;
}

/* Gate |k| (H wide) of |x| along its last dim. */
static tpu_hlo_value gate(tpu_lower_ctx *c, tpu_hlo_value x, int k, int64_t h) {
  int last = tpu_hlo_rank(B, x) - 1;
  return tpu_hlo_slice_dim(B, x, last, k * h, (k + 1) * h, 1);
}

static tpu_hlo_value cat_gates(tpu_lower_ctx *c, const tpu_hlo_value *gates, int n) {
  return tpu_hlo_concatenate(B, gates, n, tpu_hlo_rank(B, gates[0]) - 1);
}

static tpu_hlo_value one_minus(tpu_lower_ctx *c, tpu_hlo_value x) {
  return sub(c, const_like(c, x, 1.0), x);
}

/* s * (1 - s): the derivative of a sigmoid from its value. */
static tpu_hlo_value dsigmoid(tpu_lower_ctx *c, tpu_hlo_value s) { return mul(c, s, one_minus(c, s)); }

/* 1 - t^2: the derivative of tanh from its value. */
static tpu_hlo_value dtanh(tpu_lower_ctx *c, tpu_hlo_value t) { return one_minus(c, mul(c, t, t)); }

/* The gradient of a bias added over the leading dims of |g|. */
static tpu_hlo_value bias_grad(tpu_lower_ctx *c, tpu_hlo_value g) {
  int64_t dims[MAXR];
  int n = tpu_hlo_rank(B, g) - 1;
  for (int i = 0; i < n; i++) dims[i] = i;
  return n > 0 ? tpu_lower_reduce(B, g, TPU_HLO_ADD, dims, n) : g;
}

static int64_t last_size(const tpu_lower_ctx *c, int i) { return c->args[i].sizes[c->args[i].rank - 1]; }

/* _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?,
 * hidden_bias?) -> (hy, cy, workspace) */
static tpu_status_t lstm_cell_rule(tpu_lower_ctx *c) {
  const tpu_dtype_t t = opmath_of(c, 0);
  const int64_t h = last_size(c, 2);
  tpu_hlo_value pre = add(c, with_bias(c, 0, 3, t), with_bias(c, 1, 4, t));
  tpu_hlo_value act[4] = {un(c, TPU_HLO_LOGISTIC, gate(c, pre, 0, h)), un(c, TPU_HLO_LOGISTIC, gate(c, pre, 1, h)),
                          un(c, TPU_HLO_TANH, gate(c, pre, 2, h)), un(c, TPU_HLO_LOGISTIC, gate(c, pre, 3, h))};
  tpu_hlo_value cy = add(c, mul(c, act[1], tensor_as(c, 2, t)), mul(c, act[0], act[2]));
  tpu_lower_set_output(c, 0, mul(c, act[3], un(c, TPU_HLO_TANH, cy)));
  tpu_lower_set_output(c, 1, cy);
  tpu_lower_set_output(c, 2, cat_gates(c, act, 4));
  return NULL;
}

/* _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace,
 * has_bias) -> (grad_gates, grad_cx, grad_bias); a missing gradient is
 * zero (PyTorch returns nothing when both are). */
static tpu_status_t lstm_cell_backward_rule(tpu_lower_ctx *c) {
  if (tpu_lower_is_none(c, 0) && tpu_lower_is_none(c, 1)) return NULL;
  const tpu_dtype_t t = opmath_of(c, 4);
  const int64_t h = last_size(c, 2);
  tpu_hlo_value ws = tensor_as(c, 4, t), cx = tensor_as(c, 2, t);
  tpu_hlo_value i = gate(c, ws, 0, h), f = gate(c, ws, 1, h), g = gate(c, ws, 2, h), o = gate(c, ws, 3, h);
  tpu_hlo_value tanh_cy = un(c, TPU_HLO_TANH, tensor_as(c, 3, t));
  tpu_hlo_value zero = const_like(c, cx, 0.0);
  tpu_hlo_value ghy = tpu_lower_is_none(c, 0) ? zero : tensor_as(c, 0, t);
  tpu_hlo_value gcy = tpu_lower_is_none(c, 1) ? zero : tensor_as(c, 1, t);
  /* the cell state's whole gradient: through hy = o tanh(cy), and direct */
  tpu_hlo_value gc = add(c, mul(c, mul(c, ghy, o), dtanh(c, tanh_cy)), gcy);
  tpu_hlo_value d[4] = {mul(c, mul(c, gc, g), dsigmoid(c, i)), mul(c, mul(c, gc, cx), dsigmoid(c, f)),
                        mul(c, mul(c, gc, i), dtanh(c, g)), mul(c, mul(c, ghy, tanh_cy), dsigmoid(c, o))};
  tpu_hlo_value grad_gates = cat_gates(c, d, 4);
  tpu_lower_set_output(c, 0, grad_gates);
  tpu_lower_set_output(c, 1, mul(c, gc, f));
  if (tpu_lower_bool(c, 5, false)) tpu_lower_set_output(c, 2, bias_grad(c, grad_gates));
  return NULL;
}

/* _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?,
 * hidden_bias?) -> (hy, workspace) */
static tpu_status_t gru_cell_rule(tpu_lower_ctx *c) {
  const tpu_dtype_t t = opmath_of(c, 0);
  const int64_t h = last_size(c, 2);
  tpu_hlo_value in = with_bias(c, 0, 3, t), hid = with_bias(c, 1, 4, t), hx = tensor_as(c, 2, t);
  tpu_hlo_value r = un(c, TPU_HLO_LOGISTIC, add(c, gate(c, in, 0, h), gate(c, hid, 0, h)));
  tpu_hlo_value z = un(c, TPU_HLO_LOGISTIC, add(c, gate(c, in, 1, h), gate(c, hid, 1, h)));
  tpu_hlo_value hn = gate(c, hid, 2, h);
  tpu_hlo_value n = un(c, TPU_HLO_TANH, add(c, gate(c, in, 2, h), mul(c, r, hn)));
  tpu_lower_set_output(c, 0, add(c, n, mul(c, z, sub(c, hx, n))));
  tpu_hlo_value ws[5] = {r, z, n, hx, hn};
  tpu_lower_set_output(c, 1, cat_gates(c, ws, 5));
  return NULL;
}

/* _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias) ->
 * (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias,
 * grad_hidden_bias) */
static tpu_status_t gru_cell_backward_rule(tpu_lower_ctx *c) {
  const tpu_dtype_t t = opmath_of(c, 1);
  const int64_t h = last_size(c, 0);
  tpu_hlo_value ws = tensor_as(c, 1, t), gh = tensor_as(c, 0, t);
  tpu_hlo_value r = gate(c, ws, 0, h), z = gate(c, ws, 1, h), n = gate(c, ws, 2, h);
  tpu_hlo_value hx = gate(c, ws, 3, h), hn = gate(c, ws, 4, h);
  tpu_hlo_value dn = mul(c, mul(c, gh, one_minus(c, z)), dtanh(c, n));
  tpu_hlo_value dz = mul(c, mul(c, gh, sub(c, hx, n)), dsigmoid(c, z));
  tpu_hlo_value dr = mul(c, mul(c, dn, hn), dsigmoid(c, r));
  tpu_hlo_value d_in[3] = {dr, dz, dn}, d_hid[3] = {dr, dz, mul(c, dn, r)};
  tpu_hlo_value g_in = cat_gates(c, d_in, 3), g_hid = cat_gates(c, d_hid, 3);
  tpu_lower_set_output(c, 0, g_in);
  tpu_lower_set_output(c, 1, g_hid);
  tpu_lower_set_output(c, 2, mul(c, gh, z));
  if (tpu_lower_bool(c, 2, false)) {
    tpu_lower_set_output(c, 3, bias_grad(c, g_in));
    tpu_lower_set_output(c, 4, bias_grad(c, g_hid));
  }
  return NULL;
}

const tpu_lower_rule tpu_rules_rnn[] = {
    {{"_thnn_fused_lstm_cell"}, lstm_cell_rule, 0, 0},
    {{"_thnn_fused_lstm_cell_backward_impl"}, lstm_cell_backward_rule, 0, 0},
    {{"_thnn_fused_gru_cell"}, gru_cell_rule, 0, 0},
    {{"_thnn_fused_gru_cell_backward"}, gru_cell_backward_rule, 0, 0},
};
TPU_COUNT_RULES(rnn);
