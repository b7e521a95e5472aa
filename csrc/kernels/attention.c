/* Scaled dot-product attention on the host, as plain C loops shaped for
 * GCC's auto-vectorizer. The forward pass walks key blocks with an online
 * softmax; the backward pass recomputes the probabilities from lse
 * (FlashAttention-2's scheme). Every product is a sum of rank-1 updates into
 * an 8 x 16 tile held in registers, its inner loop running with unit stride
 * over keys or features, so that nothing needs a vectorized float reduction
 * (GCC does those only under -ffast-math): scores read a transposed, scaled
 * tile of K, and dP one of V. Causal attention skips what a query cannot
 * see, 8 query rows by 16 keys at a time. Scratch lives on the stack, about
 * 22 KiB per forward task and 50 KiB per backward task; heads too wide for
 * its tiles (D, or D + E in the backward, over 4096) take a scalar path. */
#include "kernels/attention.h"

#include <math.h>
#include <string.h>

#include "kernels/multiversion.h"

/* On Zen 4 the x86-64-v4 clone (AVX-512) runs 4x faster than baseline SSE2
 * code and 2x faster than the AVX2 one (whose 16 registers cannot hold the
 * tile). */

enum {
  KEY_BLOCK = 128,    /* keys per block, at most; a multiple of 16 */
  TILE_FLOATS = 4096, /* a transposed K (or K and V) tile, D (+ E) by block */
  GROUP = 8,          /* query rows per tile of a product */
  FWD_ROWS = 64,      /* query rows per forward task */
  BWD_ROWS = 32,      /* query rows per backward block */
  LANES = 16,         /* partial sums and maxima: one AVX-512 vector */
};

typedef struct job {
  int64_t H, T, S, D, E, chunks;
  int64_t ldd, lde; /* row strides of the D-wide (q, k, dq, dk) and E-wide tensors */
  bool token_major;
  const float *q, *k, *v, *bias, *out, *lse, *dout;
  float *out_w, *lse_w, *dq, *dk, *dv, *dbias;
  bool causal;
  float scale;
} job;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static void zero(float *x, int64_t n) { /* memset(NULL, 0, 0) is undefined */
  if (n > 0) memset(x, 0, (size_t)n * sizeof *x);
}

static void zero_rows(float *x, int64_t rows, int64_t width, int64_t ld) {
  for (int64_t r = 0; r < rows; r++) zero(x + r * ld, width);
}

/* Where row 0 of head |bh| (batch * H + head) starts in a tensor of |len|
 * rows of |width| floats per head: [B, H, len, width], or token-major
 * [B, len, H, width] (rows then J->H * width apart). */
static int64_t head_at(const job *J, int64_t bh, int64_t len, int64_t width) {
  return J->token_major ? ((bh / J->H) * len * J->H + bh % J->H) * width : bh * len * width;
}

/* exp(x) to about 1 ulp (Cephes' expf polynomial), 0 below -87.3 and for
 * -inf, NaN for NaN. Vectorizes where libm's expf would not: 2^n comes from
 * the bits of the rounding addition, without a float-to-int conversion. */
static INLINE float fast_exp(float x) {
  float c = x < -87.3f ? -87.3f : x;
  c = c > 88.3f ? 88.3f : c;
  union { float f; uint32_t u; } t = {.f = c * 1.44269504f + 12582912.0f}; /* 1.5 * 2^23 + n */
  float n = t.f - 12582912.0f;
  float r = c - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  union { uint32_t u; float f; } two_n = {.u = (t.u - 0x4b400000u + 127u) << 23};
  float y = p * two_n.f;
  return x < -87.3f ? 0.0f : y;
}

/* The lanes are folded in halves: a chain of 15 dependent adds is slower. */
static INLINE float lanes_max(float *lane) {
  for (int l = 0; l < 8; l++) lane[l] = lane[l + 8] > lane[l] ? lane[l + 8] : lane[l];
  for (int l = 0; l < 4; l++) lane[l] = lane[l + 4] > lane[l] ? lane[l + 4] : lane[l];
  for (int l = 0; l < 2; l++) lane[l] = lane[l + 2] > lane[l] ? lane[l + 2] : lane[l];
  return lane[1] > lane[0] ? lane[1] : lane[0];
}

