/* The CTC loss (Graves et al. 2006) and its gradient, as PyTorch's CPU
 * kernel computes them: the forward variables alpha over time in log space,
 * then for the gradient the backward variables beta and the sum of
 * alpha * beta per class.
 *
 * The recursions are loops over time (tpu_lower_loop), vectorized over the
 * batch and the extended target l' (blanks between and around the labels,
 * L = 2 S + 1 positions). The rules serve torchtpu::ctc_loss and its
 * backward (csrc/torch/ctc.cpp), which take the lengths as tensors, so that
 * one program serves every batch of a padded shape; dynamo never puts
 * aten::_ctc_loss in a graph (its output shape depends on the lengths). S is
 * the width log_alpha is given; positions past a sample's own
 * 2 * target_length + 1, and times past its input length, hold -inf. */
#include <math.h>

#include "lower/rules.h"

/* The loop state: the running row of alpha or beta [N, L], the rows so far
 * [T, N, L], and what every step reads. */
enum { ROW, ROWS, LP, SKIP, VALID, IN_LEN, END, NUM_STATE };


/* |v| [N] broadcast along new dims to |shape| (dtype kept), N at |dim|. */
static tpu_hlo_value along(tpu_lower_ctx *c, tpu_hlo_value v, int rank, const int64_t *dims, int64_t dim) {
  tpu_hlo_type t = tpu_hlo_make_type(tpu_hlo_dtype(B, v), rank, dims);
  return tpu_hlo_broadcast_in_dim(B, v, &t, &dim);
}

static tpu_hlo_value iota_s64(tpu_lower_ctx *c, int rank, const int64_t *dims, int dim) {
  tpu_hlo_type t = tpu_hlo_make_type(TPU_S64, rank, dims);
  return tpu_hlo_iota(B, &t, dim);
}

/* The first |S| labels of each sample [N, S] (s64): rows of a padded [N, >=S]
 * tensor, or runs of a concatenated 1-D one (positions past a sample's own
 * labels are never read). */
static tpu_hlo_value sample_labels(tpu_lower_ctx *c, int arg, tpu_hlo_value tl, int64_t n, int64_t s) {
  int64_t ns[2] = {n, s};
  tpu_hlo_value tg = tensor_as(c, arg, TPU_S64);
  if (c->args[arg].rank == 2) return tpu_hlo_slice_dim(B, tg, 1, 0, s, 1);
  int64_t total = c->args[arg].sizes[0];
  if (total == 0 || s == 0) return tpu_hlo_const_i64(B, &(tpu_hlo_type){TPU_S64, 2, {n, s}}, 0);
  tpu_hlo_value first = sub(c, tpu_lower_scan(B, tl, 0, TPU_HLO_ADD), tl);
  tpu_hlo_value at = add(c, along(c, first, 2, ns, 0), iota_s64(c, 2, ns, 1));
  at = tpu_hlo_clamp(B, tpu_hlo_scalar_i64(B, TPU_S64, 0), at, tpu_hlo_scalar_i64(B, TPU_S64, total - 1));
  tpu_hlo_gather_dims g = {.num_collapsed = 1, .num_start_map = 1, .index_vector_dim = 2};
  int64_t one = 1;
  return tpu_hlo_gather(B, tg, at, &g, &one, &(tpu_hlo_type){TPU_S64, 2, {n, s}});
}

/* The extended targets l' [N, L]: blank, label 1, blank, label 2 … blank. */
static tpu_hlo_value extended(tpu_lower_ctx *c, tpu_hlo_value labels, int64_t blank, int64_t n, int64_t s) {
  tpu_hlo_type col = tpu_hlo_make_type(TPU_S64, 2, (int64_t[]){n, 1});
  tpu_hlo_value tail = tpu_hlo_const_i64(B, &col, blank);
  if (s == 0) return tail;
  int64_t ns1[3] = {n, s, 1}, n2s[2] = {n, 2 * s};
  tpu_hlo_value pair[2] = {tpu_hlo_const_i64(B, &(tpu_hlo_type){TPU_S64, 3, {n, s, 1}}, blank),
                           tpu_hlo_reshape(B, labels, 3, ns1)};
  tpu_hlo_value both[2] = {tpu_hlo_reshape(B, tpu_hlo_concatenate(B, pair, 2, 2), 2, n2s), tail};
  return tpu_hlo_concatenate(B, both, 2, 1);
}

