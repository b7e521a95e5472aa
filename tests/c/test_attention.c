/* Attention kernel tests: forward and backward against a double-precision
 * reference written here, over shapes that miss the kernel's block sizes,
 * causal and not, with biases that mask keys and whole rows, serially and
 * through a tpu_parallel that runs its tasks in reverse (the results must
 * not depend on the order). Needs no plugin. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "check.h"
#include "kernels/attention.h"

static uint64_t rng = 0x9e3779b97f4a7c15u;

static float uniform(void) { /* in [-1, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)(rng >> 40) / (float)(1 << 23) - 1.0f;
}

static float *floats(size_t n) { return malloc((n > 0 ? n : 1) * sizeof(float)); }

static double *doubles(int64_t n) { return calloc((size_t)n + 1, sizeof(double)); }

static float *random_floats(size_t n) {
  float *x = floats(n);
  for (size_t i = 0; i < n; i++) x[i] = uniform();
  return x;
}

static void fill_nan(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = NAN;
}

static void reverse_run(void *ctx, int64_t n, void (*task)(void *arg, int64_t i), void *arg) {
  (void)ctx;
  for (int64_t i = n - 1; i >= 0; i--) task(arg, i);
}

static const tpu_parallel reverse = {reverse_run, NULL};

typedef struct reference {
  double *out, *lse, *dq, *dk, *dv, *dbias;
} reference;

/* The textbook formulas, one (batch, head, query) at a time, in double. */
static reference reference_attention(const tpu_attention_shape *s, const float *q, const float *k,
                                     const float *v, const float *bias, const float *dout, bool causal,
                                     float scale) {
  const int64_t BH = s->batch * s->heads, T = s->q_len, S = s->kv_len, D = s->head_dim, E = s->v_dim;
  reference r = {doubles(BH * T * E), doubles(BH * T),     doubles(BH * T * D),
                 doubles(BH * S * D), doubles(BH * S * E), doubles(BH * T * S)};
  double *x = doubles(S), *p = doubles(S);
  for (int64_t b = 0; b < BH; b++)
    for (int64_t i = 0; i < T; i++) {
      const float *qi = q + (b * T + i) * D, *doi = dout + (b * T + i) * E;
      double m = -INFINITY, l = 0, delta = 0, *oi = r.out + (b * T + i) * E;
      for (int64_t j = 0; j < S; j++) {
        x[j] = -INFINITY;
        if (causal && j > i) continue;
        double dotp = 0;
        for (int64_t d = 0; d < D; d++) dotp += (double)qi[d] * k[(b * S + j) * D + d];
        x[j] = scale * dotp + (bias != NULL ? bias[(b * T + i) * S + j] : 0.0);
        m = x[j] > m ? x[j] : m;
      }
      for (int64_t j = 0; j < S; j++) l += p[j] = m == -INFINITY ? 0.0 : exp(x[j] - m);
      for (int64_t j = 0; j < S; j++) {
        p[j] = l > 0 ? p[j] / l : 0.0;
        for (int64_t e = 0; e < E; e++) oi[e] += p[j] * v[(b * S + j) * E + e];
      }
      r.lse[b * T + i] = l > 0 ? m + log(l) : -INFINITY;
      for (int64_t e = 0; e < E; e++) delta += doi[e] * oi[e];
      for (int64_t j = 0; j < S; j++) {
        double dp = 0;
        for (int64_t e = 0; e < E; e++) {
          dp += doi[e] * (double)v[(b * S + j) * E + e];
          r.dv[(b * S + j) * E + e] += p[j] * doi[e];
        }
        double ds = p[j] * (dp - delta);
        r.dbias[(b * T + i) * S + j] = ds;
        for (int64_t d = 0; d < D; d++) {
          r.dq[(b * T + i) * D + d] += scale * ds * k[(b * S + j) * D + d];
          r.dk[(b * S + j) * D + d] += scale * ds * qi[d];
        }
      }
    }
  free(x);
  free(p);
  return r;
}

static void reference_free(reference *r) {
  free(r->out), free(r->lse), free(r->dq), free(r->dk), free(r->dv), free(r->dbias);
}

