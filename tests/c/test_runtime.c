/* Runtime tests on the real PJRT plugin: loading (and failing to), buffers
 * (zero-size too), compile errors as statuses, execution, donation, async
 * synchronization, serialization. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/stats.h"
#include "check.h"
#include "runtime/runtime.h"

static tpu_runtime *rt;

static const char kDouble[] =
    "module @m {\n"
    "  func.func public @main(%a: tensor<4xf32>) -> (tensor<4xf32>) {\n"
    "    %r = \"stablehlo.add\"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
    "    \"func.return\"(%r) : (tensor<4xf32>) -> ()\n"
    "  }\n"
    "}\n";

static void test_bad_plugin_path(void) {
  tpu_runtime_options o;
  tpu_runtime_options_init(&o);
  o.plugin_path = "/nonexistent/libplugin.so";
  tpu_runtime *r = NULL;
  tpu_status_t st = tpu_runtime_create(&o, &r);
  CHECK(st != NULL);
  CHECK(r == NULL);
  CHECK(tpu_status_code(st) == TPU_ERR_NOT_FOUND);
  CHECK(strstr(tpu_status_message(st), "/nonexistent/libplugin.so") != NULL);
  tpu_status_free(st);

  /* A shared object that is not a plugin. */
  o.plugin_path = "libm.so.6";
  st = tpu_runtime_create(&o, &r);
  CHECK(st != NULL);
  CHECK(strstr(tpu_status_message(st), "GetPjrtApi") != NULL);
  tpu_status_free(st);

  tpu_runtime_options_init(&o);
  st = tpu_runtime_create(&o, &r);
  CHECK(tpu_status_code(st) == TPU_ERR_VALUE);
  tpu_status_free(st);
}

static void test_client(void) {
  CHECK(tpu_runtime_device_count(rt) == 1);
  CHECK(strcmp(tpu_runtime_platform_name(rt), "cpu") == 0);
  int major = -1, minor = -1;
  tpu_runtime_api_version(rt, &major, &minor);
  CHECK(major == 0 && minor >= 81);
  /* The CPU plugin compiles with XLA option overrides (YNNPACK fusions). */
  size_t size = 0;
  const char *options = tpu_runtime_compile_options(rt, &size);
  CHECK(size > 8 && memmem(options, size, "xla_cpu_experimental_ynn_fusion_type", 36) != NULL);
  /* The CPU plugin keeps no allocator statistics: its device memory is the
   * host's, free within total; a bad device index is an error. */
  int64_t free_bytes = -7, total = -7;
  CHECK_OK(tpu_runtime_memory_info(rt, 0, &free_bytes, &total));
  CHECK(total > 0 && free_bytes > 0 && free_bytes <= total);
  tpu_status_t st = tpu_runtime_memory_info(rt, 5, &free_bytes, &total);
  CHECK(st != NULL && tpu_status_code(st) == TPU_ERR_RUNTIME);
  tpu_status_free(st);
}

static void test_roundtrip_and_zero_size(void) {
  float x[4] = {1.5f, -2.0f, 0.0f, 1e30f}, y[4] = {0};
  int64_t dims = 4;
  tpu_buffer *buf = NULL;
  CHECK_OK(tpu_buffer_from_host(rt, 0, x, TPU_F32, &dims, 1, &buf));
  CHECK_OK(tpu_buffer_to_host(rt, buf, y, sizeof y));
  CHECK(memcmp(x, y, sizeof x) == 0);
  tpu_buffer_destroy(rt, buf);

  int64_t zero[2] = {0, 3};
  tpu_buffer *empty = NULL;
  CHECK_OK(tpu_buffer_from_host(rt, 0, NULL, TPU_F32, zero, 2, &empty));
  CHECK_OK(tpu_buffer_to_host(rt, empty, y, 0));
  tpu_buffer_destroy(rt, empty);

  tpu_buffer *u = NULL;
  CHECK_OK(tpu_buffer_uninitialized(rt, 0, TPU_S64, zero, 2, &u));
  tpu_buffer_destroy(rt, u);
  CHECK_OK(tpu_buffer_uninitialized(rt, 0, TPU_BF16, &dims, 1, &u));
  tpu_buffer_destroy(rt, u);

  tpu_status_t st = tpu_buffer_from_host(rt, 7, x, TPU_F32, &dims, 1, &buf);
  CHECK(st != NULL && strstr(tpu_status_message(st), "invalid device index 7") != NULL);
  tpu_status_free(st);
}