/* log_probs [T, N, C] at each extended target: [T, N, L]. */
static tpu_hlo_value at_labels(tpu_lower_ctx *c, tpu_hlo_value lp, tpu_hlo_value ext) {
  tpu_hlo_type lt = *tpu_hlo_type_of(B, lp);
  int64_t dims[3] = {lt.dims[0], lt.dims[1], tpu_hlo_type_of(B, ext)->dims[1]}, bd[2] = {1, 2};
  tpu_hlo_type it = tpu_hlo_make_type(TPU_S64, 3, dims);
  tpu_hlo_value idx = tpu_hlo_broadcast_in_dim(B, ext, &it, bd);
  tpu_hlo_gather_dims g = {.num_collapsed = 1, .num_start_map = 1, .num_operand_batch = 2,
                           .num_indices_batch = 2, .index_vector_dim = 3};
  g.collapsed_slice_dims[0] = g.start_index_map[0] = 2;
  g.operand_batching_dims[0] = g.start_indices_batching_dims[0] = 0;
  g.operand_batching_dims[1] = g.start_indices_batching_dims[1] = 1;
  int64_t slice[3] = {1, 1, 1};
  return tpu_hlo_gather(B, lp, idx, &g, slice, &(tpu_hlo_type){lt.dtype, 3, {dims[0], dims[1], dims[2]}});
}

/* |x| [N, L] moved |by| places along L (positive: towards higher s), -inf
 * (or false) coming in. */
static tpu_hlo_value shifted(tpu_lower_ctx *c, tpu_hlo_value x, int64_t by) {
  tpu_hlo_value fill = tpu_hlo_dtype(B, x) == TPU_BOOL ? tpu_hlo_scalar_i64(B, TPU_BOOL, 0)
                                                      : tpu_hlo_scalar_f64(B, tpu_hlo_dtype(B, x), -INFINITY);
  int64_t lo[2] = {0, by}, hi[2] = {0, -by}, in[2] = {0, 0};
  return tpu_hlo_pad(B, x, fill, lo, hi, in);
}

/* A maximum to take log-sum-exps relative to, as the CPU kernel takes it:
 * |m|, or 0 where m is -inf (no term at all). */
static tpu_hlo_value finite_max(tpu_lower_ctx *c, tpu_hlo_value m) {
  return sel(c, cmp(c, TPU_HLO_EQ, m, const_like(c, m, -INFINITY)), const_like(c, m, 0.0), m);
}

/* log(sum(exp(x_i))) of |n| values, relative to their finite_max. */
static tpu_hlo_value log_sum_exp(tpu_lower_ctx *c, const tpu_hlo_value *x, int n) {
  tpu_hlo_value m = x[0];
  for (int i = 1; i < n; i++) m = tpu_hlo_binary(B, TPU_HLO_MAX, m, x[i]);
  m = finite_max(c, m);
  tpu_hlo_value sum = un(c, TPU_HLO_EXP, sub(c, x[0], m));
  for (int i = 1; i < n; i++) sum = add(c, sum, un(c, TPU_HLO_EXP, sub(c, x[i], m)));
  return add(c, un(c, TPU_HLO_LOG, sum), m);
}

/* Row |t| of [T, N, L] |rows|, and |rows| with row |t| replaced by |row|. */
static tpu_hlo_value row_at(tpu_lower_ctx *c, tpu_hlo_value rows, tpu_hlo_value t) {
  const tpu_hlo_type *rt = tpu_hlo_type_of(B, rows);
  int64_t sizes[3] = {1, rt->dims[1], rt->dims[2]}, nl[2] = {rt->dims[1], rt->dims[2]};
  tpu_hlo_value zero = tpu_hlo_scalar_i64(B, TPU_S64, 0), at[3] = {t, zero, zero};
  return tpu_hlo_reshape(B, tpu_hlo_dynamic_slice(B, rows, at, sizes), 2, nl);
}

