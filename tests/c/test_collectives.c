/* XLA's own collectives through the runtime: one CPU client with four
 * devices runs a program of four replicas (replica r on device r), each
 * collective a StableHLO op with replica groups. This is the transport
 * tpu_dist would use where a plugin runs collectives across processes (CUDA:
 * NCCL inside the plugin; TPU: ICI); the CPU plugin runs them only between
 * the devices of one client. Checked: all_reduce over all replicas and over
 * two groups, all_gather, reduce_scatter, and a replica count the client
 * cannot place refused as a status. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "runtime/runtime.h"

#define REPLICAS 4

static tpu_runtime *rt;

static tpu_status_t compile_replicated(const char *text, tpu_executable **out) {
  tpu_compile_options o;
  tpu_compile_options_init(&o);
  o.num_replicas = REPLICAS;
  o.name = "collective";
  return tpu_executable_compile(rt, text, strlen(text), &o, out);
}

/* Runs |exe| with replica r's argument holding |n| floats r * 10 + i and
 * reads each replica's single output (|out_n| floats) into |out[r]|. */
static void run(tpu_executable *exe, int64_t n, int64_t out_n, float out[REPLICAS][16]) {
  tpu_buffer *in[REPLICAS] = {NULL}, *res[REPLICAS] = {NULL};
  tpu_buffer *const *args[REPLICAS];
  tpu_buffer **outs[REPLICAS];
  for (int r = 0; r < REPLICAS; r++) {
    float host[16];
    for (int64_t i = 0; i < n; i++) host[i] = (float)(r * 10 + i);
    CHECK_OK(tpu_buffer_from_host(rt, r, host, TPU_F32, &n, 1, &in[r]));
    args[r] = &in[r];
    outs[r] = &res[r];
  }
  CHECK(tpu_executable_num_outputs(exe) == 1);
  CHECK_OK(tpu_executable_execute_replicas(rt, exe, REPLICAS, args, 1, outs));
  for (int r = 0; r < REPLICAS; r++) {
    CHECK(res[r] != NULL);
    if (res[r] != NULL) CHECK_OK(tpu_buffer_to_host(rt, res[r], out[r], (size_t)out_n * sizeof(float)));
    tpu_buffer_destroy(rt, res[r]);
    tpu_buffer_destroy(rt, in[r]);
  }
}

static const char kAllReduce[] =
    "module @m attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : i32} {\n"
    "  func.func public @main(%x: tensor<3xf32>) -> (tensor<3xf32>) {\n"
    "    %r = \"stablehlo.all_reduce\"(%x) ({\n"
    "    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
    "      %s = \"stablehlo.add\"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>\n"
    "      \"stablehlo.return\"(%s) : (tensor<f32>) -> ()\n"
    "    }) {replica_groups = dense<GROUPS> : tensor<GTYPE>} : (tensor<3xf32>) -> tensor<3xf32>\n"
    "    \"func.return\"(%r) : (tensor<3xf32>) -> ()\n"
    "  }\n"
    "}\n";

/* kAllReduce with its replica groups (MLIR's %-names rule out printf). */
static void all_reduce_text(char *out, size_t cap, const char *groups, const char *type) {
  size_t n = 0;
  for (const char *c = kAllReduce; *c && n + 32 < cap; c++) {
    const char *put = NULL;
    if (strncmp(c, "GROUPS", 6) == 0) put = groups, c += 5;
    else if (strncmp(c, "GTYPE", 5) == 0) put = type, c += 4;
    if (put == NULL) out[n++] = *c;
    else n += (size_t)snprintf(out + n, cap - n, "%s", put);
  }
  out[n] = '\0';
}