static INLINE float lanes_sum(float *lane) {
  for (int l = 0; l < 8; l++) lane[l] += lane[l + 8];
  for (int l = 0; l < 4; l++) lane[l] += lane[l + 4];
  for (int l = 0; l < 2; l++) lane[l] += lane[l + 2];
  return lane[0] + lane[1];
}

static INLINE float row_max(const float *x, int64_t n) {
  float lane[LANES], m = -INFINITY;
  for (int l = 0; l < LANES; l++) lane[l] = -INFINITY;
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int l = 0; l < LANES; l++) lane[l] = x[j + l] > lane[l] ? x[j + l] : lane[l];
  for (; j < n; j++) m = x[j] > m ? x[j] : m;
  float lm = lanes_max(lane);
  return lm > m ? lm : m;
}

/* x[j] = exp(x[j] - m); returns the sum. */
static INLINE float exp_sum(float *x, int64_t n, float m) {
  float lane[LANES] = {0}, sum = 0;
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int l = 0; l < LANES; l++) {
      x[j + l] = fast_exp(x[j + l] - m);
      lane[l] += x[j + l];
    }
  for (; j < n; j++) {
    x[j] = fast_exp(x[j] - m);
    sum += x[j];
  }
  return sum + lanes_sum(lane);
}

static INLINE float dot(const float *a, const float *b, int64_t n) {
  float lane[LANES] = {0}, sum = 0;
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) lane[l] += a[i + l] * b[i + l];
  for (; i < n; i++) sum += a[i] * b[i];
  return sum + lanes_sum(lane);
}

/* dst[c * ldd + r] = scale * src[r * lds + c], and 0 for rows <= r < ldd:
 * the tiles of gemm may then run past the last key. */
static INLINE void transpose(const float *src, int64_t rows, int64_t cols, int64_t lds, float scale, float *dst,
                             int64_t ldd) {
  for (int64_t c = 0; c < cols; c++) {
    for (int64_t r = 0; r < rows; r++) dst[c * ldd + r] = scale * src[r * lds + c];
    for (int64_t r = rows; r < ldd; r++) dst[c * ldd + r] = 0.0f;
  }
}

/* Keys per block when a transposed tile of them takes |width| floats per
 * key: a multiple of the tiles' 16 where it can be, 0 when not even one
 * key fits. */
static int64_t key_block(int64_t width) {
  int64_t n = width == 0 ? KEY_BLOCK : min64(KEY_BLOCK, TILE_FLOATS / width);
  return n >= 16 ? n / 16 * 16 : n;
}

/* The padded leading dimension of a transposed block of |nb| keys, and the
 * columns worth computing for |n| of them. */
static int64_t padded(int64_t n, int64_t block) { return min64((n + 15) / 16 * 16, block); }

/* An 8 x 16 block of c += a b, kept in registers over all of kd (GCC keeps
 * acc there only with the row factors as named scalars, as here): one load
 * of b feeds eight multiply-adds, and eight chains hide their latency. */
static INLINE void tile8x16(int64_t kd, const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb,
                            float *c, int64_t ldc) {
  float acc[8][16];
  for (int r = 0; r < 8; r++)
    for (int j = 0; j < 16; j++) acc[r][j] = c[r * ldc + j];
  for (int64_t t = 0; t < kd; t++) {
    const float *bt = b + t * ldb, *at = a + t * acs;
    float x0 = at[0], x1 = at[ars], x2 = at[2 * ars], x3 = at[3 * ars];
    float x4 = at[4 * ars], x5 = at[5 * ars], x6 = at[6 * ars], x7 = at[7 * ars];
    for (int j = 0; j < 16; j++) {
      acc[0][j] += x0 * bt[j], acc[1][j] += x1 * bt[j], acc[2][j] += x2 * bt[j], acc[3][j] += x3 * bt[j];
      acc[4][j] += x4 * bt[j], acc[5][j] += x5 * bt[j], acc[6][j] += x6 * bt[j], acc[7][j] += x7 * bt[j];
    }
  }
  for (int r = 0; r < 8; r++)
    for (int j = 0; j < 16; j++) c[r * ldc + j] = acc[r][j];
}

