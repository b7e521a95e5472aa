/* Float32 and bfloat16 matrix products on the host, BLAS-style: for each
 * block of KC steps of the contraction, the operands are first packed into
 * panels (MR rows of A, NR columns of B, one contiguous stretch per step of
 * k, zero padded at the edges), then an inner kernel accumulates an MR x NR
 * tile of C in registers from one A panel and one B panel. Packing is where the
 * layouts differ, so a transposed operand costs nothing more than a plain
 * one. Tasks first pack all of B's panels; then each computes a tile of C
 * over the whole contraction, packing its own A panels block by block (an A
 * panel stays in L1 while the tile's B panels stream past, and the tile is
 * in cache from one block to the next).
 *
 * The inner kernels are GCC vector code compiled for one ISA each and chosen
 * at run time: AVX-512 (12 x 32, 24 of its 32 registers accumulating) and
 * AVX2 with FMA (6 x 16, 12 of 16). The build adds -O3 and -ffp-contract=fast
 * (ISO C mode forms no fused multiply-adds).
 *
 * Panels are arrays of 32-bit words, one per (line, step) for float32. For
 * bfloat16 a word holds a line's pair of consecutive steps (the odd last step
 * paired with zero), and the AVX-512 BF16 kernel adds both products of a
 * pair into a float32 lane at once (vdpbf16ps): twice the multiply-adds of a
 * float32 FMA, the same tiles, stores and C. */
#include "kernels/matmul.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/multiversion.h"

enum {
  SKINNY_M = 16,         /* at most this many rows of A, */
  SKINNY_MIN_B = 1 << 21, /* and at least this many elements of B: the skinny path (below) */
  SKINNY_COLS = 64,      /* columns of C per skinny task */
  LANES = 16,            /* partial sums of a skinny dot: one AVX-512 vector */
  KC = 256,              /* contraction steps per packed block */
  TILE_A = 4,            /* A panels per tile of C */
  MIN_TILES = 8,         /* tiles of C per product, at least (where the sizes allow) */
  PACK_BYTES = 64 << 20, /* packed B of a group of products, at most (unless one needs more) */
  MAX_MR = 12,           /* the widest kernel's A panel (sizes a tile's stack buffer) */
};

/* A float32 panel is read and written as floats in buffers of words. */
typedef float fword __attribute__((may_alias));

/* |kw| packed words of steps: an MR x NR tile of C from one A and one B panel. */
typedef void micro_fn(int64_t kw, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc, bool add,
                      const float *bias, int64_t rows, int64_t cols);

typedef struct isa {
  const char *name;
  int64_t mr, nr;
  micro_fn *micro;
  micro_fn *micro_bf16; /* NULL: no bfloat16 kernel on this CPU */
} isa;

/* C[rows, cols] (+)= the MR x NR tile |acc| holds, plus |bias| (NULL, or
 * the tile's |cols| entries of a row added to every row); a whole tile is
 * stored with vector moves, an edge tile through a scalar copy. */
#define STORE_TILE(vec, LANES, MR, NV)                                                            \
  if (rows == MR && cols == NV * LANES) {                                                         \
    _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++) {                                       \
      _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) {                                      \
        float *dst = c + i * ldc + j * LANES;                                                     \
        vec v = acc[i][j];                                                                        \
        if (add) {                                                                                \
          vec old;                                                                                \
          memcpy(&old, dst, sizeof old);                                                          \
          v += old;                                                                               \
        }                                                                                         \
        if (bias != NULL) {                                                                       \
          vec row;                                                                                \
          memcpy(&row, bias + j * LANES, sizeof row);                                             \
          v += row;                                                                               \
        }                                                                                         \
        memcpy(dst, &v, sizeof v);                                                                \
      }                                                                                           \
    }                                                                                             \
  } else {                                                                                        \
    float tile[MR][NV * LANES];                                                                   \
    memcpy(tile, acc, sizeof tile);                                                               \
    for (int64_t i = 0; i < rows; i++)                                                            \
      for (int64_t j = 0; j < cols; j++) {                                                        \
        float v = add ? c[i * ldc + j] + tile[i][j] : tile[i][j];                                 \
        c[i * ldc + j] = bias != NULL ? v + bias[j] : v; /* v + 0 would turn -0 into +0 */        \
      }                                                                                           \
  }