static tpu_hlo_value with_row(tpu_lower_ctx *c, tpu_hlo_value rows, tpu_hlo_value row, tpu_hlo_value t) {
  const tpu_hlo_type *rt = tpu_hlo_type_of(B, rows);
  int64_t one_nl[3] = {1, rt->dims[1], rt->dims[2]};
  tpu_hlo_value zero = tpu_hlo_scalar_i64(B, TPU_S64, 0), at[3] = {t, zero, zero};
  return tpu_hlo_dynamic_update_slice(B, rows, tpu_hlo_reshape(B, row, 3, one_nl), at);
}

/* |t| (rank 0) compared with each sample's input length, as a [N, L] mask. */
static tpu_hlo_value in_time(tpu_lower_ctx *c, tpu_hlo_cmp_t dir, tpu_hlo_value t, tpu_hlo_value in_len,
                             tpu_hlo_value like) {
  const tpu_hlo_type *lt = tpu_hlo_type_of(B, like);
  int64_t nl[2] = {lt->dims[0], lt->dims[1]};
  tpu_hlo_type tt = tpu_hlo_make_type(TPU_S64, 2, nl);
  return cmp(c, dir, tpu_hlo_broadcast_to(B, t, &tt), along(c, in_len, 2, nl, 0));
}

/* alpha at time t = k + 1 from alpha at k: eq (6) of the paper. */
static void alpha_step(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) {
  tpu_hlo_value t = add(c, k, tpu_hlo_scalar_i64(B, TPU_S64, 1)), prev = s[ROW], none = const_like(c, prev, -INFINITY);
  tpu_hlo_value from[3] = {prev, shifted(c, prev, 1), sel(c, s[SKIP], shifted(c, prev, 2), none)};
  tpu_hlo_value row = add(c, log_sum_exp(c, from, 3), row_at(c, s[LP], t));
  tpu_hlo_value live = and_(c, s[VALID], in_time(c, TPU_HLO_LT, t, s[IN_LEN], prev));
  s[ROW] = sel(c, live, row, none);
  s[ROWS] = with_row(c, s[ROWS], s[ROW], t);
}

/* beta at time t = T - 1 - k from beta at t + 1: eq (10); it starts at each
 * sample's last input, from the last blank and the last label (END). */
static void beta_step(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) {
  int64_t steps = tpu_hlo_type_of(B, s[ROWS])->dims[0];
  tpu_hlo_value t = sub(c, tpu_hlo_scalar_i64(B, TPU_S64, steps - 1), k), prev = s[ROW], none = const_like(c, prev, -INFINITY);
  tpu_hlo_value lp = row_at(c, s[LP], t);
  tpu_hlo_value from[3] = {prev, shifted(c, prev, -1), sel(c, s[SKIP], shifted(c, prev, -2), none)};
  tpu_hlo_value row = sel(c, s[VALID], add(c, log_sum_exp(c, from, 3), lp), none);
  tpu_hlo_value last = add(c, t, tpu_hlo_scalar_i64(B, TPU_S64, 1));
  tpu_hlo_value start = sel(c, s[END], lp, none);
  row = sel(c, in_time(c, TPU_HLO_LT, last, s[IN_LEN], prev), row, none);
  s[ROW] = sel(c, in_time(c, TPU_HLO_EQ, last, s[IN_LEN], prev), start, row);
  s[ROWS] = with_row(c, s[ROWS], s[ROW], t);
}

/* What both directions share, for log_probs argument |lp_arg|. */
typedef struct ctc {
  int64_t T, N, C, L;
  tpu_hlo_value lp, ext, lp_ext, in_len, tgt_len, valid, pos;
  tpu_hlo_value last_pos; /* 2 * target_length [N]: the last blank of l' */
} ctc;