static void test_all_reduce(void) {
  char text[2048];
  /* All four replicas: each element i sums (0 + 10 + 20 + 30) + 4 i. */
  all_reduce_text(text, sizeof text, "[[0, 1, 2, 3]]", "1x4xi64");
  tpu_executable *exe = NULL;
  CHECK_OK(compile_replicated(text, &exe));
  float out[REPLICAS][16];
  run(exe, 3, 3, out);
  for (int r = 0; r < REPLICAS; r++)
    for (int i = 0; i < 3; i++) CHECK(out[r][i] == 60.0f + 4.0f * (float)i);
  tpu_executable_destroy(rt, exe);

  /* Two groups, {0, 2} and {1, 3}. */
  all_reduce_text(text, sizeof text, "[[0, 2], [1, 3]]", "2x2xi64");
  CHECK_OK(compile_replicated(text, &exe));
  run(exe, 3, 3, out);
  for (int i = 0; i < 3; i++) {
    CHECK(out[0][i] == 20.0f + 2.0f * (float)i && out[2][i] == out[0][i]);
    CHECK(out[1][i] == 40.0f + 2.0f * (float)i && out[3][i] == out[1][i]);
  }
  tpu_executable_destroy(rt, exe);
}

static void test_all_gather_and_reduce_scatter(void) {
  static const char kGather[] =
      "module @m attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : i32} {\n"
      "  func.func public @main(%x: tensor<2xf32>) -> (tensor<8xf32>) {\n"
      "    %r = \"stablehlo.all_gather\"(%x) {all_gather_dim = 0 : i64, "
      "replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<2xf32>) -> tensor<8xf32>\n"
      "    \"func.return\"(%r) : (tensor<8xf32>) -> ()\n"
      "  }\n"
      "}\n";
  tpu_executable *exe = NULL;
  CHECK_OK(compile_replicated(kGather, &exe));
  float out[REPLICAS][16];
  run(exe, 2, 8, out);
  for (int r = 0; r < REPLICAS; r++)
    for (int q = 0; q < REPLICAS; q++)
      for (int i = 0; i < 2; i++) CHECK(out[r][q * 2 + i] == (float)(q * 10 + i));
  tpu_executable_destroy(rt, exe);

  static const char kScatter[] =
      "module @m attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : i32} {\n"
      "  func.func public @main(%x: tensor<8xf32>) -> (tensor<2xf32>) {\n"
      "    %r = \"stablehlo.reduce_scatter\"(%x) ({\n"
      "    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
      "      %s = \"stablehlo.add\"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>\n"
      "      \"stablehlo.return\"(%s) : (tensor<f32>) -> ()\n"
      "    }) {scatter_dimension = 0 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} "
      ": (tensor<8xf32>) -> tensor<2xf32>\n"
      "    \"func.return\"(%r) : (tensor<2xf32>) -> ()\n"
      "  }\n"
      "}\n";
  CHECK_OK(compile_replicated(kScatter, &exe));
  run(exe, 8, 2, out);
  /* Replica r gets elements 2r, 2r + 1 summed over replicas: 60 + 4 i. */
  for (int r = 0; r < REPLICAS; r++)
    for (int i = 0; i < 2; i++) CHECK(out[r][i] == 60.0f + 4.0f * (float)(2 * r + i));
  tpu_executable_destroy(rt, exe);
}

static void test_too_many_replicas(void) {
  char text[2048];
  all_reduce_text(text, sizeof text, "[[0, 1, 2, 3]]", "1x4xi64");
  tpu_executable *exe = NULL;
  CHECK_OK(compile_replicated(text, &exe));
  tpu_buffer **outs[8] = {NULL};
  tpu_status_t st = tpu_executable_execute_replicas(rt, exe, 8, NULL, 1, outs);
  CHECK(st != NULL && tpu_status_code(st) == TPU_ERR_VALUE);
  CHECK(st != NULL && strstr(tpu_status_message(st), "8 replicas, but the client has 4 devices") != NULL);
  tpu_status_free(st);
  tpu_executable_destroy(rt, exe);
}

int main(void) {
  tpu_runtime_options o;
  tpu_runtime_options_init(&o);
  o.plugin_path = test_plugin_path();
  o.platform = "cpu";
  o.cpu_device_count = REPLICAS;
  tpu_status_t st = tpu_runtime_create(&o, &rt);
  if (st != NULL) {
    fprintf(stderr, "cannot create the runtime: %s\n", tpu_status_message(st));
    tpu_status_free(st);
    return 1;
  }
  CHECK(tpu_runtime_device_count(rt) == REPLICAS);
  RUN(test_all_reduce);
  RUN(test_all_gather_and_reduce_scatter);
  RUN(test_too_many_replicas);
  tpu_runtime_destroy(rt);
  return check_failures ? 1 : 0;
}