/* A float32 inner kernel: |kw| rank-1 updates of an MR x (NV * LANES) tile. */
#define MICRO(name, arch, vec, LANES, MR, NV)                                                   \
  __attribute__((target(arch))) static void name(int64_t kw, const uint32_t *restrict aw,       \
                                                   const uint32_t *restrict bw, float *restrict c, \
                                                   int64_t ldc, bool add, const float *restrict bias,   \
                                                   int64_t rows, int64_t cols) {                        \
    const fword *a = (const fword *)aw, *b = (const fword *)bw;                                   \
    vec acc[MR][NV];                                                                              \
    _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++)                                         \
      _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) acc[i][j] = (vec){0};                  \
    for (int64_t p = 0; p < kw; p++, a += MR, b += NV * LANES) {                                  \
      vec bv[NV];                                                                                 \
      _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) memcpy(&bv[j], b + j * LANES, sizeof bv[j]); \
      _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++) {                                     \
        const float x = a[i];                                                                     \
        const vec ai = SPLAT##LANES(x);                                                           \
        _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) acc[i][j] += ai * bv[j];             \
      }                                                                                           \
    }                                                                                             \
    STORE_TILE(vec, LANES, MR, NV)                                                                \
  }

static _Atomic int g_isa_cap; /* a tpu_matmul_isa_cap */

void tpu_matmul_set_isa_cap(tpu_matmul_isa_cap cap) { atomic_store(&g_isa_cap, (int)cap); }

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#include <immintrin.h>

typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
/* (vec){0} + x would add in scalar first: 0 + x is not x for x = -0. */
#define SPLAT8(x) (v8){x, x, x, x, x, x, x, x}
#define SPLAT16(x) (v16){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}
MICRO(micro_avx512, "avx512f,avx2,fma", v16, 16, 12, 2)
MICRO(micro_avx2, "avx2,fma", v8, 8, 6, 2)

/* The bfloat16 kernel: 12 x 32 like micro_avx512, one vdpbf16ps per row and
 * 16 columns for each word (two steps) of the panels. */
__attribute__((target("avx512f,avx512bf16"))) static void micro_avx512_bf16(
    int64_t kw, const uint32_t *restrict a, const uint32_t *restrict b, float *restrict c, int64_t ldc, bool add,
    const float *restrict bias, int64_t rows, int64_t cols) {
  v16 acc[12][2];
  _Pragma("GCC unroll 16") for (int i = 0; i < 12; i++) acc[i][0] = acc[i][1] = (v16){0};
  for (int64_t p = 0; p < kw; p++, a += 12, b += 32) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 16);
    _Pragma("GCC unroll 16") for (int i = 0; i < 12; i++) {
      const __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[i]);
      acc[i][0] = (v16)_mm512_dpbf16_ps((__m512)acc[i][0], ai, b0);
      acc[i][1] = (v16)_mm512_dpbf16_ps((__m512)acc[i][1], ai, b1);
    }
  }
  STORE_TILE(v16, 16, 12, 2)
}

/* The widest kernel the CPU runs, under the cap (tpu_matmul_set_isa_cap). */
static const isa *isa_of_cpu(void) {
  static const isa avx512_bf16 = {"AVX-512 + BF16", 12, 32, micro_avx512, micro_avx512_bf16},
                   avx512 = {"AVX-512", 12, 32, micro_avx512, NULL}, avx2 = {"AVX2", 6, 16, micro_avx2, NULL};
  const int cap = atomic_load_explicit(&g_isa_cap, memory_order_relaxed);
  const bool no_512 = cap == TPU_MATMUL_ISA_AVX2;
  const bool no_bf16 = no_512 || cap == TPU_MATMUL_ISA_AVX512;
  __builtin_cpu_init();
  if (!no_512 && __builtin_cpu_supports("avx512f"))
    return !no_bf16 && __builtin_cpu_supports("avx512bf16") ? &avx512_bf16 : &avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &avx2;
  return NULL;
}
#else
static const isa *isa_of_cpu(void) { return NULL; }
#endif

bool tpu_matmul_available(void) { return isa_of_cpu() != NULL; }

bool tpu_matmul_bf16_available(void) {
  const isa *K = isa_of_cpu();
  return K != NULL && K->micro_bf16 != NULL;
}

const char *tpu_matmul_isa(void) {
  const isa *K = isa_of_cpu();
  return K != NULL ? K->name : NULL;
}

