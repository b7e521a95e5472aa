/* Paged attention on the host, as plain C loops shaped for GCC's
 * auto-vectorizer. A task takes a few tokens and one key head; for each
 * token it walks the keys its request's block table names, up to 64 at a
 * time, with an online softmax, and the query heads of the key head's group
 * share every key and value row it reads (grouped-query attention reads the
 * cache once per group, not once per head). Nothing is gathered or padded:
 * a decode reads its request's keys where they lie, which is what the
 * composite (gather into a padded batch, then dense attention) cannot do.
 * Sums run in LANES partial sums, so that nothing needs a vectorized float
 * reduction (GCC does those only under -ffast-math). */
#include "kernels/paged_attention.h"

#include <math.h>
#include <string.h>

#include "kernels/multiversion.h"

enum {
  KEYS = 64,      /* keys per step of the online softmax */
  HEADS = 8,      /* query heads of a group handled together */
  TOKENS = 8,     /* tokens per task */
  LANES = 16,     /* partial sums: one AVX-512 vector */
};

typedef struct job {
  const tpu_paged_shape *s;
  const tpu_paged_params *p;
  const float *q;
  const void *cache;
  const int32_t *table, *seq_lens, *starts;
  float *out;
  int64_t chunks; /* tasks per key head */
} job;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static INLINE float dot(const float *a, const float *b, int64_t n) {
  float lane[LANES] = {0}, sum = 0;
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) lane[l] += a[i + l] * b[i + l];
  for (; i < n; i++) sum += a[i] * b[i];
  for (int l = 0; l < LANES; l++) sum += lane[l];
  return sum;
}

/* A cache row (|n| floats or bfloat16s) as floats: |buf| filled for
 * bfloat16, the row itself for float32. */
static INLINE const float *row_f32(const void *row, bool bf16, int64_t n, float *buf) {
  if (!bf16) return row;
  const uint16_t *h = row;
  for (int64_t i = 0; i < n; i++) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)h[i] << 16};
    buf[i] = v.f;
  }
  return buf;
}

/* The request token |t| belongs to (R when none): the last r with
 * starts[r] <= t, for starts[r + 1] > t. */