/* |got| is within 1e-5 of |want| relative to the tensor's largest element
 * (gradients cancel: small elements carry the absolute error of large
 * terms); infinities must match exactly. */
static bool close_to(const char *what, const float *got, const double *want, int64_t n) {
  double largest = 0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(want[i]) && fabs(want[i]) > largest) largest = fabs(want[i]);
  for (int64_t i = 0; i < n; i++) {
    bool ok = isinf(want[i]) ? got[i] == want[i] : fabs(got[i] - want[i]) <= 1e-5 * largest;
    if (!ok) {
      fprintf(stderr, "  %s[%lld] = %.9g, want %.9g\n", what, (long long)i, got[i], want[i]);
      return false;
    }
  }
  return true;
}

/* [B, H, L, W] <-> [B, L, H, W] (|to|: to token-major). */
static float *relayout(const float *x, int64_t B, int64_t H, int64_t L, int64_t W, bool to) {
  float *y = floats((size_t)(B * H * L * W));
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t l = 0; l < L; l++)
        for (int64_t w = 0; w < W; w++) {
          int64_t hm = ((b * H + h) * L + l) * W + w, tm = ((b * L + l) * H + h) * W + w;
          if (to) y[tm] = x[hm];
          else y[hm] = x[tm];
        }
  return y;
}

/* The token-major layout of the same case gives the same results. */
static bool check_token_major(const tpu_attention_shape *hm, const float *q, const float *k, const float *v,
                              const float *bias, const float *dout, bool causal, float scale,
                              const reference *r) {
  tpu_attention_shape s = *hm;
  s.token_major = true;
  const int64_t B = s.batch, H = s.heads, T = s.q_len, S = s.kv_len, D = s.head_dim, E = s.v_dim;
  float *tq = relayout(q, B, H, T, D, true), *tk = relayout(k, B, H, S, D, true);
  float *tv = relayout(v, B, H, S, E, true), *tdout = relayout(dout, B, H, T, E, true);
  float *out = floats((size_t)(B * H * T * E)), *lse = floats((size_t)(B * H * T));
  float *dq = floats((size_t)(B * H * T * D)), *dk = floats((size_t)(B * H * S * D));
  float *dv = floats((size_t)(B * H * S * E));
  tpu_attention_forward(&s, tq, tk, tv, bias, causal, scale, out, lse, &reverse);
  tpu_attention_backward(&s, tq, tk, tv, bias, out, lse, tdout, causal, scale, dq, dk, dv, NULL, &reverse);
  float *hout = relayout(out, B, H, T, E, false), *hdq = relayout(dq, B, H, T, D, false);
  float *hdk = relayout(dk, B, H, S, D, false), *hdv = relayout(dv, B, H, S, E, false);
  bool ok = close_to("token-major out", hout, r->out, B * H * T * E) &&
            close_to("token-major lse", lse, r->lse, B * H * T) &&
            close_to("token-major dq", hdq, r->dq, B * H * T * D) &&
            close_to("token-major dk", hdk, r->dk, B * H * S * D) &&
            close_to("token-major dv", hdv, r->dv, B * H * S * E);
  free(tq), free(tk), free(tv), free(tdout), free(out), free(lse), free(dq), free(dk), free(dv);
  free(hout), free(hdq), free(hdk), free(hdv);
  return ok;
}

/* Masks of a bias: 1 sets -inf with probability 1/4, 2 also masks all of
 * row 1 of each (batch, head). */
