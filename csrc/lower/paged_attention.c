/* Paged attention over vLLM's KV cache: torchtpu::paged_attention, one
 * ragged call that writes the step's keys and values to their cache slots
 * and attends every query token of a batch mixing prefills, chunked
 * prefills and decodes.
 *
 * The cache is vLLM's [blocks, kv_heads, block_size, 2 * head_size] (a
 * token's key is the first half of its row, its value the second); slot -1
 * (a padding token) writes nothing. Where the device runs it (the CPU
 * plugin) the hand-written kernel (kernels/paged_attention.h) writes the
 * rows in place (its cache result aliases the cache operand: XLA's scatter
 * of a few rows costs more than the attention) and walks the block tables
 * where they lie. Elsewhere XLA's composite: a scatter, then a gather of
 * each request's blocks into [R, KH, keys, 2D] and of its queries into
 * [R, max_query_len, H, D], one batched product per key head and its group
 * of query heads, a mask from positions (causal, in the sliding window), a
 * safe softmax, one product with the values, and a gather of each token's
 * row back. Both compute in float32, read block ids clamped into the cache,
 * and give a query that sees no key (and a token of no request) a row of
 * zeros. max_query_len sizes the composite's padding (it must be at least
 * the longest query); the kernel needs none. */
#include <math.h>
#include <stdio.h>

#include "kernels/kernels.h"
#include "kernels/paged_attention.h"
#include "lower/rules.h"

enum { Q, KEY, VALUE, CACHE, SLOTS, TABLE, SEQ_LENS, STARTS, MAX_QUERY_LEN, SCALE, WINDOW, SOFT_CAP, ALIBI };

typedef struct paged {
  int64_t t, h, kh, d, n, bs, r, w, qm, window;
  double scale, soft_cap;
  bool alibi;
} paged;

static tpu_hlo_value s32(tpu_lower_ctx *c, int arg) { return tpu_hlo_convert(B, tpu_lower_tensor(c, arg), TPU_S32); }

static tpu_hlo_type type_of(tpu_dtype_t dtype, int rank, const int64_t *dims) {
  return tpu_hlo_make_type(dtype, rank, dims);
}

/* |x| broadcast to |t| with its dims at |dims|. */
static tpu_hlo_value along(tpu_lower_ctx *c, tpu_hlo_value x, const tpu_hlo_type *t, const int64_t *dims) {
  return tpu_hlo_broadcast_in_dim(B, x, t, dims);
}

static tpu_status_t read_shapes(tpu_lower_ctx *c, paged *p) {
  const tpu_lower_arg *q = &c->args[Q], *kv = &c->args[CACHE], *table = &c->args[TABLE];
  const tpu_lower_arg *lens = &c->args[SEQ_LENS], *starts = &c->args[STARTS];
  if (q->rank != 3 || kv->rank != 4 || table->rank != 2 || lens->rank != 1 || starts->rank != 1)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "paged_attention: bad ranks");
  *p = (paged){.t = q->sizes[0], .h = q->sizes[1], .d = q->sizes[2], .n = kv->sizes[0], .kh = kv->sizes[1],
               .bs = kv->sizes[2], .r = table->sizes[0], .w = table->sizes[1],
               .qm = tpu_lower_int(c, MAX_QUERY_LEN, 0), .window = tpu_lower_int(c, WINDOW, 0),
               .scale = tpu_lower_float(c, SCALE, 1.0), .soft_cap = tpu_lower_float(c, SOFT_CAP, 0.0),
               .alibi = !tpu_lower_is_none(c, ALIBI)};
  if (kv->sizes[3] != 2 * p->d || p->kh < 1 || p->h % p->kh != 0 || lens->sizes[0] != p->r ||
      starts->sizes[0] != p->r + 1)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "paged_attention: bad shapes");
  return NULL;
}

/* Whether the call writes: key and value given, and some slot. */
static bool writes(tpu_lower_ctx *c) {
  return !tpu_lower_is_none(c, KEY) && !tpu_lower_is_none(c, VALUE) && c->args[SLOTS].sizes[0] > 0;
}

/* The first |slots| rows of key or value ([M, KH, D]) in the cache's dtype. */
static tpu_hlo_value step_rows(tpu_lower_ctx *c, int arg, tpu_dtype_t dtype) {
  return tpu_hlo_convert(B, tpu_hlo_slice_dim(B, tpu_lower_tensor(c, arg), 0, 0, c->args[SLOTS].sizes[0], 1), dtype);
}

/* The cache with rows [key | value] written at their slots (the composite's
 * write): a negative slot lands past the cache, where scatter drops it. */
