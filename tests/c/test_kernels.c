/* The hand-written kernels through the real CPU plugin: chosen by name,
 * registered with its FFI extension, called from a program as custom calls
 * (on XLA's thread pool), compared with a reference computed here; a call
 * with operands the handler refuses fails the execution with a status. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "runtime/runtime.h"

static tpu_runtime *rt;

enum { B = 2, H = 3, T = 9, S = 7, D = 5, E = 4 };

/* (out [B,H,T,E], lse [B,H,T]) = torchtpu_attention_fwd(q, k, v), causal. */
static const char kForward[] =
    "module @m {\n"
    "  func.func public @main(%q: tensor<2x3x9x5xf32>, %k: tensor<2x3x7x5xf32>, %v: tensor<2x3x7x4xf32>)\n"
    "      -> (tensor<2x3x9x4xf32>, tensor<2x3x9xf32>) {\n"
    "    %o:2 = \"stablehlo.custom_call\"(%q, %k, %v) {call_target_name = \"torchtpu_attention_fwd\",\n"
    "        api_version = 4 : i32, backend_config = {bias_grad = 0 : i32, causal = 1 : i32,\n"
    "        has_bias = 0 : i32, scale = 5.0e-01 : f32}}\n"
    "        : (tensor<2x3x9x5xf32>, tensor<2x3x7x5xf32>, tensor<2x3x7x4xf32>)\n"
    "        -> (tensor<2x3x9x4xf32>, tensor<2x3x9xf32>)\n"
    "    \"func.return\"(%o#0, %o#1) : (tensor<2x3x9x4xf32>, tensor<2x3x9xf32>) -> ()\n"
    "  }\n"
    "}\n";

static void reference(const float *q, const float *k, const float *v, double *out, double *lse) {
  for (int bh = 0; bh < B * H; bh++)
    for (int i = 0; i < T; i++) {
      double s[S], m = -INFINITY, l = 0;
      for (int j = 0; j < S; j++) {
        s[j] = -INFINITY;
        if (j > i) continue;
        double dot = 0;
        for (int d = 0; d < D; d++) dot += (double)q[(bh * T + i) * D + d] * k[(bh * S + j) * D + d];
        s[j] = 0.5 * dot;
        m = s[j] > m ? s[j] : m;
      }
      for (int j = 0; j < S; j++) l += j <= i ? exp(s[j] - m) : 0;
      lse[bh * T + i] = m + log(l);
      for (int e = 0; e < E; e++) {
        double acc = 0;
        for (int j = 0; j <= i && j < S; j++) acc += exp(s[j] - m) / l * v[(bh * S + j) * E + e];
        out[(bh * T + i) * E + e] = acc;
      }
    }
}

/* TORCHTPU_KERNELS settings: all, none, lists of names; an unknown name is
 * refused. */
static void test_kernel_selection(void) {
  unsigned bits = 7;
  CHECK(tpu_kernels_select("1", &bits) &&
        bits == (TPU_KERNEL_ATTENTION | TPU_KERNEL_PAGED_ATTENTION | TPU_KERNEL_MATMUL));
  CHECK(tpu_kernels_select("off", &bits) && bits == 0);
  CHECK(tpu_kernels_select("matmul", &bits) && bits == TPU_KERNEL_MATMUL);
  CHECK(tpu_kernels_select("Attention,matmul", &bits) && bits == (TPU_KERNEL_ATTENTION | TPU_KERNEL_MATMUL));
  CHECK(tpu_kernels_select("paged_attention", &bits) && bits == TPU_KERNEL_PAGED_ATTENTION);
  CHECK(!tpu_kernels_select("attention,mat", &bits) && bits == 0);
  CHECK(!tpu_kernels_select("gemm", &bits) && bits == 0);
}

/* Registering matmul also says whether it takes bfloat16 here; the
 * boundary is registered whatever is asked for. */
static void test_registration(void) {
  const unsigned matmul = (tpu_matmul_available() ? TPU_KERNEL_MATMUL : 0) |
                          (tpu_matmul_bf16_available() ? TPU_KERNEL_MATMUL_BF16 : 0);
  CHECK(tpu_kernels_register(rt, TPU_KERNEL_ATTENTION | TPU_KERNEL_PAGED_ATTENTION | TPU_KERNEL_MATMUL) ==
        (TPU_KERNEL_ATTENTION | TPU_KERNEL_PAGED_ATTENTION | matmul | TPU_KERNEL_BOUNDARY));
}

