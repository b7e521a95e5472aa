/* Matrix product kernel tests: every operand layout against a double
 * reference written here, over sizes that miss the kernel's tiles and
 * blocks (edges, one row, K past one block), with a bias and without,
 * batched (in groups too), K = 0, serially and through a tpu_parallel that
 * runs its tasks in reverse (the result must not depend on the order, to
 * the bit), with each inner kernel the CPU has (the AVX2 cap that
 * TORCHTPU_MATMUL_ISA=avx2 sets runs the narrower one). Needs no plugin; on
 * a CPU without an inner kernel the kernel must say so and write nothing. */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "kernels/matmul.h"

static uint64_t rng = 0x2545f4914f6cdd1du;

static float uniform(void) { /* in [-1, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)(rng >> 40) / (float)(1 << 23) - 1.0f;
}

/* |x| cut to a bfloat16 (its upper 16 bits), and those bits. */
static uint16_t bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (uint16_t)(u >> 16);
}

static float bf16_value(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* Operand values, as float and, for a bfloat16 product, as its bits: the
 * floats are then bfloat16 values too, so the double reference is exact. */
static void fill(float *x, uint16_t *bits, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    x[i] = uniform();
    if (bits != NULL) x[i] = bf16_value(bits[i] = bf16_bits(x[i]));
  }
}

static void reverse_run(void *ctx, int64_t n, void (*task)(void *arg, int64_t i), void *arg) {
  (void)ctx;
  for (int64_t i = n - 1; i >= 0; i--) task(arg, i);
}

static const tpu_parallel reverse = {reverse_run, NULL};

/* A(r, p) and B(p, q) of product |n| in their stored layouts. */
static float a_at(const tpu_matmul_shape *s, const float *a, int64_t n, int64_t r, int64_t p) {
  return a[n * s->m * s->k + (s->lhs_t ? p * s->m + r : r * s->k + p)];
}

static float b_at(const tpu_matmul_shape *s, const float *b, int64_t n, int64_t p, int64_t q) {
  return b[n * s->k * s->n + (s->rhs_t ? q * s->k + p : p * s->n + q)];
}

/* Runs |s| (with a bias when |with_bias|) serially and with the tasks
 * reversed; checks that both give the same bits and every element is the
 * double product within a few float32 roundings of the sum of |terms|. */
static void check_product(const tpu_matmul_shape *s, bool with_bias) {
  const int64_t na = s->batch * s->m * s->k, nb = s->batch * s->k * s->n, nc = s->batch * s->m * s->n;
  float *a = malloc((size_t)(na + 1) * sizeof *a), *b = malloc((size_t)(nb + 1) * sizeof *b);
  float *c = malloc((size_t)(nc + 1) * sizeof *c), *c2 = malloc((size_t)(nc + 1) * sizeof *c2);
  uint16_t *a16 = s->bf16 ? malloc((size_t)(na + 1) * sizeof *a16) : NULL;
  uint16_t *b16 = s->bf16 ? malloc((size_t)(nb + 1) * sizeof *b16) : NULL;
  fill(a, a16, na);
  fill(b, b16, nb);
  float *bias = with_bias ? malloc((size_t)s->n * sizeof *bias) : NULL;
  for (int64_t i = 0; with_bias && i < s->n; i++) bias[i] = uniform();
  for (int64_t i = 0; i < nc; i++) c[i] = NAN; /* every element must be written */
  const void *ka = s->bf16 ? (const void *)a16 : a, *kb = s->bf16 ? (const void *)b16 : b;
  CHECK(tpu_matmul(s, ka, kb, bias, c, NULL));
  CHECK(tpu_matmul(s, ka, kb, bias, c2, &reverse));
  CHECK(memcmp(c, c2, (size_t)nc * sizeof *c) == 0);
  int bad = 0;
  for (int64_t n = 0; n < s->batch; n++)
    for (int64_t r = 0; r < s->m; r++)
      for (int64_t q = 0; q < s->n; q++) {
        double sum = bias != NULL ? bias[q] : 0, mag = fabs(sum);
        for (int64_t p = 0; p < s->k; p++) {
          const double t = (double)a_at(s, a, n, r, p) * b_at(s, b, n, p, q);
          sum += t, mag += fabs(t);
        }
        const float got = c[(n * s->m + r) * s->n + q];
        if (!(fabs(got - sum) <= 8 * FLT_EPSILON * mag + 1e-30)) bad++;
      }
  if (bad)
    fprintf(stderr, "  %d wrong of batch %ld, %ld x %ld x %ld, lhs_t %d, rhs_t %d, bias %d, bf16 %d\n", bad,
            (long)s->batch, (long)s->m, (long)s->k, (long)s->n, s->lhs_t, s->rhs_t, with_bias, s->bf16);
  CHECK(bad == 0);
  free(a), free(b), free(c), free(c2), free(bias), free(a16), free(b16);
}

static bool g_bf16; /* the layout tests' operands are bfloat16 */