typedef struct job {
  const isa *K;
  micro_fn *micro;
  tpu_matmul_shape s;
  const char *a, *b; /* element (0, 0) of product 0 */
  const float *bias;
  float *c;
  int64_t a_panels, b_panels; /* ceil(M / MR), ceil(N / NR) */
  int64_t k_blocks;           /* ceil(K / KC) */
  int64_t tile_b, tiles_n;    /* B panels per tile of C, tiles across N */
  int64_t tiles;              /* per product */
  uint32_t *pb; /* B of a group packed: per product words(K) * b_panels * NR words, block p0's from
                   words(p0) * b_panels * NR on */
} job;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Packed words of |steps| steps (KC is even, so a block's words start at
 * words(p0)). */
static int64_t words(const job *J, int64_t steps) { return J->s.bf16 ? (steps + 1) / 2 : steps; }

static size_t elem_size(const job *J) { return J->s.bf16 ? 2 : 4; }

/* Packs |panels| panels: |lines| rows of A or columns of B in all (zeros up
 * to |width| per panel) by |kc| steps of the contraction, panel q's element
 * (line l, step p) at q * width * kc + p * width + l. |src| is element
 * (0, 0); it lies at src[p * ld + l] when |step_major| (A transposed, B as
 * stored), else at src[l * ld + p]. A step-major pack reads each step's
 * lines of every panel at once: the steps lie far apart. */
static void pack(const float *src, int64_t ld, bool step_major, int64_t lines, int64_t width, int64_t panels,
                 int64_t kc, fword *out) {
  for (int64_t q = 0; q < panels && !step_major; q++) {
    const int64_t n = min64(width, lines - q * width);
    fword *o = out + q * width * kc;
    for (int64_t l = 0; l < n; l++)
      for (int64_t p = 0; p < kc; p++) o[p * width + l] = src[(q * width + l) * ld + p];
    for (int64_t l = n; l < width; l++)
      for (int64_t p = 0; p < kc; p++) o[p * width + l] = 0;
  }
  for (int64_t p = 0; p < kc && step_major; p++)
    for (int64_t q = 0; q < panels; q++) {
      const int64_t n = min64(width, lines - q * width);
      fword *o = out + q * width * kc + p * width;
      const float *in = src + p * ld + q * width;
      int64_t l = 0;
      for (; l < n; l++) o[l] = in[l];
      for (; l < width; l++) o[l] = 0;
    }
}

/* pack() for bfloat16: word (line l, step pair p) at q * width * kw + p *
 * width + l holds steps 2p (low half) and 2p + 1 (high; zero past kc). Step
 * major, a word interleaves two rows of |src|; otherwise it is the two
 * adjacent elements of a line. */
static void pack_bf16(const uint16_t *src, int64_t ld, bool step_major, int64_t lines, int64_t width,
                      int64_t panels, int64_t kc, uint32_t *out) {
  const int64_t kw = (kc + 1) / 2;
  for (int64_t q = 0; q < panels; q++) {
    const int64_t n = min64(width, lines - q * width);
    uint32_t *o = out + q * width * kw;
    if (step_major) {
      for (int64_t p = 0; p < kw; p++) {
        const uint16_t *lo = src + 2 * p * ld + q * width, *hi = lo + ld;
        uint32_t *w = o + p * width;
        int64_t l = 0;
        if (2 * p + 1 < kc)
          for (; l < n; l++) w[l] = lo[l] | (uint32_t)hi[l] << 16;
        else
          for (; l < n; l++) w[l] = lo[l];
        for (; l < width; l++) w[l] = 0;
      }
      continue;
    }
    for (int64_t l = 0; l < n; l++) {
      const uint16_t *row = src + (q * width + l) * ld;
      for (int64_t p = 0; p < kc / 2; p++) memcpy(&o[p * width + l], row + 2 * p, sizeof *o);
      if (kc % 2) o[(kw - 1) * width + l] = row[kc - 1];
    }
    for (int64_t l = n; l < width; l++)
      for (int64_t p = 0; p < kw; p++) o[p * width + l] = 0;
  }
}

/* Packs |panels| panels starting at element |at| of |src| (row stride |ld|)
 * in the job's element type. */
static void pack_any(const job *J, const char *src, int64_t at, int64_t ld, bool step_major, int64_t lines,
                     int64_t width, int64_t panels, int64_t kc, uint32_t *out) {
  if (J->s.bf16)
    pack_bf16((const uint16_t *)src + at, ld, step_major, lines, width, panels, kc, out);
  else
    pack((const float *)src + at, ld, step_major, lines, width, panels, kc, (fword *)out);
}