/* The boundary is the identity: the value it is given, whose buffer is
 * another result too (XLA then copies it, the handler sees two buffers) or
 * only its own (aliased), of floats and of booleans. */
static void test_boundary_custom_call(void) {
  static const char program[] =
      "module @m {\n"
      "  func.func public @main(%x: tensor<3x5xf32>, %p: tensor<7xi1>) -> (tensor<3x5xf32>, tensor<3x5xf32>, tensor<7xi1>) {\n"
      "    %y = \"stablehlo.multiply\"(%x, %x) : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>\n"
      "    %b = \"stablehlo.custom_call\"(%y) {call_target_name = \"torchtpu_boundary\", api_version = 4 : i32,\n"
      "        output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [],\n"
      "        operand_index = 0, operand_tuple_indices = []>]} : (tensor<3x5xf32>) -> tensor<3x5xf32>\n"
      "    %z = \"stablehlo.add\"(%b, %x) : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>\n"
      "    %q = \"stablehlo.custom_call\"(%p) {call_target_name = \"torchtpu_boundary\", api_version = 4 : i32}\n"
      "        : (tensor<7xi1>) -> tensor<7xi1>\n"
      "    \"func.return\"(%z, %y, %q) : (tensor<3x5xf32>, tensor<3x5xf32>, tensor<7xi1>) -> ()\n"
      "  }\n"
      "}\n";
  tpu_executable *exe = NULL;
  CHECK_OK(tpu_executable_compile(rt, program, strlen(program), NULL, &exe));
  float x[15], z[15], y[15];
  bool p[7] = {1, 0, 0, 1, 1, 0, 1}, q[7] = {0};
  for (int i = 0; i < 15; i++) x[i] = 0.25f * (float)i - 1.0f;
  int64_t xd[2] = {3, 5}, pd[1] = {7};
  tpu_buffer *in[2] = {NULL}, *res[3] = {NULL};
  CHECK_OK(tpu_buffer_from_host(rt, 0, x, TPU_F32, xd, 2, &in[0]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, p, TPU_BOOL, pd, 1, &in[1]));
  CHECK_OK(tpu_executable_execute(rt, exe, 0, in, 2, NULL, true, res));
  CHECK_OK(tpu_buffer_to_host(rt, res[0], z, sizeof z));
  CHECK_OK(tpu_buffer_to_host(rt, res[1], y, sizeof y));
  CHECK_OK(tpu_buffer_to_host(rt, res[2], q, sizeof q));
  for (int i = 0; i < 15; i++) CHECK(y[i] == x[i] * x[i] && z[i] == x[i] * x[i] + x[i]);
  CHECK(memcmp(p, q, sizeof p) == 0);
  for (int i = 0; i < 2; i++) tpu_buffer_destroy(rt, in[i]);
  for (int i = 0; i < 3; i++) tpu_buffer_destroy(rt, res[i]);
  tpu_executable_destroy(rt, exe);
}

/* What `python -m torchtpu info` prints: names, the matmul kernel's ISA. */
static void test_description(void) {
  char buf[64], want[64];
  tpu_kernels_describe(0, buf, sizeof buf);
  CHECK(strcmp(buf, "") == 0);
  tpu_kernels_describe(TPU_KERNEL_ATTENTION, buf, sizeof buf);
  CHECK(strcmp(buf, "attention") == 0);
  if (tpu_matmul_available()) {
    snprintf(want, sizeof want, "attention, matmul (%s)", tpu_matmul_isa());
    tpu_kernels_describe(TPU_KERNEL_ATTENTION | TPU_KERNEL_MATMUL, buf, sizeof buf);
    CHECK(strcmp(buf, want) == 0);
  }
  tpu_kernels_describe(TPU_KERNEL_ATTENTION, buf, 4); /* cut short, still a string */
  CHECK(strcmp(buf, "att") == 0);
}