static void test_every_layout_and_edge(void) {
  static const int64_t sizes[][4] = {/* batch, M, K, N */
                                     {1, 1, 1, 1},     {1, 12, 256, 32}, {1, 13, 257, 33}, {1, 7, 600, 5},
                                     {1, 100, 70, 3},  {1, 3, 70, 100},  {1, 97, 31, 130}, {3, 25, 40, 17},
                                     {1, 300, 520, 64}};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    for (int layout = 0; layout < 8; layout++) {
      tpu_matmul_shape s = {.batch = sizes[i][0], .m = sizes[i][1], .k = sizes[i][2], .n = sizes[i][3],
                            .lhs_t = layout & 1, .rhs_t = layout & 2, .bf16 = g_bf16};
      check_product(&s, layout & 4);
    }
}

/* Products whose packed B passes 64 MiB together run in groups. */
static void test_large_batches_run_in_groups(void) {
  for (int layout = 0; layout < 4; layout += 3) {
    tpu_matmul_shape s = {.batch = 3, .m = 3, .k = 1100, .n = 8000, .lhs_t = layout & 1, .rhs_t = layout & 2,
                          .bf16 = g_bf16};
    check_product(&s, layout == 3);
  }
}

/* A few rows of A times a large transposed B (F.linear at decode sizes)
 * take the skinny path: odd K and N (tails of the dots and of the groups of
 * four columns), one product and two, with and without a bias; M = 17 is
 * the packed path's again. */
static void test_skinny_products(void) {
  static const int64_t sizes[][4] = {/* batch, M, K, N */
                                     {1, 1, 1000, 2101}, {1, 5, 768, 4099}, {2, 16, 1001, 2103}, {1, 17, 768, 2800}};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    for (int bias = 0; bias < 2; bias++) {
      tpu_matmul_shape s = {.batch = sizes[i][0], .m = sizes[i][1], .k = sizes[i][2], .n = sizes[i][3],
                            .rhs_t = true};
      check_product(&s, bias);
    }
}

/* K = 0 is a sum of nothing: zeros (or the bias), whatever C held. */
static void test_empty_contraction(void) {
  tpu_matmul_shape s = {.batch = 2, .m = 5, .n = 7, .k = 0};
  float c[70], a[1] = {0}, b[1] = {0}, bias[7] = {1, -2, 3, -4, 5, -6, 7};
  for (int i = 0; i < 70; i++) c[i] = NAN;
  CHECK(tpu_matmul(&s, a, b, NULL, c, NULL));
  int right = 0;
  for (int i = 0; i < 70; i++) right += c[i] == 0.0f;
  CHECK(right == 70);
  CHECK(tpu_matmul(&s, a, b, bias, c, NULL));
  right = 0;
  for (int i = 0; i < 70; i++) right += c[i] == bias[i % 7];
  CHECK(right == 70);
  s.m = 0; /* nothing to write at all */
  CHECK(tpu_matmul(&s, a, b, NULL, NULL, NULL));
}

int main(void) {
  if (!tpu_matmul_available()) { /* the kernel refuses and leaves C alone */
    tpu_matmul_shape s = {.batch = 1, .m = 1, .n = 1, .k = 1};
    float a = 1, b = 2, c = 5;
    CHECK(!tpu_matmul(&s, &a, &b, NULL, &c, NULL) && c == 5);
    fprintf(stderr, "no inner kernel for this CPU: only the refusal is tested\n");
    return check_failures ? 1 : 0;
  }
  RUN(test_every_layout_and_edge);
  RUN(test_empty_contraction);
  RUN(test_large_batches_run_in_groups);
  RUN(test_skinny_products);
  if (tpu_matmul_bf16_available()) { /* the bfloat16 kernel, on the same sizes (odd K included) */
    g_bf16 = true;
    RUN(test_every_layout_and_edge);
    RUN(test_large_batches_run_in_groups);
    g_bf16 = false;
  } else {
    fprintf(stderr, "no bfloat16 inner kernel for this CPU: its products are refused\n");
  }
  { /* capped below AVX-512 BF16, a bfloat16 product is refused and C left alone */
    tpu_matmul_set_isa_cap(TPU_MATMUL_ISA_AVX512);
    tpu_matmul_shape s = {.batch = 1, .m = 1, .n = 1, .k = 1, .bf16 = true};
    uint16_t a = 0x3f80, b = 0x4000;
    float c = 5;
    CHECK(!tpu_matmul_bf16_available() && !tpu_matmul(&s, &a, &b, NULL, &c, NULL) && c == 5);
    tpu_matmul_set_isa_cap(TPU_MATMUL_ISA_ANY);
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    tpu_matmul_set_isa_cap(TPU_MATMUL_ISA_AVX2);
    RUN(test_every_layout_and_edge);
    tpu_matmul_set_isa_cap(TPU_MATMUL_ISA_ANY);
  }
  return check_failures ? 1 : 0;
}