/* One row of c += a b, for the edges the tiles leave. */
static INLINE void gemm_row(int64_t n, int64_t kd, const float *a, int64_t acs, const float *b, int64_t ldb,
                            float *restrict c) {
  for (int64_t t = 0; t < kd; t++)
    for (int64_t j = 0; j < n; j++) c[j] += a[t * acs] * b[t * ldb + j];
}

/* c[r * ldc + j] += sum_{t < kd} a[r * ars + t * acs] * b[t * ldb + j] for
 * r < m, j < n: |a| may be read transposed, |b| and |c| are row-major. */
MULTIVERSION static void gemm(int64_t m, int64_t n, int64_t kd, const float *a, int64_t ars, int64_t acs,
                              const float *b, int64_t ldb, float *c, int64_t ldc) {
  const int64_t m8 = m - m % 8, n16 = n - n % 16;
  for (int64_t r = 0; r < m8; r += 8)
    for (int64_t j = 0; j < n16; j += 16)
      tile8x16(kd, a + r * ars, ars, acs, b + j, ldb, c + r * ldc + j, ldc);
  for (int64_t r = 0; n16 < n && r < m8; r++)
    gemm_row(n - n16, kd, a + r * ars, acs, b + n16, ldb, c + r * ldc + n16);
  for (int64_t r = m8; r < m; r++) gemm_row(n, kd, a + r * ars, acs, b, ldb, c + r * ldc);
}

/* The scores of one query row over its |lim| allowed keys get the bias, the
 * rest of the |n| the value of a masked key, -inf. */
static INLINE void mask_scores(float *x, int64_t lim, int64_t n, const float *bias) {
  lim = lim < 0 ? 0 : lim;
  for (int64_t j = 0; bias != NULL && j < lim; j++) x[j] += bias[j];
  for (int64_t j = lim; j < n; j++) x[j] = -INFINITY;
}

/* --- forward --------------------------------------------------------------- */

/* The online softmax of one query row over one key block: turns the scores
 * |x| into probabilities relative to the running max |m| and rescales the
 * row's accumulated output |o| and sum |l| to a new max. */
static INLINE void softmax_block(float *x, int64_t n, float *m, float *l, float *o, int64_t E) {
  float mx = row_max(x, n), m_new = mx > *m ? mx : *m;
  if (m_new == -INFINITY) { /* nothing seen yet: keep p = 0 */
    zero(x, n);
    return;
  }
  float alpha = fast_exp(*m - m_new);
  *l = *l * alpha + exp_sum(x, n, m_new);
  *m = m_new;
  if (alpha != 1.0f)
    for (int64_t e = 0; e < E; e++) o[e] *= alpha;
}

/* Two passes over the keys per query row, without scratch. */
static void forward_scalar(const job *J, const float *q, const float *k, const float *v, const float *bias,
                           int64_t i0, int64_t rows, float *out, float *lse) {
  for (int64_t i = 0; i < rows; i++) {
    int64_t n = J->causal ? min64(J->S, i0 + i + 1) : J->S;
    const float *qi = q + i * J->ldd, *bi = bias != NULL ? bias + i * J->S : NULL;
    float *oi = out + i * J->lde, m = -INFINITY, l = 0;
    for (int64_t j = 0; j < n; j++) {
      float x = dot(qi, k + j * J->ldd, J->D) * J->scale + (bi != NULL ? bi[j] : 0.0f);
      m = x > m ? x : m;
    }
    zero(oi, J->E);
    for (int64_t j = 0; m != -INFINITY && j < n; j++) {
      float p = expf(dot(qi, k + j * J->ldd, J->D) * J->scale + (bi != NULL ? bi[j] : 0.0f) - m);
      l += p;
      for (int64_t e = 0; e < J->E; e++) oi[e] += p * v[j * J->lde + e];
    }
    for (int64_t e = 0; l > 0 && e < J->E; e++) oi[e] /= l;
    lse[i] = l > 0 ? m + logf(l) : -INFINITY;
  }
}