static void test_attention_forward_custom_call(void) {
  static float q[B * H * T * D], k[B * H * S * D], v[B * H * S * E], out[B * H * T * E], lse[B * H * T];
  static double rout[B * H * T * E], rlse[B * H * T];
  for (int i = 0; i < B * H * T * D; i++) q[i] = sinf(0.37f * (float)i);
  for (int i = 0; i < B * H * S * D; i++) k[i] = cosf(0.11f * (float)i);
  for (int i = 0; i < B * H * S * E; i++) v[i] = sinf(0.05f * (float)i + 1.0f);
  reference(q, k, v, rout, rlse);

  tpu_executable *exe = NULL;
  CHECK_OK(tpu_executable_compile(rt, kForward, strlen(kForward), NULL, &exe));
  int64_t qd[4] = {B, H, T, D}, kd[4] = {B, H, S, D}, vd[4] = {B, H, S, E};
  tpu_buffer *in[3] = {NULL}, *res[2] = {NULL};
  CHECK_OK(tpu_buffer_from_host(rt, 0, q, TPU_F32, qd, 4, &in[0]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, k, TPU_F32, kd, 4, &in[1]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, v, TPU_F32, vd, 4, &in[2]));
  CHECK_OK(tpu_executable_execute(rt, exe, 0, in, 3, NULL, true, res));
  CHECK_OK(tpu_buffer_to_host(rt, res[0], out, sizeof out));
  CHECK_OK(tpu_buffer_to_host(rt, res[1], lse, sizeof lse));
  double worst = 0;
  for (int i = 0; i < B * H * T * E; i++) worst = fmax(worst, fabs(out[i] - rout[i]));
  for (int i = 0; i < B * H * T; i++) worst = fmax(worst, fabs(lse[i] - rlse[i]));
  CHECK(worst < 1e-5);
  for (int i = 0; i < 3; i++) tpu_buffer_destroy(rt, in[i]);
  for (int i = 0; i < 2; i++) tpu_buffer_destroy(rt, res[i]);
  tpu_executable_destroy(rt, exe);
}

/* The handler checks its operands: a rank-3 query is refused with a status
 * the execution returns, and the process goes on. */
static void test_refused_operands_are_a_status(void) {
  static const char bad[] =
      "module @m {\n"
      "  func.func public @main(%q: tensor<3x9x5xf32>) -> (tensor<3x9x5xf32>, tensor<3x9xf32>) {\n"
      "    %o:2 = \"stablehlo.custom_call\"(%q, %q, %q) {call_target_name = \"torchtpu_attention_fwd\",\n"
      "        api_version = 4 : i32, backend_config = {causal = 0 : i32, has_bias = 0 : i32,\n"
      "        scale = 1.0 : f32}} : (tensor<3x9x5xf32>, tensor<3x9x5xf32>, tensor<3x9x5xf32>)\n"
      "        -> (tensor<3x9x5xf32>, tensor<3x9xf32>)\n"
      "    \"func.return\"(%o#0, %o#1) : (tensor<3x9x5xf32>, tensor<3x9xf32>) -> ()\n"
      "  }\n"
      "}\n";
  tpu_executable *exe = NULL;
  CHECK_OK(tpu_executable_compile(rt, bad, strlen(bad), NULL, &exe));
  static float q[3 * 9 * 5], out[3 * 9 * 5];
  int64_t qd[3] = {3, 9, 5};
  tpu_buffer *in = NULL, *res[2] = {NULL};
  CHECK_OK(tpu_buffer_from_host(rt, 0, q, TPU_F32, qd, 3, &in));
  tpu_status_t st = tpu_executable_execute(rt, exe, 0, &in, 1, NULL, true, res);
  if (st == NULL) st = tpu_buffer_to_host(rt, res[0], out, sizeof out);
  CHECK(st != NULL && strstr(tpu_status_message(st), "bad operands") != NULL);
  tpu_status_free(st);
  tpu_buffer_destroy(rt, in);
  for (int i = 0; i < 2; i++) tpu_buffer_destroy(rt, res[i]);
  tpu_executable_destroy(rt, exe);
}

/* c [2, 5, 3] = a^T b^T of a [2, 4, 5] and b [2, 3, 4]: the batched,
 * doubly transposed form, whose operands the kernel reads as they lie. */
