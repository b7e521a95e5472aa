/* Float32 matrix products on the host, BLAS-style: for each block of KC
 * steps of the contraction, the operands are first packed into panels (MR
 * rows of A, NR columns of B, one contiguous stretch per step of k, zero
 * padded at the edges), then an inner kernel accumulates an MR x NR tile of C
 * in registers from one A panel and one B panel. Packing is where the
 * layouts differ, so a transposed operand costs nothing more than a plain
 * one. Tasks first pack all of B's panels; then each computes a tile of C
 * over the whole contraction, packing its own A panels block by block (an A
 * panel stays in L1 while the tile's B panels stream past, and the tile is
 * in cache from one block to the next).
 *
 * The inner kernels are GCC vector code compiled for one ISA each and chosen
 * at run time: AVX-512 (12 x 32, 24 of its 32 registers accumulating) and
 * AVX2 with FMA (6 x 16, 12 of 16). The build adds -O3 and -ffp-contract=fast
 * (ISO C mode forms no fused multiply-adds). */
#include "kernels/matmul.h"

#include <stdlib.h>
#include <string.h>

enum {
  KC = 256,              /* contraction steps per packed block */
  TILE_A = 4,            /* A panels per tile of C */
  MIN_TILES = 8,         /* tiles of C per product, at least (where the sizes allow) */
  PACK_BYTES = 64 << 20, /* packed B of a group of products, at most (unless one needs more) */
  MAX_MR = 12,           /* the widest kernel's A panel (sizes a tile's stack buffer) */
};

typedef void micro_fn(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, bool add,
                      const float *bias, int64_t rows, int64_t cols);