static void test_compile_error_is_status(void) {
  tpu_executable *exe = NULL;
  const char *bad = "module { func.func public @main() -> () { \"stablehlo.nonsense\"() : () -> () } }";
  tpu_status_t st = tpu_executable_compile(rt, bad, strlen(bad), NULL, &exe);
  CHECK(st != NULL);
  CHECK(exe == NULL);
  CHECK(tpu_status_code(st) == TPU_ERR_RUNTIME);
  CHECK(strstr(tpu_status_message(st), "XLA compilation failed") != NULL);
  tpu_status_free(st);
}

static void test_execute_and_serialize(void) {
  tpu_executable *exe = NULL;
  CHECK_OK(tpu_executable_compile(rt, kDouble, strlen(kDouble), NULL, &exe));
  CHECK(tpu_executable_num_outputs(exe) == 1);
  float x[4] = {1, 2, 3, 4}, y[4];
  int64_t dims = 4;
  tpu_buffer *in = NULL, *out = NULL;
  CHECK_OK(tpu_buffer_from_host(rt, 0, x, TPU_F32, &dims, 1, &in));
  uint64_t launches = tpu_stats_get(TPU_STAT_EXECUTIONS);
  /* Chain 100 launches without waiting, then synchronize once. */
  tpu_buffer *cur = in;
  for (int i = 0; i < 100; i++) {
    CHECK_OK(tpu_executable_execute(rt, exe, 0, &cur, 1, NULL, true, &out));
    if (cur != in) tpu_buffer_destroy(rt, cur);
    cur = out;
  }
  CHECK_OK(tpu_runtime_synchronize(rt, -1));
  CHECK(tpu_stats_get(TPU_STAT_EXECUTIONS) - launches == 100);
  CHECK_OK(tpu_buffer_to_host(rt, cur, y, sizeof y));
  CHECK(y[0] == ldexpf(1.0f, 100) && y[3] == ldexpf(4.0f, 100));
  tpu_buffer_destroy(rt, cur);

  char *bytes = NULL;
  size_t size = 0;
  CHECK_OK(tpu_executable_serialize(rt, exe, &bytes, &size));
  CHECK(size > 0);
  tpu_executable *again = NULL;
  CHECK_OK(tpu_executable_deserialize(rt, bytes, size, &again));
  CHECK_OK(tpu_executable_execute(rt, again, 0, &in, 1, NULL, true, &out));
  CHECK_OK(tpu_buffer_to_host(rt, out, y, sizeof y));
  CHECK(y[0] == 2 && y[3] == 8);
  tpu_buffer_destroy(rt, out);

  /* Garbage is a status, not a crash. */
  tpu_executable *junk = NULL;
  tpu_status_t st = tpu_executable_deserialize(rt, "garbage", 7, &junk);
  CHECK(st != NULL && junk == NULL);
  tpu_status_free(st);
  free(bytes);

  tpu_buffer_destroy(rt, in);
  tpu_executable_destroy(rt, again);
  tpu_executable_destroy(rt, exe);
}

/* Three chained 768^3 products: long enough to be in flight when a marker
 * is made after their launch. */
static const char kProducts[] =
    "module @m {\n"
    "  func.func public @main(%a: tensor<768x768xf32>) -> (tensor<768x768xf32>) {\n"
    "    %b = \"stablehlo.dot_general\"(%a, %a) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions"
    " = [1], rhs_contracting_dimensions = [0]>} : (tensor<768x768xf32>, tensor<768x768xf32>) -> tensor<768x768xf32>\n"
    "    %c = \"stablehlo.dot_general\"(%b, %a) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions"
    " = [1], rhs_contracting_dimensions = [0]>} : (tensor<768x768xf32>, tensor<768x768xf32>) -> tensor<768x768xf32>\n"
    "    %d = \"stablehlo.dot_general\"(%c, %a) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions"
    " = [1], rhs_contracting_dimensions = [0]>} : (tensor<768x768xf32>, tensor<768x768xf32>) -> tensor<768x768xf32>\n"
    "    \"func.return\"(%d) : (tensor<768x768xf32>) -> ()\n"
    "  }\n"
    "}\n";