static void test_matmul_custom_call(void) {
  if (!tpu_matmul_available()) return;
  static const char program[] =
      "module @m {\n"
      "  func.func public @main(%a: tensor<2x4x5xf32>, %b: tensor<2x3x4xf32>) -> tensor<2x5x3xf32> {\n"
      "    %c = \"stablehlo.custom_call\"(%a, %b) {call_target_name = \"torchtpu_matmul\",\n"
      "        api_version = 4 : i32, backend_config = {lhs_t = 1 : i32, rhs_t = 1 : i32}}\n"
      "        : (tensor<2x4x5xf32>, tensor<2x3x4xf32>) -> tensor<2x5x3xf32>\n"
      "    \"func.return\"(%c) : (tensor<2x5x3xf32>) -> ()\n"
      "  }\n"
      "}\n";
  float a[2 * 4 * 5], b[2 * 3 * 4], c[2 * 5 * 3];
  for (int i = 0; i < 40; i++) a[i] = sinf(0.3f * (float)i);
  for (int i = 0; i < 24; i++) b[i] = cosf(0.7f * (float)i);
  tpu_executable *exe = NULL;
  CHECK_OK(tpu_executable_compile(rt, program, strlen(program), NULL, &exe));
  int64_t ad[3] = {2, 4, 5}, bd[3] = {2, 3, 4};
  tpu_buffer *in[2] = {NULL}, *res = NULL;
  CHECK_OK(tpu_buffer_from_host(rt, 0, a, TPU_F32, ad, 3, &in[0]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, b, TPU_F32, bd, 3, &in[1]));
  CHECK_OK(tpu_executable_execute(rt, exe, 0, in, 2, NULL, true, &res));
  CHECK_OK(tpu_buffer_to_host(rt, res, c, sizeof c));
  double worst = 0;
  for (int n = 0; n < 2; n++)
    for (int i = 0; i < 5; i++)
      for (int j = 0; j < 3; j++) {
        double r = 0;
        for (int p = 0; p < 4; p++) r += (double)a[(n * 4 + p) * 5 + i] * b[(n * 3 + j) * 4 + p];
        worst = fmax(worst, fabs(c[(n * 5 + i) * 3 + j] - r));
      }
  CHECK(worst < 1e-5);
  for (int i = 0; i < 2; i++) tpu_buffer_destroy(rt, in[i]);
  tpu_buffer_destroy(rt, res);
  tpu_executable_destroy(rt, exe);
}

/* torchtpu_grouped_matmul: groups of rows (a [7, 4], b [3, 5, 4] transposed,
 * offsets 2, 2, 9 over 7 rows: an empty group, a group clamped at the end)
 * and groups of the contraction (a [7, 3] transposed, b [7, 5], offsets
 * 3, 6, 6: an empty group, a step past the last offset), against sums here;
 * what no group owns is zero. */