/* Task |task|: FWD_ROWS query rows of one (batch, head). */
MULTIVERSION static void forward_task(void *arg, int64_t task) {
  const job *J = arg;
  const int64_t T = J->T, S = J->S, D = J->D, E = J->E, ldd = J->ldd, lde = J->lde, bh = task / J->chunks;
  const int64_t i0 = task % J->chunks * FWD_ROWS, rows = min64(FWD_ROWS, T - i0);
  const float *q = J->q + head_at(J, bh, T, D) + i0 * ldd, *k = J->k + head_at(J, bh, S, D);
  const float *v = J->v + head_at(J, bh, S, E);
  const float *bias = J->bias != NULL ? J->bias + (bh * T + i0) * S : NULL;
  float *out = J->out_w + head_at(J, bh, T, E) + i0 * lde, *lse = J->lse_w + bh * T + i0;
  const int64_t block = key_block(D);
  if (block == 0) {
    forward_scalar(J, q, k, v, bias, i0, rows, out, lse);
    return;
  }
  float kt[TILE_FLOATS], x[GROUP * KEY_BLOCK], m[FWD_ROWS], l[FWD_ROWS];
  zero_rows(out, rows, E, lde);
  for (int64_t i = 0; i < rows; i++) m[i] = -INFINITY, l[i] = 0;
  const int64_t end = J->causal ? min64(S, i0 + rows) : S;
  for (int64_t j0 = 0; j0 < end; j0 += block) {
    const int64_t nb = min64(block, end - j0), ld = padded(nb, block);
    transpose(k + j0 * ldd, nb, D, ldd, J->scale, kt, ld);
    for (int64_t r0 = 0; r0 < rows; r0 += GROUP) {
      const int64_t g = min64(GROUP, rows - r0);
      const int64_t n = J->causal ? min64(nb, i0 + r0 + g - j0) : nb; /* keys the last row sees */
      if (n <= 0) continue;
      const int64_t nc = padded(n, ld);
      for (int64_t r = 0; r < g; r++) zero(x + r * KEY_BLOCK, nc);
      gemm(g, nc, D, q + r0 * ldd, ldd, 1, kt, ld, x, KEY_BLOCK);
      for (int64_t r = 0; r < g; r++) { /* over all nc columns: no scalar tails */
        const int64_t i = r0 + r, lim = J->causal ? min64(n, i0 + i + 1 - j0) : n;
        mask_scores(x + r * KEY_BLOCK, lim, nc, bias != NULL ? bias + i * S + j0 : NULL);
        softmax_block(x + r * KEY_BLOCK, nc, &m[i], &l[i], out + i * lde, E);
      }
      gemm(g, E, n, x, KEY_BLOCK, 1, v + j0 * lde, lde, out + r0 * lde, lde);
    }
  }
  for (int64_t i = 0; i < rows; i++) {
    float *o = out + i * lde, inv = l[i] > 0 ? 1.0f / l[i] : 0.0f;
    for (int64_t e = 0; e < E; e++) o[e] *= inv;
    lse[i] = l[i] > 0 ? m[i] + logf(l[i]) : -INFINITY;
  }
}

/* A job's sizes and layout, from |s|. */
static job job_of(const tpu_attention_shape *s, bool causal, float scale) {
  return (job){.H = s->heads, .T = s->q_len, .S = s->kv_len, .D = s->head_dim, .E = s->v_dim,
               .ldd = s->token_major ? s->heads * s->head_dim : s->head_dim,
               .lde = s->token_major ? s->heads * s->v_dim : s->v_dim, .token_major = s->token_major,
               .causal = causal, .scale = scale};
}