/* A marker is reached once the launches before it finish (through the
 * plugin's ready callback when they are still in flight), not before it was
 * made; with nothing in flight, at once. Releasing before or after it is
 * reached frees it either way (LeakSanitizer checks). */
static void test_markers(void) {
  tpu_marker *idle = tpu_marker_record(rt, 0);
  CHECK(idle != NULL && tpu_marker_done(idle));
  tpu_executable *exe = NULL;
  CHECK_OK(tpu_executable_compile(rt, kProducts, strlen(kProducts), NULL, &exe));
  static float x[768 * 768];
  for (int i = 0; i < 768 * 768; i++) x[i] = (float)(i % 7) / 7.0f;
  int64_t dims[2] = {768, 768};
  tpu_buffer *in = NULL, *out[3] = {NULL};
  CHECK_OK(tpu_buffer_from_host(rt, 0, x, TPU_F32, dims, 2, &in));
  for (int i = 0; i < 3; i++) {
    CHECK_OK(tpu_executable_execute(rt, exe, 0, &in, 1, NULL, true, &out[i]));
  }
  tpu_marker *after = tpu_marker_record(rt, 0), *dropped = tpu_marker_record(rt, 0);
  tpu_marker_release(dropped); /* before it is reached: the callback frees it */
  tpu_marker_wait(after);
  CHECK(tpu_marker_done(after) && tpu_marker_time_ns(after) >= tpu_marker_time_ns(idle));
  CHECK_OK(tpu_runtime_synchronize(rt, 0));
  tpu_marker_release(idle);
  tpu_marker_release(after);
  tpu_buffer_destroy(rt, in);
  for (int i = 0; i < 3; i++) tpu_buffer_destroy(rt, out[i]);
  tpu_executable_destroy(rt, exe);
}

static void test_donation(void) {
  const char *prog =
      "module @m {\n"
      "  func.func public @main(%a: tensor<3xi64> {tf.aliasing_output = 0 : i32}) -> (tensor<3xi64>) {\n"
      "    %r = \"stablehlo.add\"(%a, %a) : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>\n"
      "    \"func.return\"(%r) : (tensor<3xi64>) -> ()\n"
      "  }\n"
      "}\n";
  tpu_executable *exe = NULL;
  CHECK_OK(tpu_executable_compile(rt, prog, strlen(prog), NULL, &exe));
  int64_t x[3] = {1, -2, 3}, y[3], dims = 3;
  tpu_buffer *in = NULL, *out = NULL;
  CHECK_OK(tpu_buffer_from_host(rt, 0, x, TPU_S64, &dims, 1, &in));
  bool donate = true;
  CHECK_OK(tpu_executable_execute(rt, exe, 0, &in, 1, &donate, true, &out));
  tpu_buffer_destroy(rt, in);
  CHECK_OK(tpu_buffer_to_host(rt, out, y, sizeof y));
  CHECK(y[0] == 2 && y[1] == -4 && y[2] == 6);
  /* Not donated: the input stays readable. */
  donate = false;
  tpu_buffer *out2 = NULL;
  CHECK_OK(tpu_executable_execute(rt, exe, 0, &out, 1, &donate, true, &out2));
  CHECK_OK(tpu_buffer_to_host(rt, out, y, sizeof y));
  CHECK(y[0] == 2);
  CHECK_OK(tpu_buffer_to_host(rt, out2, y, sizeof y));
  CHECK(y[0] == 4);
  tpu_buffer_destroy(rt, out);
  tpu_buffer_destroy(rt, out2);
  tpu_executable_destroy(rt, exe);
}

int main(void) {
  RUN(test_bad_plugin_path);
  rt = test_runtime_create();
  if (rt == NULL) return 1;
  RUN(test_client);
  RUN(test_roundtrip_and_zero_size);
  RUN(test_compile_error_is_status);
  RUN(test_execute_and_serialize);
  RUN(test_donation);
  RUN(test_markers);
  tpu_runtime_destroy(rt);
  return check_failures ? 1 : 0;
}