static void test_grouped_matmul_custom_call(void) {
  if (!tpu_matmul_available()) return;
  static const char program[] =
      "module @m {\n"
      "  func.func public @main(%a: tensor<7x4xf32>, %b: tensor<3x5x4xf32>, %o: tensor<3xi32>,\n"
      "      %x: tensor<7x3xf32>, %y: tensor<7x5xf32>, %p: tensor<3xi32>) -> (tensor<7x5xf32>, tensor<3x3x5xf32>) {\n"
      "    %c = \"stablehlo.custom_call\"(%a, %b, %o) {call_target_name = \"torchtpu_grouped_matmul\",\n"
      "        api_version = 4 : i32, backend_config = {rhs_t = 1 : i32, rows = 1 : i32}}\n"
      "        : (tensor<7x4xf32>, tensor<3x5x4xf32>, tensor<3xi32>) -> tensor<7x5xf32>\n"
      "    %d = \"stablehlo.custom_call\"(%x, %y, %p) {call_target_name = \"torchtpu_grouped_matmul\",\n"
      "        api_version = 4 : i32, backend_config = {rhs_t = 0 : i32, rows = 0 : i32}}\n"
      "        : (tensor<7x3xf32>, tensor<7x5xf32>, tensor<3xi32>) -> tensor<3x3x5xf32>\n"
      "    \"func.return\"(%c, %d) : (tensor<7x5xf32>, tensor<3x3x5xf32>) -> ()\n"
      "  }\n"
      "}\n";
  float a[7 * 4], b[3 * 5 * 4], x[7 * 3], y[7 * 5], c[7 * 5], d[3 * 3 * 5];
  const int32_t o[3] = {2, 2, 9}, p[3] = {3, 6, 6};
  for (int i = 0; i < 28; i++) a[i] = sinf(0.3f * (float)i);
  for (int i = 0; i < 60; i++) b[i] = cosf(0.7f * (float)i);
  for (int i = 0; i < 21; i++) x[i] = sinf(0.9f * (float)i + 0.5f);
  for (int i = 0; i < 35; i++) y[i] = cosf(0.2f * (float)i);
  tpu_executable *exe = NULL;
  CHECK_OK(tpu_executable_compile(rt, program, strlen(program), NULL, &exe));
  int64_t ad[2] = {7, 4}, bd[3] = {3, 5, 4}, od[1] = {3}, xd[2] = {7, 3}, yd[2] = {7, 5};
  tpu_buffer *in[6] = {NULL}, *res[2] = {NULL};
  CHECK_OK(tpu_buffer_from_host(rt, 0, a, TPU_F32, ad, 2, &in[0]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, b, TPU_F32, bd, 3, &in[1]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, o, TPU_S32, od, 1, &in[2]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, x, TPU_F32, xd, 2, &in[3]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, y, TPU_F32, yd, 2, &in[4]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, p, TPU_S32, od, 1, &in[5]));
  CHECK_OK(tpu_executable_execute(rt, exe, 0, in, 6, NULL, true, res));
  CHECK_OK(tpu_buffer_to_host(rt, res[0], c, sizeof c));
  CHECK_OK(tpu_buffer_to_host(rt, res[1], d, sizeof d));
  double worst = 0;
  for (int i = 0; i < 7; i++) { /* row i: group 0 (rows 0, 1) or 2 (rows 2..6) */
    const int g = i < 2 ? 0 : 2;
    for (int j = 0; j < 5; j++) {
      double r = 0;
      for (int k = 0; k < 4; k++) r += (double)a[i * 4 + k] * b[(g * 5 + j) * 4 + k];
      worst = fmax(worst, fabs(c[i * 5 + j] - r));
    }
  }
  for (int g = 0; g < 3; g++) /* steps 0..2, 3..5, none; step 6 in no group */
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 5; j++) {
        double r = 0;
        for (int k = g == 0 ? 0 : 3; g < 2 && k < (g == 0 ? 3 : 6); k++) r += (double)x[k * 3 + i] * y[k * 5 + j];
        worst = fmax(worst, fabs(d[(g * 3 + i) * 5 + j] - r));
      }
  CHECK(worst < 1e-5);
  for (int i = 0; i < 6; i++) tpu_buffer_destroy(rt, in[i]);
  for (int i = 0; i < 2; i++) tpu_buffer_destroy(rt, res[i]);
  tpu_executable_destroy(rt, exe);
}

/* Paged attention with the cache write: a decode (two cached tokens and
 * one new) and a prefill of two tokens, two query heads over one key head,
 * blocks of two; the written cache (aliased to the operand) and the output
 * against a reference computed here. */