/* Panels [i0, i1) of product |a|'s A, steps [p0, p0 + kc). */
static void pack_a(const job *J, const char *a, int64_t i0, int64_t i1, int64_t p0, int64_t kc, uint32_t *out) {
  const int64_t mr = J->K->mr, M = J->s.m, K = J->s.k, r0 = i0 * mr;
  pack_any(J, a, J->s.lhs_t ? p0 * M + r0 : r0 * K + p0, J->s.lhs_t ? M : K, J->s.lhs_t,
           min64((i1 - i0) * mr, M - r0), mr, i1 - i0, kc, out);
}

/* Packing task: B panel j of block k of product n. */
static void pack_b_task(void *arg, int64_t t) {
  const job *J = arg;
  const int64_t nr = J->K->nr, N = J->s.n, K = J->s.k, j = t % J->b_panels, blk = t / J->b_panels;
  const int64_t n = blk / J->k_blocks, p0 = blk % J->k_blocks * KC, kc = min64(KC, K - p0), q0 = j * nr;
  const char *b = J->b + (size_t)(n * K * N) * elem_size(J);
  pack_any(J, b, J->s.rhs_t ? q0 * K + p0 : p0 * N + q0, J->s.rhs_t ? K : N, !J->s.rhs_t, min64(nr, N - q0), nr, 1,
           kc, J->pb + (n * words(J, K) + words(J, p0)) * J->b_panels * nr + j * nr * words(J, kc));
}

/* Tile task: TILE_A A panels by tile_b B panels of one product's C, over
 * every block of the contraction (the tile stays in cache meanwhile). */
static void tile_task(void *arg, int64_t t) {
  const job *J = arg;
  const int64_t mr = J->K->mr, nr = J->K->nr, M = J->s.m, N = J->s.n, K = J->s.k;
  const int64_t n = t / J->tiles, tt = t % J->tiles;
  const int64_t i0 = tt / J->tiles_n * TILE_A, j0 = tt % J->tiles_n * J->tile_b;
  const int64_t i1 = min64(i0 + TILE_A, J->a_panels), j1 = min64(j0 + J->tile_b, J->b_panels);
  const char *a = J->a + (size_t)(n * M * K) * elem_size(J);
  float *c = J->c + n * M * N;
  uint32_t pa[TILE_A * MAX_MR * KC] __attribute__((aligned(64)));
  for (int64_t p0 = 0; p0 < K; p0 += KC) {
    const int64_t kc = min64(KC, K - p0), kw = words(J, kc);
    const uint32_t *pb = J->pb + (n * words(J, K) + words(J, p0)) * J->b_panels * nr;
    pack_a(J, a, i0, i1, p0, kc, pa);
    for (int64_t i = i0; i < i1; i++)
      for (int64_t j = j0; j < j1; j++)
        J->micro(kw, pa + (i - i0) * mr * kw, pb + j * nr * kw, c + i * mr * N + j * nr, N, p0 > 0,
                 J->bias != NULL && p0 + kc == K ? J->bias + j * nr : NULL, min64(mr, M - i * mr),
                 min64(nr, N - j * nr));
  }
}

/* Skinny products: a few rows of A times a transposed B (F.linear's x W^T
 * at decode sizes, W [N, K]). Packing B would cost about as much as the
 * product, and the tiles would be mostly padding: instead each task takes
 * SKINNY_COLS rows of W (columns of C) where they lie, and every row of A
 * dots four of them at a time, K-contiguous on both sides, in LANES partial
 * sums that GCC vectorizes (W's rows stay in cache across A's rows). It wins
 * where B is large (16 x 768 by 16384: 3x; by 4096: 1.3x), and loses to the
 * packed path below 2M elements of B (by 1280: 0.8x), where that stays. */
typedef struct skinny_job {
  int64_t m, n, k;
  const float *a, *w, *bias;
  float *c;
  int64_t tasks_per_product;
} skinny_job;

static INLINE float hsum(const float *v) {
  float s = 0;
  for (int l = 0; l < LANES; l++) s += v[l];
  return s;
}