static tpu_status_t ctc_setup(tpu_lower_ctx *c, int lp_arg, int64_t L, int64_t blank, ctc *p) {
  const tpu_lower_arg *a = &c->args[lp_arg];
  if (a->rank != 3) return tpu_lower_error(c, TPU_ERR_RUNTIME, "log_probs must be 3-D (time, batch, classes)");
  p->T = a->sizes[0], p->N = a->sizes[1], p->C = a->sizes[2], p->L = L;
  if (blank < 0 || blank >= p->C) return tpu_lower_error(c, TPU_ERR_RUNTIME, "blank must be in label range");
  int64_t S = (L - 1) / 2, nl[2] = {p->N, L};
  p->lp = tpu_lower_tensor(c, lp_arg);
  p->in_len = tensor_as(c, lp_arg + 2, TPU_S64);
  p->tgt_len = tensor_as(c, lp_arg + 3, TPU_S64);
  p->ext = extended(c, sample_labels(c, lp_arg + 1, p->tgt_len, p->N, S), blank, p->N, S);
  p->lp_ext = p->T > 0 ? at_labels(c, p->lp, p->ext) : TPU_HLO_NONE;
  p->pos = iota_s64(c, 2, nl, 1);
  p->last_pos = add(c, p->tgt_len, p->tgt_len);
  p->valid = cmp(c, TPU_HLO_LE, p->pos, along(c, p->last_pos, 2, nl, 0));
  return NULL;
}

/* Where l'(s) may be reached from l'(s - 2), skipping a blank. */
static tpu_hlo_value may_skip(tpu_lower_ctx *c, const ctc *p) {
  int64_t lo[2] = {0, 2}, hi[2] = {0, -2}, in[2] = {0, 0};
  tpu_hlo_value before = tpu_hlo_pad(B, p->ext, tpu_hlo_scalar_i64(B, TPU_S64, -1), lo, hi, in);
  tpu_hlo_value from_two = cmp(c, TPU_HLO_GE, p->pos, tpu_hlo_const_i64(B, tpu_hlo_type_of(B, p->pos), 2));
  return and_(c, cmp(c, TPU_HLO_NE, p->ext, before), from_two);
}

/* log_alpha [T, N, L]: -inf where a sample's recursion never reaches. */
static tpu_hlo_value alphas(tpu_lower_ctx *c, const ctc *p) {
  tpu_hlo_value rows = tpu_hlo_const_f64(B, &(tpu_hlo_type){tpu_hlo_dtype(B, p->lp), 3, {p->T, p->N, p->L}}, -INFINITY);
  if (p->T == 0) return rows;
  tpu_hlo_value zero = tpu_hlo_scalar_i64(B, TPU_S64, 0), first = row_at(c, p->lp_ext, zero);
  tpu_hlo_value start = and_(c, p->valid, cmp(c, TPU_HLO_LT, p->pos, tpu_hlo_const_i64(B, tpu_hlo_type_of(B, p->pos), 2)));
  tpu_hlo_value s[NUM_STATE] = {sel(c, start, first, const_like(c, first, -INFINITY))};
  s[ROWS] = with_row(c, rows, s[ROW], zero);
  s[LP] = p->lp_ext, s[SKIP] = may_skip(c, p), s[VALID] = p->valid, s[IN_LEN] = p->in_len;
  tpu_lower_loop(c, p->T - 1, END, s, alpha_step); /* END is beta's alone */
  return s[ROWS];
}

/* Each sample's value of [T, N, L] |rows| at time |t| [N] and position |at|
 * [N] (-inf where none): [N]. */
static tpu_hlo_value pick(tpu_lower_ctx *c, const ctc *p, tpu_hlo_value rows, tpu_hlo_value t, tpu_hlo_value at) {
  int64_t dims[3] = {p->T, p->N, p->L}, all[2] = {0, 2};
  tpu_hlo_value hit = and_(c, cmp(c, TPU_HLO_EQ, iota_s64(c, 3, dims, 0), along(c, t, 3, dims, 1)),
                           cmp(c, TPU_HLO_EQ, iota_s64(c, 3, dims, 2), along(c, at, 3, dims, 1)));
  tpu_hlo_value v = sel(c, hit, rows, const_like(c, rows, -INFINITY));
  return tpu_hlo_reduce_simple(B, v, tpu_hlo_scalar_f64(B, tpu_hlo_dtype(B, rows), -INFINITY), TPU_HLO_MAX, all, 2);
}

