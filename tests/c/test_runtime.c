/* Runtime tests on the real PJRT plugin: loading (and failing to), buffers
 * (zero-size too), compile errors as statuses, execution, donation, async
 * synchronization, serialization, a forked child; a product re-run on an
 * argument rewritten in place or at a recycled address reads the new values. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/stats.h"
#include "check.h"
#include "runtime/runtime.h"

static tpu_runtime *rt;

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
  /* The CPU plugin compiles with XLA option overrides (YNNPACK fusions, no
   * XNNPACK thunks). */
  size_t size = 0;
  const char *options = tpu_runtime_compile_options(rt, &size);
  CHECK(size > 8 && memmem(options, size, "xla_cpu_experimental_ynn_fusion_type", 36) != NULL);
  CHECK(memmem(options, size, "xla_cpu_use_xnnpack", 19) != NULL);
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

/* The distributed backend reads and writes buffers through their host
 * address on the CPU plugin: the bytes are the tensor's, row-major, and a
 * write into a buffer nothing has read yet is what a later read sees. */
static void test_host_pointer(void) {
  float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {0};
  int64_t dims[2] = {2, 3};
  tpu_buffer *buf = NULL;
  void *p = NULL;
  CHECK_OK(tpu_buffer_from_host(rt, 0, x, TPU_F32, dims, 2, &buf));
  CHECK_OK(tpu_buffer_await(rt, buf));
  CHECK_OK(tpu_buffer_host_pointer(rt, buf, &p));
  CHECK(p != NULL && memcmp(p, x, sizeof x) == 0);
  tpu_buffer_destroy(rt, buf);

  tpu_buffer *fresh = NULL;
  CHECK_OK(tpu_buffer_uninitialized(rt, 0, TPU_F32, dims, 2, &fresh));
  CHECK_OK(tpu_buffer_await(rt, fresh));
  CHECK_OK(tpu_buffer_host_pointer(rt, fresh, &p));
  memcpy(p, x, sizeof x);
  CHECK_OK(tpu_buffer_to_host(rt, fresh, y, sizeof y));
  CHECK(memcmp(x, y, sizeof x) == 0);
  tpu_buffer_destroy(rt, fresh);

  tpu_status_t st = tpu_buffer_host_pointer(rt, NULL, &p);
  CHECK(st != NULL && p == NULL);
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

/* An executable runs again and again on buffers whose address stays while
 * their contents change: a donated in-place update returns the same memory,
 * and a freed buffer's memory comes back for the next one. A product must
 * read the values, not a copy packed at the first run (XNNPACK's dot kept
 * its right-hand operand packed by address: the compile options turn it off). */
enum { M = 256, K = 256, N = 96 };

static void fill(float *x, size_t n, float scale) {
  for (size_t i = 0; i < n; i++) x[i] = scale * (float)((int)(i * 7919 % 23) - 11) / 8.0f;
}

/* |out| = rows 0 and M-1 of x @ w in float64, to compare with. */
static void reference_rows(const float *x, const float *w, double *out) {
  for (int r = 0; r < 2; r++) {
    int i = r == 0 ? 0 : M - 1;
    for (int j = 0; j < N; j++) {
      double acc = 0;
      for (int k = 0; k < K; k++) acc += (double)x[i * K + k] * w[k * N + j];
      out[r * N + j] = acc;
    }
  }
}

static bool rows_match(tpu_buffer *y, const float *x, const float *w) {
  static float got[M * N];
  static double want[2 * N];
  tpu_status_t st = tpu_buffer_to_host(rt, y, got, sizeof got);
  if (st != NULL) {
    tpu_status_free(st);
    return false;
  }
  reference_rows(x, w, want);
  for (int r = 0; r < 2; r++)
    for (int j = 0; j < N; j++)
      if (fabs(got[(r == 0 ? 0 : M - 1) * N + j] - want[r * N + j]) > 1e-3 * (1 + fabs(want[r * N + j])))
        return false;
  return true;
}

static void test_rerun_on_rewritten_arguments(void) {
  const char *dot =
      "module @m {\n"
      "  func.func public @main(%x: tensor<256x256xf32>, %w: tensor<256x96xf32>) -> (tensor<256x96xf32>) {\n"
      "    %r = \"stablehlo.dot_general\"(%x, %w) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], "
      "rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]} "
      ": (tensor<256x256xf32>, tensor<256x96xf32>) -> tensor<256x96xf32>\n"
      "    \"func.return\"(%r) : (tensor<256x96xf32>) -> ()\n"
      "  }\n"
      "}\n";
  const char *halve =
      "module @m {\n"
      "  func.func public @main(%w: tensor<256x96xf32> {tf.aliasing_output = 0 : i32}) -> (tensor<256x96xf32>) {\n"
      "    %h = \"stablehlo.constant\"() {value = dense<0.5> : tensor<256x96xf32>} : () -> tensor<256x96xf32>\n"
      "    %r = \"stablehlo.multiply\"(%w, %h) : (tensor<256x96xf32>, tensor<256x96xf32>) -> tensor<256x96xf32>\n"
      "    \"func.return\"(%r) : (tensor<256x96xf32>) -> ()\n"
      "  }\n"
      "}\n";
  tpu_executable *dot_exe = NULL, *halve_exe = NULL;
  CHECK_OK(tpu_executable_compile(rt, dot, strlen(dot), NULL, &dot_exe));
  CHECK_OK(tpu_executable_compile(rt, halve, strlen(halve), NULL, &halve_exe));
  static float x[M * K], w[K * N];
  fill(x, M * K, 1.0f);
  fill(w, K * N, 1.0f);
  int64_t xd[2] = {M, K}, wd[2] = {K, N};
  tpu_buffer *args[2] = {NULL, NULL}, *y = NULL;
  CHECK_OK(tpu_buffer_from_host(rt, 0, x, TPU_F32, xd, 2, &args[0]));
  CHECK_OK(tpu_buffer_from_host(rt, 0, w, TPU_F32, wd, 2, &args[1]));
  bool keep[2] = {false, false};
  CHECK_OK(tpu_executable_execute(rt, dot_exe, 0, args, 2, keep, true, &y));
  CHECK(rows_match(y, x, w));
  tpu_buffer_destroy(rt, y);

  /* w halved in place: the donated result is w's memory. */
  bool donate = true;
  tpu_buffer *w2 = NULL;
  CHECK_OK(tpu_executable_execute(rt, halve_exe, 0, &args[1], 1, &donate, true, &w2));
  tpu_buffer_destroy(rt, args[1]);
  args[1] = w2;
  for (int i = 0; i < K * N; i++) w[i] *= 0.5f;
  CHECK_OK(tpu_executable_execute(rt, dot_exe, 0, args, 2, keep, true, &y));
  CHECK(rows_match(y, x, w));
  tpu_buffer_destroy(rt, y);

  /* w freed and another w made: the allocator hands back the same memory
   * (not under AddressSanitizer's quarantine: ctest runs this test a second
   * time without it). */
  for (int round = 0; round < 3; round++) {
    tpu_buffer_destroy(rt, args[1]);
    args[1] = NULL;
    fill(w, K * N, (float)(round + 2));
    CHECK_OK(tpu_buffer_from_host(rt, 0, w, TPU_F32, wd, 2, &args[1]));
    CHECK_OK(tpu_executable_execute(rt, dot_exe, 0, args, 2, keep, true, &y));
    CHECK(rows_match(y, x, w));
    tpu_buffer_destroy(rt, y);
  }
  tpu_buffer_destroy(rt, args[0]);
  tpu_buffer_destroy(rt, args[1]);
  tpu_executable_destroy(rt, dot_exe);
  tpu_executable_destroy(rt, halve_exe);
}

/* Whether |st| is the forked child's refusal (and frees it). */
static bool refused_in_child(tpu_status_t st) {
  bool ok = st != NULL && tpu_status_code(st) == TPU_ERR_RUNTIME &&
            strstr(tpu_status_message(st), "Cannot re-initialize tpu in forked subprocess") != NULL;
  tpu_status_free(st);
  return ok;
}

/* A child forked after the runtime started must not call the plugin, whose
 * threads stayed in the parent (it waited forever): every call fails at
 * once, releases free host memory only, a marker is reached when recorded,
 * and what the runtime learnt at creation still answers. The parent goes on.
 * An alarm turns a hang in the child into a failure. */
static void test_fork(void) {
  CHECK(!tpu_runtime_in_forked_child());
  CHECK(tpu_runtime_check_fork() == NULL);
  float x[4] = {1, 2, 3, 4}, y[4] = {0};
  int64_t dims = 4;
  tpu_buffer *buf = NULL, *out = NULL;
  tpu_executable *exe = NULL;
  CHECK_OK(tpu_buffer_from_host(rt, 0, x, TPU_F32, &dims, 1, &buf));
  CHECK_OK(tpu_executable_compile(rt, kDouble, strlen(kDouble), NULL, &exe));
  CHECK_OK(tpu_executable_execute(rt, exe, 0, &buf, 1, NULL, true, &out));
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30);
    int bad = 0;
    tpu_buffer *b = NULL;
    tpu_executable *e = NULL;
    tpu_runtime *r = NULL;
    bad += !tpu_runtime_in_forked_child();
    bad += !refused_in_child(tpu_runtime_check_fork());
    bad += !refused_in_child(tpu_runtime_synchronize(rt, -1));
    bad += !refused_in_child(tpu_buffer_to_host(rt, out, y, sizeof y));
    bad += !refused_in_child(tpu_buffer_await(rt, out));
    bad += !refused_in_child(tpu_buffer_from_host(rt, 0, x, TPU_F32, &dims, 1, &b));
    bad += !refused_in_child(tpu_buffer_uninitialized(rt, 0, TPU_F32, &dims, 1, &b));
    bad += !refused_in_child(tpu_executable_compile(rt, kDouble, strlen(kDouble), NULL, &e));
    bad += !refused_in_child(tpu_executable_execute(rt, exe, 0, &buf, 1, NULL, true, &b));
    tpu_runtime_options o;
    tpu_runtime_options_init(&o);
    o.plugin_path = test_plugin_path();
    bad += !refused_in_child(tpu_runtime_create(&o, &r));
    bad += b != NULL || e != NULL || r != NULL;
    tpu_marker *m = tpu_marker_record(rt, 0);
    bad += m == NULL || !tpu_marker_done(m);
    tpu_marker_release(m);
    bad += tpu_runtime_device_count(rt) != 1 || strcmp(tpu_runtime_platform_name(rt), "cpu") != 0;
    tpu_buffer_destroy(rt, out);
    tpu_buffer_destroy(rt, buf);
    tpu_executable_destroy(rt, exe);
    _exit(bad);
  }
  int status = -1;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(!tpu_runtime_in_forked_child());
  CHECK_OK(tpu_buffer_to_host(rt, out, y, sizeof y));
  CHECK(y[0] == 2 && y[3] == 8);
  CHECK_OK(tpu_runtime_synchronize(rt, -1));
  tpu_buffer_destroy(rt, out);
  tpu_buffer_destroy(rt, buf);
  tpu_executable_destroy(rt, exe);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "rerun") == 0) { /* the recycled-address run */
    rt = test_runtime_create();
    if (rt == NULL) return 1;
    RUN(test_rerun_on_rewritten_arguments);
    tpu_runtime_destroy(rt);
    return check_failures ? 1 : 0;
  }
  RUN(test_bad_plugin_path);
  rt = test_runtime_create();
  if (rt == NULL) return 1;
  RUN(test_client);
  RUN(test_roundtrip_and_zero_size);
  RUN(test_host_pointer);
  RUN(test_compile_error_is_status);
  RUN(test_execute_and_serialize);
  RUN(test_donation);
  RUN(test_markers);
  RUN(test_rerun_on_rewritten_arguments);
  RUN(test_fork);
  tpu_runtime_destroy(rt);
  return check_failures ? 1 : 0;
}