static tpu_hlo_value write_cache(tpu_lower_ctx *c, const paged *p, tpu_hlo_value cache) {
  const int64_t m = c->args[SLOTS].sizes[0];
  const tpu_dtype_t dtype = tpu_hlo_dtype(B, cache);
  tpu_hlo_value kv[2] = {step_rows(c, KEY, dtype), step_rows(c, VALUE, dtype)};
  tpu_hlo_value rows = tpu_hlo_concatenate(B, kv, 2, 2); /* [M, KH, 2D] */
  tpu_hlo_value slot = s32(c, SLOTS);
  tpu_hlo_type st = *tpu_hlo_type_of(B, slot);
  tpu_hlo_value bs = tpu_hlo_const_i64(B, &st, p->bs);
  tpu_hlo_value valid = cmp(c, TPU_HLO_GE, slot, tpu_hlo_const_i64(B, &st, 0));
  tpu_hlo_value idx[2] = {sel(c, valid, dvd(c, slot, bs), tpu_hlo_const_i64(B, &st, p->n)),
                          sel(c, valid, bin(c, TPU_HLO_REM, slot, bs), tpu_hlo_const_i64(B, &st, 0))};
  int64_t col[2] = {m, 1};
  for (int i = 0; i < 2; i++) idx[i] = tpu_hlo_reshape(B, idx[i], 2, col);
  tpu_hlo_scatter_dims d = {.num_update_window = 2, .update_window_dims = {1, 2}, .num_inserted = 2,
                            .inserted_window_dims = {0, 2}, .num_to_operand = 2,
                            .scatter_dims_to_operand_dims = {0, 2}, .index_vector_dim = 1};
  return tpu_hlo_scatter(B, cache, tpu_hlo_concatenate(B, idx, 2, 1), rows, &d, NULL, false);
}

/* x[idx] along dim 0 of |x| for an index tensor |idx| of any rank: the
 * rows (clamped into x, as gather clamps), [idx.shape, x.shape[1:]]. */
static tpu_hlo_value take_rows(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value idx) {
  const tpu_hlo_type *xt = tpu_hlo_type_of(B, x), *it = tpu_hlo_type_of(B, idx);
  tpu_hlo_gather_dims g = {.num_collapsed = 1, .num_start_map = 1, .index_vector_dim = it->rank};
  int64_t slice[TPU_HLO_MAX_RANK], dims[TPU_HLO_MAX_RANK];
  int rank = 0;
  for (int i = 0; i < it->rank; i++) dims[rank++] = it->dims[i];
  slice[0] = 1;
  for (int i = 1; i < xt->rank; i++) {
    slice[i] = xt->dims[i];
    g.offset_dims[g.num_offset++] = rank;
    dims[rank++] = xt->dims[i];
  }
  tpu_hlo_type out = type_of(xt->dtype, rank, dims);
  return tpu_hlo_gather(B, x, idx, &g, slice, &out);
}