/* -log p(target | input) per sample, eq (8), from log_alpha. */
static tpu_hlo_value neg_log_likelihood(tpu_lower_ctx *c, const ctc *p, tpu_hlo_value rows) {
  tpu_hlo_type nt = tpu_hlo_make_type(tpu_hlo_dtype(B, p->lp), 1, &p->N);
  tpu_hlo_type ni = tpu_hlo_make_type(TPU_S64, 1, &p->N);
  tpu_hlo_value one = tpu_hlo_const_i64(B, &ni, 1), zero = tpu_hlo_const_i64(B, &ni, 0);
  tpu_hlo_value inf = tpu_hlo_const_f64(B, &nt, INFINITY);
  tpu_hlo_value no_input = cmp(c, TPU_HLO_EQ, p->in_len, zero), no_target = cmp(c, TPU_HLO_EQ, p->tgt_len, zero);
  tpu_hlo_value empty = sel(c, no_target, tpu_hlo_const_f64(B, &nt, 0.0), inf);
  if (p->T == 0) return empty;
  tpu_hlo_value last = sub(c, p->in_len, one), end = p->last_pos;
  tpu_hlo_value ends[2] = {pick(c, p, rows, last, end), pick(c, p, rows, last, sub(c, end, one))};
  return sel(c, no_input, empty, neg(c, log_sum_exp(c, ends, 2)));
}

/* ctc_loss(log_probs, targets, input_lengths, target_lengths, blank,
 * zero_infinity, max_target_length) -> (neg_log_likelihood [N], log_alpha
 * [N, T, L]). zero_infinity is for the gradient: the loss keeps its
 * infinities. */
static tpu_status_t ctc_loss_rule(tpu_lower_ctx *c) {
  ctc p;
  tpu_status_t st = ctc_setup(c, 0, c->out_types[1].dims[2], tpu_lower_int(c, 4, 0), &p);
  if (st) return st;
  if (p.N == 0) {
    tpu_lower_set_output(c, 1, tpu_hlo_const_f64(B, &c->out_types[1], 0.0));
    return done(c, tpu_hlo_const_f64(B, OUT, 0.0));
  }
  tpu_hlo_value rows = alphas(c, &p);
  tpu_lower_set_output(c, 0, neg_log_likelihood(c, &p, rows));
  tpu_lower_set_output(c, 1, tpu_hlo_transpose(B, rows, (int64_t[]){1, 0, 2}));
  return NULL;
}

/* ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths,
 * neg_log_likelihood, blank, zero_infinity, max_target_length): d loss /
 * d log_probs [T, N, C], eq (16): exp(lp) minus the posterior of each class,
 * the sum over s with l'(s) == c of alpha * beta / likelihood. alpha is
 * computed afresh: the log_alpha autograd keeps is narrowed to the batch's
 * longest target, a width that changes from batch to batch. */