MULTIVERSION static void skinny_task(void *arg, int64_t t) {
  const skinny_job *J = arg;
  const int64_t M = J->m, N = J->n, K = J->k, p = t / J->tasks_per_product;
  const int64_t j0 = t % J->tasks_per_product * SKINNY_COLS, j1 = min64(j0 + SKINNY_COLS, N);
  const float *a = J->a + p * M * K, *w = J->w + p * N * K;
  float *c = J->c + p * M * N;
  for (int64_t i = 0; i < M; i++) {
    const float *x = a + i * K;
    int64_t j = j0;
    for (; j + 4 <= j1; j += 4) {
      float acc[4][LANES] = {{0}}, tail[4] = {0};
      const float *w0 = w + j * K;
      int64_t q = 0;
      for (; q + LANES <= K; q += LANES)
        for (int r = 0; r < 4; r++)
          for (int l = 0; l < LANES; l++) acc[r][l] += x[q + l] * w0[r * K + q + l];
      for (; q < K; q++)
        for (int r = 0; r < 4; r++) tail[r] += x[q] * w0[r * K + q];
      for (int r = 0; r < 4; r++) {
        const float v = hsum(acc[r]) + tail[r];
        c[i * N + j + r] = J->bias != NULL ? v + J->bias[j + r] : v;
      }
    }
    for (; j < j1; j++) {
      float acc[LANES] = {0}, tail = 0;
      const float *w0 = w + j * K;
      int64_t q = 0;
      for (; q + LANES <= K; q += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += x[q + l] * w0[q + l];
      for (; q < K; q++) tail += x[q] * w0[q];
      const float v = hsum(acc) + tail;
      c[i * N + j] = J->bias != NULL ? v + J->bias[j] : v;
    }
  }
}

bool tpu_matmul(const tpu_matmul_shape *s, const void *a, const void *b, const float *bias, float *c,
                const tpu_parallel *par) {
  const isa *K = isa_of_cpu();
  if (K == NULL || (s->bf16 && K->micro_bf16 == NULL)) return false;
  const int64_t M = s->m, N = s->n;
  if (M <= 0 || N <= 0 || s->batch <= 0) return true;
  if (s->k <= 0) { /* a sum of nothing, plus the bias */
    for (int64_t r = 0; r < s->batch * M; r++)
      if (bias != NULL)
        memcpy(c + r * N, bias, (size_t)N * sizeof *c);
      else
        memset(c + r * N, 0, (size_t)N * sizeof *c);
    return true;
  }
  if (!s->bf16 && !s->lhs_t && s->rhs_t && M <= SKINNY_M && N * s->k >= SKINNY_MIN_B) {
    skinny_job S = {.m = M, .n = N, .k = s->k, .a = a, .w = b, .bias = bias, .c = c,
                    .tasks_per_product = (N + SKINNY_COLS - 1) / SKINNY_COLS};
    tpu_parallel_run(par, s->batch * S.tasks_per_product, skinny_task, &S);
    return true;
  }
  job J = {.K = K, .micro = s->bf16 ? K->micro_bf16 : K->micro, .s = *s, .bias = bias,
           .a_panels = (M + K->mr - 1) / K->mr, .b_panels = (N + K->nr - 1) / K->nr,
           .k_blocks = (s->k + KC - 1) / KC};
  /* Products go in groups whose packed B fits PACK_BYTES (one at least). */
  const int64_t item_bytes = words(&J, s->k) * J.b_panels * K->nr * (int64_t)sizeof(uint32_t);
  const int64_t group = item_bytes >= PACK_BYTES ? 1 : min64(s->batch, PACK_BYTES / item_bytes);
  const int64_t a_tiles = (J.a_panels + TILE_A - 1) / TILE_A;
  /* Tiles span N unless that leaves too few to share out; then N is split
   * as little as it takes (each tile packs its A panels again). */
  const int64_t splits = (MIN_TILES + a_tiles * group - 1) / (a_tiles * group);
  J.tile_b = (J.b_panels + splits - 1) / splits;
  J.tiles_n = (J.b_panels + J.tile_b - 1) / J.tile_b;
  J.tiles = a_tiles * J.tiles_n;
  const size_t bytes = (size_t)(group * item_bytes);
  J.pb = aligned_alloc(64, (bytes + 63) / 64 * 64); /* a size aligned_alloc accepts */
  if (J.pb == NULL) return false;
  for (int64_t n0 = 0; n0 < s->batch; n0 += group) {
    J.s.batch = min64(group, s->batch - n0);
    J.a = (const char *)a + (size_t)(n0 * M * s->k) * elem_size(&J);
    J.b = (const char *)b + (size_t)(n0 * s->k * N) * elem_size(&J);
    J.c = c + n0 * M * N;
    tpu_parallel_run(par, J.s.batch * J.k_blocks * J.b_panels, pack_b_task, &J);
    tpu_parallel_run(par, J.s.batch * J.tiles, tile_task, &J);
  }
  free(J.pb);
  return true;
}