void tpu_attention_forward(const tpu_attention_shape *s, const float *q, const float *k, const float *v,
                           const float *bias, bool causal, float scale, float *out, float *lse,
                           const tpu_parallel *par) {
  job J = job_of(s, causal, scale);
  J.chunks = (s->q_len + FWD_ROWS - 1) / FWD_ROWS;
  J.q = q, J.k = k, J.v = v, J.bias = bias, J.out_w = out, J.lse_w = lse;
  const int64_t n = s->batch * s->heads * J.chunks;
  if (n > 0) tpu_parallel_run(par, n, forward_task, &J);
}

/* --- backward -------------------------------------------------------------- */

/* One (batch, head), one query row at a time, without scratch. */
static void backward_scalar(const job *J, const float *q, const float *k, const float *v, const float *bias,
                            const float *out, const float *lse, const float *dout, float *dq, float *dk,
                            float *dv, float *dbias) {
  const int64_t D = J->D, E = J->E, S = J->S, ldd = J->ldd, lde = J->lde;
  for (int64_t i = 0; i < J->T; i++) {
    const int64_t n = lse[i] == -INFINITY ? 0 : J->causal ? min64(S, i + 1) : S;
    const float *qi = q + i * ldd, *doi = dout + i * lde, delta = dot(doi, out + i * lde, E);
    for (int64_t j = 0; j < n; j++) {
      float x = dot(qi, k + j * ldd, D) * J->scale + (bias != NULL ? bias[i * S + j] : 0.0f);
      float p = expf(x - lse[i]), ds = p * (dot(doi, v + j * lde, E) - delta);
      for (int64_t e = 0; e < E; e++) dv[j * lde + e] += p * doi[e];
      for (int64_t d = 0; d < D; d++) {
        dk[j * ldd + d] += J->scale * ds * qi[d];
        dq[i * ldd + d] += J->scale * ds * k[j * ldd + d];
      }
      if (dbias != NULL) dbias[i * S + j] = ds;
    }
  }
}

/* One query row of a block: p = exp(x - lse) and ds = p * (dp - delta) over
 * the first |w| keys (masked ones have x = -inf), 0 over the rest of |n|. */
static INLINE void grad_row(float *p, float *ds, int64_t w, int64_t n, float lse, float delta) {
  if (lse == -INFINITY) w = 0;
  for (int64_t j = 0; j < w; j++) {
    p[j] = fast_exp(p[j] - lse);
    ds[j] = p[j] * (ds[j] - delta);
  }
  for (int64_t j = w; j < n; j++) p[j] = ds[j] = 0.0f;
}

/* Task |bh|: one (batch, head), which owns its rows of dq, dk, dv and dbias.
 * Key blocks outside, query blocks inside: each block's K and V are
 * transposed once. */