static tpu_status_t ctc_loss_backward_rule(tpu_lower_ctx *c) {
  ctc p;
  tpu_status_t st = ctc_setup(c, 1, 2 * tpu_lower_int(c, 8, 0) + 1, tpu_lower_int(c, 6, 0), &p);
  if (st) return st;
  tpu_dtype_t t = tpu_hlo_dtype(B, p.lp);
  if (p.T == 0 || p.N == 0) return done(c, tpu_hlo_const_f64(B, OUT, 0.0));
  tpu_hlo_value la = alphas(c, &p);
  int64_t tnc[3] = {p.T, p.N, p.C};
  tpu_hlo_value end = and_(c, p.valid, cmp(c, TPU_HLO_GE, add(c, p.pos, tpu_hlo_const_i64(B, tpu_hlo_type_of(B, p.pos), 1)),
                                             along(c, p.last_pos, 2, (int64_t[]){p.N, p.L}, 0)));
  tpu_hlo_value next_skip = shifted(c, may_skip(c, &p), -2);
  tpu_hlo_value s[NUM_STATE] = {tpu_hlo_const_f64(B, &(tpu_hlo_type){t, 2, {p.N, p.L}}, -INFINITY)};
  s[ROWS] = tpu_hlo_const_f64(B, &(tpu_hlo_type){t, 3, {p.T, p.N, p.L}}, -INFINITY);
  s[LP] = p.lp_ext, s[SKIP] = next_skip, s[VALID] = p.valid, s[IN_LEN] = p.in_len, s[END] = end;
  tpu_lower_loop(c, p.T, NUM_STATE, s, beta_step);
  /* log of the sum over s with l'(s) == c of alpha * beta, relative to the
   * largest term of each (t, n); a one-hot product sums the terms by class. */
  tpu_hlo_value ab = add(c, la, s[ROWS]);
  int64_t over_l = 2;
  tpu_hlo_value m = finite_max(c, tpu_hlo_reduce_simple(B, ab, tpu_hlo_scalar_f64(B, t, -INFINITY), TPU_HLO_MAX, &over_l, 1));
  int64_t keep[2] = {0, 1};
  tpu_hlo_value terms = un(c, TPU_HLO_EXP, sub(c, ab, tpu_hlo_broadcast_in_dim(B, m, &(tpu_hlo_type){t, 3, {p.T, p.N, p.L}}, keep)));
  int64_t nlc[3] = {p.N, p.L, p.C}, to_nl[2] = {0, 1};
  tpu_hlo_type onehot_t = tpu_hlo_make_type(TPU_S64, 3, nlc);
  tpu_hlo_value onehot = cmp(c, TPU_HLO_EQ, tpu_hlo_broadcast_in_dim(B, p.ext, &onehot_t, to_nl), tpu_hlo_iota(B, &onehot_t, 2));
  onehot = tpu_hlo_convert(B, onehot, t);
  tpu_hlo_dot_dims d = {.num_batch = 1, .num_contract = 1};
  d.lhs_batch[0] = 1, d.rhs_batch[0] = 0, d.lhs_contract[0] = 2, d.rhs_contract[0] = 1;
  tpu_hlo_value sums = tpu_hlo_dot_general(B, terms, onehot, &d, t, TPU_HLO_PRECISION_HIGHEST); /* [N, T, C] */
  sums = tpu_hlo_transpose(B, sums, (int64_t[]){1, 0, 2});
  tpu_hlo_value lcab = add(c, un(c, TPU_HLO_LOG, sums), tpu_hlo_broadcast_in_dim(B, m, &(tpu_hlo_type){t, 3, {p.T, p.N, p.C}}, keep));
  int64_t n_dim = 1;
  tpu_hlo_type tnc_t = tpu_hlo_make_type(t, 3, tnc);
  tpu_hlo_value nll = tpu_hlo_broadcast_in_dim(B, tensor_as(c, 5, t), &tnc_t, &n_dim);
  tpu_hlo_value gr = tpu_hlo_broadcast_in_dim(B, tensor_as(c, 0, t), &tnc_t, &n_dim);
  tpu_hlo_value g = mul(c, sub(c, un(c, TPU_HLO_EXP, p.lp), un(c, TPU_HLO_EXP, sub(c, add(c, lcab, nll), p.lp))), gr);
  tpu_hlo_value live = cmp(c, TPU_HLO_LT, iota_s64(c, 3, tnc, 0), along(c, p.in_len, 3, tnc, 1));
  if (tpu_lower_bool(c, 7, false))
    live = and_(c, live, cmp(c, TPU_HLO_NE, nll, tpu_hlo_const_f64(B, &tnc_t, INFINITY)));
  return done(c, sel(c, live, g, tpu_hlo_const_f64(B, &tnc_t, 0.0)));
}

const tpu_lower_rule tpu_rules_ctc[] = {
    {{"torchtpu::ctc_loss"}, ctc_loss_rule, 0, 0, {TPU_DTS_F32_F64, 0, "ctc_loss_cpu"}},
    {{"torchtpu::ctc_loss_backward"}, ctc_loss_backward_rule, 0, 0, {TPU_DTS_F32_F64, 1, "ctc_loss_cpu"}},
};
TPU_COUNT_RULES(ctc);
