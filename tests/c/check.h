/* A minimal test harness for the C unit tests: CHECK macros that report and
 * count failures, and the plugin path every runtime test needs. */
#ifndef TPU_TESTS_CHECK_H_
#define TPU_TESTS_CHECK_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "runtime/runtime.h"

static int check_failures = 0;

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      check_failures++;                                                    \
    }                                                                      \
  } while (0)

/* Fails the test (and stops the current function) on a non-OK status. */
#define CHECK_OK(expr)                                                              \
  do {                                                                              \
    tpu_status_t st_ = (expr);                                                      \
    if (st_ != NULL) {                                                              \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,          \
              tpu_status_message(st_));                                             \
      tpu_status_free(st_);                                                         \
      check_failures++;                                                             \
      return;                                                                       \
    }                                                                               \
  } while (0)

#define RUN(test)                         \
  do {                                    \
    int before_ = check_failures;         \
    test();                               \
    fprintf(stderr, "%s %s\n", check_failures == before_ ? "ok  " : "FAIL", #test); \
  } while (0)

/* A program of one op for the tests that run one: a + a on f32[4]. */
static const char kDouble[] =
    "module @m {\n"
    "  func.func public @main(%a: tensor<4xf32>) -> (tensor<4xf32>) {\n"
    "    %r = \"stablehlo.add\"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
    "    \"func.return\"(%r) : (tensor<4xf32>) -> ()\n"
    "  }\n"
    "}\n";

/* The PJRT plugin the runtime tests load: $TORCHTPU_TEST_PLUGIN. */
static const char *test_plugin_path(void) {
  const char *p = getenv("TORCHTPU_TEST_PLUGIN");
  if (p == NULL || *p == '\0') {
    fprintf(stderr, "TORCHTPU_TEST_PLUGIN is not set: point it at xla_cpu_pjrt.so\n");
    exit(2);
  }
  return p;
}

/* The CPU plugin's runtime for the tests that run programs; NULL (with the
 * reason printed) when it cannot start. */
static tpu_runtime *test_runtime_create(void) {
  tpu_runtime_options o;
  tpu_runtime_options_init(&o);
  o.plugin_path = test_plugin_path();
  o.platform = "cpu";
  tpu_runtime *r = NULL;
  tpu_status_t st = tpu_runtime_create(&o, &r);
  if (st != NULL) {
    fprintf(stderr, "cannot create the runtime: %s\n", tpu_status_message(st));
    tpu_status_free(st);
  }
  return r;
}

#endif /* TPU_TESTS_CHECK_H_ */