/* The composite read: [T, H, D] float32. */
static tpu_hlo_value composite(tpu_lower_ctx *c, const paged *p, tpu_hlo_value cache, tpu_hlo_value table,
                               tpu_hlo_value lens, tpu_hlo_value starts, tpu_hlo_value alibi) {
  const int64_t R = p->r, Qm = p->qm, KH = p->kh, G = p->h / p->kh, D = p->d, S = p->w * p->bs, T = p->t;
  int64_t out_dims[3] = {T, p->h, D};
  tpu_hlo_type out_t = type_of(TPU_F32, 3, out_dims);
  if (R == 0 || Qm <= 0 || S == 0 || T == 0) return tpu_hlo_const_f64(B, &out_t, 0.0);
  /* keys and values: [R, W, KH, BS, 2D] -> [R, KH, S, 2D] */
  static const int64_t to_heads[5] = {0, 2, 1, 3, 4};
  int64_t kv_dims[4] = {R, KH, S, 2 * D};
  tpu_hlo_value kv = tpu_hlo_convert(B, tpu_hlo_reshape(B, tpu_hlo_transpose(B, take_rows(c, cache, table), to_heads),
                                                         4, kv_dims), TPU_F32);
  tpu_hlo_value k = tpu_hlo_slice_dim(B, kv, 3, 0, D, 1), v = tpu_hlo_slice_dim(B, kv, 3, D, 2 * D, 1);
  /* each request's queries padded to Qm: [R, Qm, KH, G, D], and their positions */
  int64_t rq[2] = {R, Qm};
  tpu_hlo_type rq_t = type_of(TPU_S32, 2, rq);
  static const int64_t rows_of[1] = {0};
  tpu_hlo_value first = tpu_hlo_slice_dim(B, starts, 0, 0, R, 1), end = tpu_hlo_slice_dim(B, starts, 0, 1, R + 1, 1);
  tpu_hlo_value qlen = along(c, sub(c, end, first), &rq_t, rows_of), i = tpu_hlo_iota(B, &rq_t, 1);
  tpu_hlo_value valid = cmp(c, TPU_HLO_LT, i, qlen);
  tpu_hlo_value tok = add(c, along(c, first, &rq_t, rows_of), i);
  tpu_hlo_value q = take_rows(c, tpu_hlo_convert(B, tpu_lower_tensor(c, Q), TPU_F32), tok);
  int64_t qg[5] = {R, Qm, KH, G, D};
  q = tpu_hlo_reshape(B, q, 5, qg);
  tpu_hlo_value pos = sel(c, valid, add(c, sub(c, along(c, lens, &rq_t, rows_of), qlen), i),
                          tpu_hlo_const_i64(B, &rq_t, -1));
  /* scores [R, KH, Qm, G, S] */
  static const tpu_hlo_dot_dims qk = {.num_batch = 2, .lhs_batch = {0, 2}, .rhs_batch = {0, 1},
                                      .num_contract = 1, .lhs_contract = {4}, .rhs_contract = {3}};
  tpu_hlo_value s = tpu_hlo_dot_general(B, q, k, &qk, TPU_F32, c->precision);
  const tpu_hlo_type st = *tpu_hlo_type_of(B, s);
  s = mul(c, s, tpu_hlo_const_f64(B, &st, p->scale));
  if (p->soft_cap > 0) {
    tpu_hlo_value cap = tpu_hlo_const_f64(B, &st, p->soft_cap);
    s = mul(c, un(c, TPU_HLO_TANH, dvd(c, s, cap)), cap);
  }
  static const int64_t pos_at[2] = {0, 2}, heads_at[2] = {1, 3};
  tpu_hlo_type si = with_dtype(&st, TPU_S32);
  tpu_hlo_value key = tpu_hlo_iota(B, &si, 4), qpos = along(c, pos, &si, pos_at);
  if (p->alibi) {
    int64_t kg[2] = {KH, G};
    tpu_hlo_value slopes = along(c, tpu_hlo_reshape(B, alibi, 2, kg), &st, heads_at);
    s = add(c, s, mul(c, slopes, tpu_hlo_convert(B, sub(c, key, qpos), TPU_F32)));
  }
  tpu_hlo_value seen = cmp(c, TPU_HLO_LE, key, qpos);
  if (p->window > 0)
    seen = and_(c, seen, cmp(c, TPU_HLO_GT, key, sub(c, qpos, tpu_hlo_const_i64(B, &si, p->window))));
  s = sel(c, seen, s, tpu_hlo_const_f64(B, &st, -INFINITY));
  /* a safe softmax: rows that see nothing have l = 0 and give zeros */
  static const int64_t key_dim = 4, row_dims[4] = {0, 1, 2, 3};
  tpu_hlo_value mx = tpu_lower_reduce(B, s, TPU_HLO_MAX, &key_dim, 1);
  tpu_hlo_value m_safe = sel(c, un(c, TPU_HLO_IS_FINITE, mx), mx, const_like(c, mx, 0.0));
  tpu_hlo_value e = un(c, TPU_HLO_EXP, sub(c, s, along(c, m_safe, &st, row_dims)));
  tpu_hlo_value l = tpu_lower_reduce(B, e, TPU_HLO_ADD, &key_dim, 1);
  static const tpu_hlo_dot_dims pv = {.num_batch = 2, .lhs_batch = {0, 1}, .rhs_batch = {0, 1},
                                      .num_contract = 1, .lhs_contract = {4}, .rhs_contract = {2}};
  tpu_hlo_value o = tpu_hlo_dot_general(B, e, v, &pv, TPU_F32, c->precision); /* [R, KH, Qm, G, D] */
  const tpu_hlo_type ot = *tpu_hlo_type_of(B, o);
  tpu_hlo_value lb = along(c, l, &ot, row_dims), zero = tpu_hlo_const_f64(B, &ot, 0.0);
  o = sel(c, cmp(c, TPU_HLO_EQ, lb, zero), zero, dvd(c, o, lb));
  int64_t rows[3] = {R * Qm, p->h, D};
  o = tpu_hlo_reshape(B, tpu_hlo_transpose(B, o, to_heads), 3, rows);
  /* token t's row: request r(t) = #requests ending at or before t, row r * Qm + t - first[r] */
  int64_t tr[2] = {T, R};
  tpu_hlo_type tr_t = type_of(TPU_S32, 2, tr), t_t = type_of(TPU_S32, 1, &T);
  static const int64_t req_dim = 1, reqs_at[1] = {1};
  tpu_hlo_value ended = cmp(c, TPU_HLO_LE, along(c, end, &tr_t, reqs_at), tpu_hlo_iota(B, &tr_t, 0));
  tpu_hlo_value req = tpu_lower_reduce(B, tpu_hlo_convert(B, ended, TPU_S32), TPU_HLO_ADD, &req_dim, 1);
  tpu_hlo_value within = sub(c, tpu_hlo_iota(B, &t_t, 0), take_rows(c, first, req));
  tpu_hlo_value at = add(c, mul(c, req, tpu_hlo_const_i64(B, &t_t, Qm)), within);
  tpu_hlo_value ok = and_(c, cmp(c, TPU_HLO_LT, req, tpu_hlo_const_i64(B, &t_t, R)),
                          cmp(c, TPU_HLO_LT, within, tpu_hlo_const_i64(B, &t_t, Qm)));
  static const int64_t tok_dim[1] = {0};
  return sel(c, along(c, ok, &(tpu_hlo_type){TPU_BOOL, 3, {T, p->h, D}}, tok_dim), take_rows(c, o, at),
             tpu_hlo_const_f64(B, &out_t, 0.0));
}