static void check_case(int64_t B, int64_t H, int64_t T, int64_t S, int64_t D, int64_t E, bool causal,
                       bool with_bias, int masks) {
  const tpu_attention_shape s = {B, H, T, S, D, E};
  const int64_t BH = B * H;
  float *q = random_floats((size_t)(BH * T * D)), *k = random_floats((size_t)(BH * S * D));
  float *v = random_floats((size_t)(BH * S * E)), *dout = random_floats((size_t)(BH * T * E));
  float *bias = with_bias ? random_floats((size_t)(BH * T * S)) : NULL;
  for (int64_t i = 0; with_bias && i < BH * T * S; i++) {
    bool row1 = masks >= 2 && i / S % T == 1;
    if (row1 || (masks >= 1 && uniform() < -0.5f)) bias[i] = -INFINITY;
  }
  const float scale = D > 0 ? 1.0f / sqrtf((float)D) : 1.0f;
  reference r = reference_attention(&s, q, k, v, bias, dout, causal, scale);

  const size_t n_out = (size_t)(BH * T * E), n_lse = (size_t)(BH * T), n_q = (size_t)(BH * T * D);
  const size_t n_k = (size_t)(BH * S * D), n_v = (size_t)(BH * S * E), n_b = (size_t)(BH * T * S);
  float *out[2], *lse[2], *dq[2], *dk[2], *dv[2], *dbias = floats(n_b);
  fill_nan(dbias, n_b);
  for (int pass = 0; pass < 2; pass++) {
    const tpu_parallel *par = pass == 0 ? NULL : &reverse;
    out[pass] = floats(n_out), lse[pass] = floats(n_lse), dq[pass] = floats(n_q);
    dk[pass] = floats(n_k), dv[pass] = floats(n_v);
    fill_nan(out[pass], n_out), fill_nan(lse[pass], n_lse), fill_nan(dq[pass], n_q);
    fill_nan(dk[pass], n_k), fill_nan(dv[pass], n_v);
    tpu_attention_forward(&s, q, k, v, bias, causal, scale, out[pass], lse[pass], par);
    tpu_attention_backward(&s, q, k, v, bias, out[pass], lse[pass], dout, causal, scale, dq[pass], dk[pass],
                           dv[pass], pass == 0 ? dbias : NULL, par);
  }
  bool ok = close_to("out", out[0], r.out, (int64_t)n_out) && close_to("lse", lse[0], r.lse, (int64_t)n_lse);
  ok = ok && close_to("dq", dq[0], r.dq, (int64_t)n_q) && close_to("dk", dk[0], r.dk, (int64_t)n_k);
  ok = ok && close_to("dv", dv[0], r.dv, (int64_t)n_v) && close_to("dbias", dbias, r.dbias, (int64_t)n_b);
  ok = ok && check_token_major(&s, q, k, v, bias, dout, causal, scale, &r);
  if (!ok)
    fprintf(stderr, "  in B=%d H=%d T=%d S=%d D=%d E=%d causal=%d bias=%d masks=%d\n", (int)B, (int)H, (int)T,
            (int)S, (int)D, (int)E, causal, with_bias, masks);
  CHECK(ok);
  /* Every element comes from one task, computed the same way in any order. */
  CHECK(memcmp(out[0], out[1], n_out * sizeof(float)) == 0);
  CHECK(memcmp(lse[0], lse[1], n_lse * sizeof(float)) == 0);
  CHECK(memcmp(dq[0], dq[1], n_q * sizeof(float)) == 0);
  CHECK(memcmp(dk[0], dk[1], n_k * sizeof(float)) == 0);
  CHECK(memcmp(dv[0], dv[1], n_v * sizeof(float)) == 0);
  for (int pass = 0; pass < 2; pass++) {
    free(out[pass]), free(lse[pass]), free(dq[pass]), free(dk[pass]), free(dv[pass]);
  }
  free(q), free(k), free(v), free(dout), free(bias), free(dbias);
  reference_free(&r);
}

static void test_small(void) {
  check_case(1, 1, 1, 1, 1, 1, false, false, 0);
  check_case(1, 1, 3, 5, 2, 7, true, false, 0);
  check_case(1, 1, 5, 3, 7, 2, true, true, 0);
  check_case(1, 2, 5, 6, 0, 3, true, true, 1); /* D = 0: the scores are the bias */
}

/* Sizes off every block size: T, S not multiples of the row groups or the
 * key block, D != E, neither a multiple of a vector. */