static void test_paged_attention_custom_call(void) {
  enum { PT = 3, PH = 2, PD = 2, PN = 4, PBS = 2 };
  static const char program[] =
      "module @m {\n"
      "  func.func public @main(%q: tensor<3x2x2xf32>, %c: tensor<4x1x2x4xf32>, %t: tensor<2x2xi32>,\n"
      "      %l: tensor<2xi32>, %s: tensor<3xi32>, %k: tensor<3x1x2xf32>, %v: tensor<3x1x2xf32>, %m: tensor<3xi32>)\n"
      "      -> (tensor<3x2x2xf32>, tensor<4x1x2x4xf32>) {\n"
      "    %o:2 = \"stablehlo.custom_call\"(%q, %c, %t, %l, %s, %k, %v, %m) {\n"
      "        call_target_name = \"torchtpu_paged_attention\", api_version = 4 : i32,\n"
      "        backend_config = {has_alibi = 0 : i32, has_write = 1 : i32, scale = 5.0e-01 : f32,\n"
      "        soft_cap = 0.0e+00 : f32, window = 0 : i32},\n"
      "        output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [1],\n"
      "        operand_index = 1, operand_tuple_indices = []>]}\n"
      "        : (tensor<3x2x2xf32>, tensor<4x1x2x4xf32>, tensor<2x2xi32>, tensor<2xi32>, tensor<3xi32>,\n"
      "           tensor<3x1x2xf32>, tensor<3x1x2xf32>, tensor<3xi32>)\n"
      "        -> (tensor<3x2x2xf32>, tensor<4x1x2x4xf32>)\n"
      "    \"func.return\"(%o#0, %o#1) : (tensor<3x2x2xf32>, tensor<4x1x2x4xf32>) -> ()\n"
      "  }\n"
      "}\n";
  float q[PT * PH * PD], cache[PN * PBS * 2 * PD], key[PT * PD], value[PT * PD], out[PT * PH * PD];
  float written[PN * PBS * 2 * PD], want[PN * PBS * 2 * PD];
  int32_t table[4] = {1, 2, 3, 0}, lens[2] = {3, 2}, starts[3] = {0, 1, 3}, slots[PT] = {4, 6, 7};
  for (int i = 0; i < PT * PH * PD; i++) q[i] = sinf(0.7f * (float)i);
  for (int i = 0; i < PN * PBS * 2 * PD; i++) cache[i] = cosf(0.3f * (float)i);
  for (int i = 0; i < PT * PD; i++) key[i] = sinf(1.1f * (float)i + 0.5f), value[i] = cosf(0.9f * (float)i);
  memcpy(want, cache, sizeof cache);
  for (int t = 0; t < PT; t++)
    for (int d = 0; d < PD; d++) {
      want[slots[t] * 2 * PD + d] = key[t * PD + d];
      want[slots[t] * 2 * PD + PD + d] = value[t * PD + d];
    }
  tpu_executable *exe = NULL;
  CHECK_OK(tpu_executable_compile(rt, program, strlen(program), NULL, &exe));
  int64_t qd[3] = {PT, PH, PD}, cd[4] = {PN, 1, PBS, 2 * PD}, td[2] = {2, 2}, ld[1] = {2}, sd[1] = {3};
  int64_t kd[3] = {PT, 1, PD}, md[1] = {PT};
  tpu_buffer *in[8] = {NULL}, *res[2] = {NULL};
  CHECK_OK(tpu_buffer_from_host(rt, 0, q, TPU_F32, qd, 3, &in[0]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, cache, TPU_F32, cd, 4, &in[1]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, table, TPU_S32, td, 2, &in[2]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, lens, TPU_S32, ld, 1, &in[3]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, starts, TPU_S32, sd, 1, &in[4]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, key, TPU_F32, kd, 3, &in[5]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, value, TPU_F32, kd, 3, &in[6]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, slots, TPU_S32, md, 1, &in[7]));
  CHECK_OK(tpu_executable_execute(rt, exe, 0, in, 8, NULL, true, res));
  CHECK_OK(tpu_buffer_to_host(rt, res[0], out, sizeof out));
  CHECK_OK(tpu_buffer_to_host(rt, res[1], written, sizeof written));
  CHECK(memcmp(written, want, sizeof want) == 0);
  for (int t = 0; t < PT; t++) {
    const int r = t < starts[1] ? 0 : 1, pos = lens[r] - (starts[r + 1] - t);
    for (int h = 0; h < PH; h++) {
      double s[4], m = -INFINITY, l = 0, o[PD] = {0};
      for (int j = 0; j <= pos; j++) {
        const float *row = want + (table[r * 2 + j / PBS] * PBS + j % PBS) * 2 * PD;
        s[j] = 0;
        for (int d = 0; d < PD; d++) s[j] += 0.5 * q[(t * PH + h) * PD + d] * row[d];
        m = s[j] > m ? s[j] : m;
      }
      for (int j = 0; j <= pos; j++) {
        const float *row = want + (table[r * 2 + j / PBS] * PBS + j % PBS) * 2 * PD;
        l += exp(s[j] - m);
        for (int d = 0; d < PD; d++) o[d] += exp(s[j] - m) * row[PD + d];
      }
      for (int d = 0; d < PD; d++) CHECK(fabs(out[(t * PH + h) * PD + d] - o[d] / l) < 1e-5);
    }
  }
  for (int i = 0; i < 8; i++) tpu_buffer_destroy(rt, in[i]);
  for (int i = 0; i < 2; i++) tpu_buffer_destroy(rt, res[i]);
  tpu_executable_destroy(rt, exe);
}

int main(void) {
  rt = test_runtime_create();
  if (rt == NULL) return 1;
  RUN(test_kernel_selection);
  RUN(test_registration);
  RUN(test_description);
  RUN(test_attention_forward_custom_call);
  RUN(test_matmul_custom_call);
  RUN(test_grouped_matmul_custom_call);
  RUN(test_paged_attention_custom_call);
  RUN(test_refused_operands_are_a_status);
  RUN(test_boundary_custom_call);
  tpu_runtime_destroy(rt);
  return check_failures ? 1 : 0;
}