static bool use_kernel(const tpu_lower_ctx *c, const paged *p, tpu_dtype_t cache_dtype) {
  return (c->kernels & TPU_KERNEL_PAGED_ATTENTION) != 0 && p->d <= TPU_PAGED_MAX_HEAD_DIM &&
         (cache_dtype == TPU_F32 || cache_dtype == TPU_BF16);
}

/* paged_attention(query, key?, value?, kv_cache!, slot_mapping, block_table,
 * seq_lens, query_start_loc, max_query_len, scale, sliding_window, soft_cap,
 * alibi_slopes?) -> output, and the written cache. */
static tpu_status_t paged_attention_rule(tpu_lower_ctx *c) {
  paged p = {0};
  TPU_RETURN_IF_ERROR(read_shapes(c, &p));
  tpu_hlo_value cache = tpu_lower_tensor(c, CACHE);
  const tpu_dtype_t cache_dtype = tpu_hlo_dtype(B, cache);
  const bool write = writes(c);
  tpu_hlo_value table = s32(c, TABLE), lens = s32(c, SEQ_LENS), starts = s32(c, STARTS);
  tpu_hlo_value alibi = p.alibi ? tpu_hlo_convert(B, tpu_lower_tensor(c, ALIBI), TPU_F32) : TPU_HLO_NONE;
  tpu_hlo_value out;
  if (use_kernel(c, &p, cache_dtype)) { /* the kernel writes the cache in place, then reads it */
    tpu_hlo_value ops[9] = {tpu_hlo_convert(B, tpu_lower_tensor(c, Q), TPU_F32), cache, table, lens, starts};
    int n = 5;
    if (p.alibi) ops[n++] = alibi;
    if (write) {
      ops[n++] = step_rows(c, KEY, cache_dtype);
      ops[n++] = step_rows(c, VALUE, cache_dtype);
      ops[n++] = s32(c, SLOTS);
    }
    int64_t dims[3] = {p.t, p.h, p.d};
    tpu_hlo_type types[2] = {type_of(TPU_F32, 3, dims), *tpu_hlo_type_of(B, cache)};
    char attrs[512];
    snprintf(attrs, sizeof attrs,
             "call_target_name = \"%s\", api_version = 4 : i32, backend_config = {has_alibi = %d : i32, "
             "has_write = %d : i32, scale = %.9e : f32, soft_cap = %.9e : f32, window = %d : i32}%s",
             TPU_KERNEL_PAGED_ATTENTION_CALL, p.alibi, write, p.scale, p.soft_cap, (int)p.window,
             write ? ", output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [1], "
                     "operand_index = 1, operand_tuple_indices = []>]"
                   : "");
    tpu_hlo_value res[2];
    tpu_hlo_op(B, "stablehlo.custom_call", ops, n, NULL, 0, attrs, types, write ? 2 : 1, res);
    out = res[0];
    if (write) cache = res[1];
  } else {
    if (write) cache = write_cache(c, &p, cache);
    out = composite(c, &p, cache, table, lens, starts, alibi);
  }
  tpu_lower_set_output(c, 0, tpu_hlo_convert(B, out, c->out_types[0].dtype));
  tpu_lower_set_output(c, 1, cache);
  return NULL;
}

const tpu_lower_rule tpu_rules_paged_attention[] = {
    {{"torchtpu::paged_attention"}, paged_attention_rule, TPU_RULE_MATMUL_PRECISION, 0},
};
TPU_COUNT_RULES(paged_attention);