static void test_odd_sizes(void) {
  for (int causal = 0; causal < 2; causal++)
    for (int with_bias = 0; with_bias < 2; with_bias++) {
      check_case(2, 3, 37, 53, 24, 40, causal, with_bias, 0);
      check_case(1, 2, 53, 37, 24, 40, causal, with_bias, 0);
      check_case(1, 1, 37, 37, 40, 24, causal, with_bias, 0);
    }
}

/* Several key blocks and forward tasks per head, blocks of unequal size. */
static void test_long(void) {
  check_case(1, 2, 200, 300, 16, 8, false, true, 0);
  check_case(2, 1, 300, 200, 16, 8, true, false, 0);
  check_case(1, 1, 261, 261, 64, 64, true, true, 0);
}

static void test_benchmark_shape(void) {
  check_case(2, 2, 128, 128, 32, 32, true, false, 0);
  check_case(1, 3, 128, 128, 32, 32, false, true, 0);
}

/* -inf in the bias, and a row that sees no key at all: out 0, lse -inf,
 * zero gradients, no NaN. */
static void test_masked(void) {
  check_case(1, 1, 9, 11, 5, 6, false, true, 1);
  check_case(2, 2, 37, 53, 24, 40, false, true, 2);
  check_case(2, 2, 53, 37, 24, 40, true, true, 2);
  check_case(1, 2, 130, 140, 8, 8, true, true, 2);
}

/* Heads too wide for the tiles: the scalar paths (D + E, and D, over 4096)
 * and forward blocks of a single key (D = 2100). */
static void test_wide_heads(void) {
  check_case(1, 2, 5, 7, 2100, 2000, false, true, 2);
  check_case(2, 1, 7, 5, 4097, 3, true, false, 0);
}

/* S = 0: every row sees nothing. T = 0 and B = 0 touch nothing. */
static void test_empty(void) {
  const tpu_attention_shape s = {1, 2, 3, 0, 4, 5};
  float q[24], out[30], lse[6], dq[24], dout[30];
  for (int i = 0; i < 24; i++) q[i] = uniform(), dq[i] = NAN;
  for (int i = 0; i < 30; i++) dout[i] = uniform(), out[i] = NAN;
  for (int causal = 0; causal < 2; causal++) {
    tpu_attention_forward(&s, q, NULL, NULL, NULL, causal, 0.5f, out, lse, NULL);
    bool ok = true;
    for (int i = 0; i < 30; i++) ok = ok && out[i] == 0.0f;
    for (int i = 0; i < 6; i++) ok = ok && lse[i] == -INFINITY;
    CHECK(ok);
    tpu_attention_backward(&s, q, NULL, NULL, NULL, out, lse, dout, causal, 0.5f, dq, NULL, NULL, NULL,
                           &reverse);
    for (int i = 0; i < 24; i++) ok = ok && dq[i] == 0.0f;
    CHECK(ok);
  }
  const tpu_attention_shape no_queries = {1, 1, 0, 4, 4, 4};
  float kv[16], dk[16], dv[16];
  for (int i = 0; i < 16; i++) kv[i] = uniform(), dk[i] = dv[i] = NAN;
  tpu_attention_forward(&no_queries, NULL, kv, kv, NULL, true, 1.0f, NULL, NULL, &reverse);
  tpu_attention_backward(&no_queries, NULL, kv, kv, NULL, NULL, NULL, NULL, true, 1.0f, NULL, dk, dv, NULL,
                         NULL);
  bool ok = true;
  for (int i = 0; i < 16; i++) ok = ok && dk[i] == 0.0f && dv[i] == 0.0f;
  CHECK(ok);
  const tpu_attention_shape no_heads = {0, 2, 3, 4, 4, 4};
  tpu_attention_forward(&no_heads, NULL, NULL, NULL, NULL, false, 1.0f, NULL, NULL, NULL);
  tpu_attention_backward(&no_heads, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false, 1.0f, NULL, NULL, NULL,
                         NULL, &reverse);
}

int main(void) {
  RUN(test_small);
  RUN(test_odd_sizes);
  RUN(test_long);
  RUN(test_benchmark_shape);
  RUN(test_masked);
  RUN(test_wide_heads);
  RUN(test_empty);
  return check_failures ? 1 : 0;
}