MULTIVERSION static void backward_task(void *arg, int64_t bh) {
  const job *J = arg;
  const int64_t T = J->T, S = J->S, D = J->D, E = J->E, ldd = J->ldd, lde = J->lde;
  const float *q = J->q + head_at(J, bh, T, D), *k = J->k + head_at(J, bh, S, D), *v = J->v + head_at(J, bh, S, E);
  const float *out = J->out + head_at(J, bh, T, E), *lse = J->lse + bh * T, *dout = J->dout + head_at(J, bh, T, E);
  const float *bias = J->bias != NULL ? J->bias + bh * T * S : NULL;
  float *dq = J->dq + head_at(J, bh, T, D), *dk = J->dk + head_at(J, bh, S, D), *dv = J->dv + head_at(J, bh, S, E);
  float *dbias = J->dbias != NULL ? J->dbias + bh * T * S : NULL;
  zero_rows(dq, T, D, ldd);
  zero_rows(dk, S, D, ldd);
  zero_rows(dv, S, E, lde);
  if (dbias != NULL) zero(dbias, T * S);
  const int64_t block = key_block(D + E);
  if (block == 0) {
    backward_scalar(J, q, k, v, bias, out, lse, dout, dq, dk, dv, dbias);
    return;
  }
  float tile[TILE_FLOATS], p[BWD_ROWS * KEY_BLOCK], ds[BWD_ROWS * KEY_BLOCK], delta[BWD_ROWS];
  for (int64_t j0 = 0; j0 < S; j0 += block) {
    const int64_t nb = min64(block, S - j0), ld = padded(nb, block);
    float *kt = tile, *vt = tile + D * ld;
    transpose(k + j0 * ldd, nb, D, ldd, J->scale, kt, ld);
    transpose(v + j0 * lde, nb, E, lde, 1.0f, vt, ld);
    for (int64_t i0 = J->causal ? j0 / BWD_ROWS * BWD_ROWS : 0; i0 < T; i0 += BWD_ROWS) {
      const int64_t rows = min64(BWD_ROWS, T - i0);
      const int64_t n = J->causal ? min64(nb, i0 + rows - j0) : nb;
      if (n <= 0) continue;
      for (int64_t r0 = 0; r0 < rows; r0 += GROUP) {
        const int64_t g = min64(GROUP, rows - r0);
        const int64_t ng = J->causal ? min64(n, i0 + r0 + g - j0) : n;
        if (ng <= 0) continue; /* grad_row zeroes these rows */
        const int64_t nc = padded(ng, ld);
        for (int64_t r = r0; r < r0 + g; r++) {
          zero(p + r * KEY_BLOCK, nc);
          zero(ds + r * KEY_BLOCK, nc);
        }
        gemm(g, nc, D, q + (i0 + r0) * ldd, ldd, 1, kt, ld, p + r0 * KEY_BLOCK, KEY_BLOCK);
        gemm(g, nc, E, dout + (i0 + r0) * lde, lde, 1, vt, ld, ds + r0 * KEY_BLOCK, KEY_BLOCK);
      }
      for (int64_t r = 0; r < rows; r++) {
        const int64_t i = i0 + r, lim = J->causal ? min64(n, i + 1 - j0) : n;
        float *pr = p + r * KEY_BLOCK, *dsr = ds + r * KEY_BLOCK;
        delta[r] = dot(dout + i * lde, out + i * lde, E);
        const int64_t w = lim > 0 ? padded(lim, ld) : 0; /* the gemms computed that much */
        mask_scores(pr, lim, w, bias != NULL ? bias + i * S + j0 : NULL);
        grad_row(pr, dsr, w, n, lse[i], delta[r]);
        if (dbias != NULL && lim > 0) memcpy(dbias + i * S + j0, dsr, (size_t)lim * sizeof *dsr);
      }
      gemm(n, E, rows, p, 1, KEY_BLOCK, dout + i0 * lde, lde, dv + j0 * lde, lde);
      gemm(n, D, rows, ds, 1, KEY_BLOCK, q + i0 * ldd, ldd, dk + j0 * ldd, ldd);
      gemm(rows, D, n, ds, KEY_BLOCK, 1, k + j0 * ldd, ldd, dq + i0 * ldd, ldd);
    }
  }
  for (int64_t i = 0; i < T; i++)
    for (int64_t d = 0; d < D; d++) dq[i * ldd + d] *= J->scale;
  for (int64_t j = 0; j < S; j++)
    for (int64_t d = 0; d < D; d++) dk[j * ldd + d] *= J->scale;
}

void tpu_attention_backward(const tpu_attention_shape *s, const float *q, const float *k, const float *v,
                            const float *bias, const float *out, const float *lse, const float *dout,
                            bool causal, float scale, float *dq, float *dk, float *dv, float *dbias,
                            const tpu_parallel *par) {
  job J = job_of(s, causal, scale);
  J.q = q, J.k = k, J.v = v, J.bias = bias, J.out = out, J.lse = lse, J.dout = dout;
  J.dq = dq, J.dk = dk, J.dv = dv, J.dbias = dbias;
  const int64_t n = s->batch * s->heads;
  if (n > 0) tpu_parallel_run(par, n, backward_task, &J);
}