static int64_t request_of(const int32_t *starts, int64_t requests, int64_t t) {
  int64_t lo = 0, hi = requests; /* answer in [lo, hi] */
  if (requests == 0 || t >= starts[requests] || t < starts[0]) return requests;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (starts[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* One token's |g| query heads (h0 ..) over keys [lo, hi] of request |r|. */
MULTIVERSION static void attend(const job *J, int64_t t, int64_t r, int64_t pos, int64_t lo, int64_t hi,
                                int64_t kh, int64_t h0, int64_t g) {
  const tpu_paged_shape *s = J->s;
  const tpu_paged_params *p = J->p;
  const int64_t D = s->head_dim, BS = s->block_size;
  const size_t esize = s->bf16_cache ? 2 : 4;
  const char *cache = J->cache;
  const int32_t *blocks = J->table + r * s->width;
  float o[HEADS][TPU_PAGED_MAX_HEAD_DIM], x[HEADS][KEYS], m[HEADS], l[HEADS], buf[TPU_PAGED_MAX_HEAD_DIM];
  const float *q[HEADS];
  for (int64_t i = 0; i < g; i++) {
    q[i] = J->q + (t * s->heads + h0 + i) * D;
    memset(o[i], 0, (size_t)D * sizeof(float));
    m[i] = -INFINITY, l[i] = 0;
  }
  const char *rows[KEYS];
  for (int64_t j0 = lo; j0 <= hi; j0 += KEYS) {
    const int64_t n = min64(KEYS, hi + 1 - j0);
    for (int64_t jj = 0; jj < n; jj++) {
      const int64_t j = j0 + jj;
      int64_t b = blocks[j / BS];
      b = b < 0 ? 0 : b >= s->blocks ? s->blocks - 1 : b;
      rows[jj] = cache + (size_t)(((b * s->kv_heads + kh) * BS + j % BS) * 2 * D) * esize;
      const float *k = row_f32(rows[jj], s->bf16_cache, D, buf);
      for (int64_t i = 0; i < g; i++) x[i][jj] = dot(q[i], k, D) * p->scale;
    }
    for (int64_t i = 0; i < g; i++) {
      float *xi = x[i], mx = m[i];
      for (int64_t jj = 0; jj < n; jj++) {
        if (p->soft_cap > 0) xi[jj] = p->soft_cap * tanhf(xi[jj] / p->soft_cap);
        if (p->alibi != NULL) xi[jj] += p->alibi[h0 + i] * (float)(j0 + jj - pos);
        mx = xi[jj] > mx ? xi[jj] : mx;
      }
      const float alpha = expf(m[i] - mx); /* m[i] -inf: 0, o and l are 0 anyway */
      float sum = 0;
      for (int64_t jj = 0; jj < n; jj++) sum += xi[jj] = expf(xi[jj] - mx);
      l[i] = l[i] * alpha + sum;
      m[i] = mx;
      if (alpha != 1.0f)
        for (int64_t d = 0; d < D; d++) o[i][d] *= alpha;
    }
    for (int64_t jj = 0; jj < n; jj++) {
      const float *v = row_f32(rows[jj] + (size_t)D * esize, s->bf16_cache, D, buf);
      for (int64_t i = 0; i < g; i++) {
        const float w = x[i][jj];
        float *oi = o[i];
        for (int64_t d = 0; d < D; d++) oi[d] += w * v[d];
      }
    }
  }
  for (int64_t i = 0; i < g; i++) {
    float *dst = J->out + (t * s->heads + h0 + i) * D;
    const float inv = l[i] > 0 ? 1.0f / l[i] : 0.0f;
    for (int64_t d = 0; d < D; d++) dst[d] = o[i][d] * inv;
  }
}

/* Task |task|: TOKENS tokens, one key head. */
static void task_run(void *arg, int64_t task) {
  const job *J = arg;
  const tpu_paged_shape *s = J->s;
  const int64_t kh = task / J->chunks, t0 = task % J->chunks * TOKENS, group = s->heads / s->kv_heads;
  const int64_t D = s->head_dim, keys = s->width * s->block_size;
  for (int64_t t = t0; t < min64(t0 + TOKENS, s->tokens); t++) {
    const int64_t r = request_of(J->starts, s->requests, t);
    int64_t pos = -1, lo = 0, hi = -1;
    if (r < s->requests) {
      pos = (int64_t)J->seq_lens[r] - (J->starts[r + 1] - t);
      hi = min64(pos, keys - 1);
      lo = J->p->window > 0 ? max64(0, pos - J->p->window + 1) : 0;
    }
    for (int64_t h0 = 0; h0 < group; h0 += HEADS) {
      const int64_t g = min64(HEADS, group - h0);
      if (lo <= hi) {
        attend(J, t, r, pos, lo, hi, kh, kh * group + h0, g);
      } else {
        memset(J->out + (t * s->heads + kh * group + h0) * D, 0, (size_t)(g * D) * sizeof(float));
      }
    }
  }
}

void tpu_paged_cache_write(const tpu_paged_shape *s, const void *key, const void *value, const int32_t *slots,
                           int64_t num_slots, void *cache) {
  const size_t esize = s->bf16_cache ? 2 : 4, row = (size_t)s->head_dim * esize;
  for (int64_t t = 0; t < num_slots; t++) {
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= s->blocks * s->block_size) continue;
    for (int64_t h = 0; h < s->kv_heads; h++) {
      char *dst = (char *)cache + (size_t)((slot / s->block_size * s->kv_heads + h) * s->block_size +
                                           slot % s->block_size) * 2 * row;
      memcpy(dst, (const char *)key + (size_t)(t * s->kv_heads + h) * row, row);
      memcpy(dst + row, (const char *)value + (size_t)(t * s->kv_heads + h) * row, row);
    }
  }
}

bool tpu_paged_attention(const tpu_paged_shape *s, const tpu_paged_params *p, const float *query,
                         const void *cache, const int32_t *block_table, const int32_t *seq_lens,
                         const int32_t *query_start_loc, float *out, const tpu_parallel *par) {
  if (s->head_dim > TPU_PAGED_MAX_HEAD_DIM || s->kv_heads < 1 || s->heads % s->kv_heads != 0 || s->block_size < 1 ||
      (s->blocks < 1 && s->tokens > 0 && s->requests > 0))
    return false;
  job J = {.s = s, .p = p, .q = query, .cache = cache, .table = block_table, .seq_lens = seq_lens,
           .starts = query_start_loc, .out = out, .chunks = (s->tokens + TOKENS - 1) / TOKENS};
  if (s->requests == 0 || s->width == 0) { /* no request, or none with a key: every row is zeros */
    memset(out, 0, (size_t)(s->tokens * s->heads * s->head_dim) * sizeof(float));
    return true;
  }
  const int64_t n = J.chunks * s->kv_heads;
  if (n > 0) tpu_parallel_run(par, n, task_run, &J);
  return true;
}