typedef struct isa {
  const char *name;
  int64_t mr, nr;
  micro_fn *micro;
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

/* An inner kernel: |kc| rank-1 updates of an MR x (NV * LANES) tile. */
#define MICRO(name, arch, vec, LANES, MR, NV)                                                   \
  __attribute__((target(arch))) static void name(int64_t kc, const float *restrict a,          \
                                                   const float *restrict b, float *restrict c,    \
                                                   int64_t ldc, bool add, const float *restrict bias,   \
                                                   int64_t rows, int64_t cols) {                        \
    vec acc[MR][NV];                                                                              \
    _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++)                                         \
      _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) acc[i][j] = (vec){0};                  \
    for (int64_t p = 0; p < kc; p++, a += MR, b += NV * LANES) {                                  \
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

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
/* (vec){0} + x would add in scalar first: 0 + x is not x for x = -0. */
#define SPLAT8(x) (v8){x, x, x, x, x, x, x, x}
#define SPLAT16(x) (v16){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}
MICRO(micro_avx512, "avx512f,avx2,fma", v16, 16, 12, 2)
MICRO(micro_avx2, "avx2,fma", v8, 8, 6, 2)

/* The widest kernel the CPU runs; TORCHTPU_MATMUL_ISA=avx2 caps it (as
 * oneDNN's ONEDNN_MAX_CPU_ISA does), for tests and A/B runs of the AVX2
 * kernel on AVX-512 machines. */
static const isa *isa_of_cpu(void) {
  static const isa avx512 = {"AVX-512", 12, 32, micro_avx512}, avx2 = {"AVX2", 6, 16, micro_avx2};
  const char *cap = getenv("TORCHTPU_MATMUL_ISA");
  __builtin_cpu_init();
  if ((cap == NULL || strcmp(cap, "avx2") != 0) && __builtin_cpu_supports("avx512f")) return &avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &avx2;
  return NULL;
}
#else
static const isa *isa_of_cpu(void) { return NULL; }
#endif

bool tpu_matmul_available(void) { return isa_of_cpu() != NULL; }

const char *tpu_matmul_isa(void) {
  const isa *K = isa_of_cpu();
  return K != NULL ? K->name : NULL;
}

typedef struct job {
  const isa *K;
  tpu_matmul_shape s;
  const float *a, *b, *bias;
  float *c;
  int64_t a_panels, b_panels; /* ceil(M / MR), ceil(N / NR) */
  int64_t k_blocks;           /* ceil(K / KC) */
  int64_t tile_b, tiles_n;    /* B panels per tile of C, tiles across N */
  int64_t tiles;              /* per product */
  float *pb; /* B of a group packed: per product K * b_panels * NR floats, block p0 from p0 * b_panels * NR on */
} job;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Packs |panels| panels: |lines| rows of A or columns of B in all (zeros up
 * to |width| per panel) by |kc| steps of the contraction, panel q's element
 * (line l, step p) at q * width * kc + p * width + l. |src| is element
 * (0, 0); it lies at src[p * ld + l] when |step_major| (A transposed, B as
 * stored), else at src[l * ld + p]. A step-major pack reads each step's
 * lines of every panel at once: the steps lie far apart. */
static void pack(const float *src, int64_t ld, bool step_major, int64_t lines, int64_t width, int64_t panels,
                 int64_t kc, float *out) {
  for (int64_t q = 0; q < panels && !step_major; q++) {
    const int64_t n = min64(width, lines - q * width);
    float *o = out + q * width * kc;
    for (int64_t l = 0; l < n; l++)
      for (int64_t p = 0; p < kc; p++) o[p * width + l] = src[(q * width + l) * ld + p];
    for (int64_t l = n; l < width; l++)
      for (int64_t p = 0; p < kc; p++) o[p * width + l] = 0;
  }
  for (int64_t p = 0; p < kc && step_major; p++)
    for (int64_t q = 0; q < panels; q++) {
      const int64_t n = min64(width, lines - q * width);
      float *o = out + q * width * kc + p * width;
      const float *in = src + p * ld + q * width;
      int64_t l = 0;
      for (; l < n; l++) o[l] = in[l];
      for (; l < width; l++) o[l] = 0;
    }
}

/* Panels [i0, i1) of product |a|'s A, steps [p0, p0 + kc). */
static void pack_a(const job *J, const float *a, int64_t i0, int64_t i1, int64_t p0, int64_t kc, float *out) {
  const int64_t mr = J->K->mr, M = J->s.m, K = J->s.k, r0 = i0 * mr;
  pack(a + (J->s.lhs_t ? p0 * M + r0 : r0 * K + p0), J->s.lhs_t ? M : K, J->s.lhs_t, min64((i1 - i0) * mr, M - r0),
       mr, i1 - i0, kc, out);
}

/* Packing task: B panel j of block k of product n. */
static void pack_b_task(void *arg, int64_t t) {
  const job *J = arg;
  const int64_t nr = J->K->nr, N = J->s.n, K = J->s.k, j = t % J->b_panels, blk = t / J->b_panels;
  const int64_t n = blk / J->k_blocks, p0 = blk % J->k_blocks * KC, kc = min64(KC, K - p0), q0 = j * nr;
  const float *b = J->b + n * K * N;
  pack(b + (J->s.rhs_t ? q0 * K + p0 : p0 * N + q0), J->s.rhs_t ? K : N, !J->s.rhs_t, min64(nr, N - q0), nr, 1, kc,
       J->pb + (n * K + p0) * J->b_panels * nr + j * nr * kc);
}

/* Tile task: TILE_A A panels by tile_b B panels of one product's C, over
 * every block of the contraction (the tile stays in cache meanwhile). */
static void tile_task(void *arg, int64_t t) {
  const job *J = arg;
  const int64_t mr = J->K->mr, nr = J->K->nr, M = J->s.m, N = J->s.n, K = J->s.k;
  const int64_t n = t / J->tiles, tt = t % J->tiles;
  const int64_t i0 = tt / J->tiles_n * TILE_A, j0 = tt % J->tiles_n * J->tile_b;
  const int64_t i1 = min64(i0 + TILE_A, J->a_panels), j1 = min64(j0 + J->tile_b, J->b_panels);
  const float *a = J->a + n * M * K;
  float *c = J->c + n * M * N;
  float pa[TILE_A * MAX_MR * KC] __attribute__((aligned(64)));
  for (int64_t p0 = 0; p0 < K; p0 += KC) {
    const int64_t kc = min64(KC, K - p0);
    const float *pb = J->pb + (n * K + p0) * J->b_panels * nr;
    pack_a(J, a, i0, i1, p0, kc, pa);
    for (int64_t i = i0; i < i1; i++)
      for (int64_t j = j0; j < j1; j++)
        J->K->micro(kc, pa + (i - i0) * mr * kc, pb + j * nr * kc, c + i * mr * N + j * nr, N, p0 > 0,
                    J->bias != NULL && p0 + kc == K ? J->bias + j * nr : NULL, min64(mr, M - i * mr),
                    min64(nr, N - j * nr));
  }
}

bool tpu_matmul(const tpu_matmul_shape *s, const float *a, const float *b, const float *bias, float *c,
                const tpu_parallel *par) {
  const isa *K = isa_of_cpu();
  if (K == NULL) return false;
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
  job J = {.K = K, .s = *s, .bias = bias, .a_panels = (M + K->mr - 1) / K->mr, .b_panels = (N + K->nr - 1) / K->nr,
           .k_blocks = (s->k + KC - 1) / KC};
  /* Products go in groups whose packed B fits PACK_BYTES (one at least). */
  const int64_t item_bytes = s->k * J.b_panels * K->nr * (int64_t)sizeof(float);
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
    J.a = a + n0 * M * s->k, J.b = b + n0 * s->k * N, J.c = c + n0 * M * N;
    tpu_parallel_run(par, J.s.batch * J.k_blocks * J.b_panels, pack_b_task, &J);
    tpu_parallel_run(par, J.s.batch * J.tiles, tile_task, &J);
  }
  free(J.pb);
  return true;
}
