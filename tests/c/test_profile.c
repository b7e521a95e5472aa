/* Trace buffer tests: nothing is recorded while off; spans carry the
 * innermost correlation id of their thread; a span closed from another
 * thread, or after its recording ended, lands where it should (or nowhere);
 * stop waits for open spans and ends those that stay open. Then, on the
 * real plugin, a traced compile and launches (run inline and tracked): a
 * "miss" compile span with the program's name, an execute span and a
 * device span per launch, closed by the completion event. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "base/profile.h"
#include "check.h"
#include "runtime/runtime.h"

static void test_off_records_nothing(void) {
  tpu_profile_event *ev = NULL;
  CHECK(!tpu_profile_enabled());
  tpu_profile_span(TPU_PROFILE_EXECUTE, "a", "", 0, 1, 2);
  tpu_profile_instant("cut", "why");
  CHECK(tpu_profile_open(TPU_PROFILE_DEVICE, "a", "", 0, 1) == 0);
  size_t n = tpu_profile_take(&ev, NULL);
  CHECK(n == 0);
  free(ev);
}

static void test_correlation_and_instant(void) {
  tpu_profile_start();
  CHECK(tpu_profile_enabled());
  tpu_profile_instant("before", NULL);
  tpu_profile_push_correlation(7);
  tpu_profile_push_correlation(9);
  tpu_profile_instant("fused eager cut", "a .item() reads a pending value");
  tpu_profile_pop_correlation();
  tpu_profile_span(TPU_PROFILE_COMPILE, "aten::mm", "miss", -1, 100, 50); /* end before start: clamped */
  tpu_profile_pop_correlation();
  tpu_profile_pop_correlation(); /* one too many: harmless */
  CHECK(tpu_profile_correlation() == 0);
  tpu_profile_stop(0);
  tpu_profile_instant("after", "");
  tpu_profile_event *ev = NULL;
  size_t n = tpu_profile_take(&ev, NULL);
  CHECK(n == 3);
  if (n == 3) {
    CHECK(strcmp(ev[0].name, "before") == 0 && ev[0].detail[0] == '\0' && ev[0].correlation == 0);
    CHECK(ev[1].kind == TPU_PROFILE_INSTANT && ev[1].correlation == 9);
    CHECK(strcmp(ev[1].detail, "a .item() reads a pending value") == 0);
    CHECK(ev[2].kind == TPU_PROFILE_COMPILE && ev[2].correlation == 7 && ev[2].end_ns == ev[2].start_ns);
    CHECK(ev[1].thread != 0 && ev[1].thread == ev[2].thread);
    CHECK(ev[1].start_ns == ev[1].end_ns && ev[1].start_ns > 1000000000000000000LL); /* realtime, after 2001 */
  }
  free(ev);
}

static void test_long_names_truncate(void) {
  char name[300];
  memset(name, 'x', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  tpu_profile_start();
  tpu_profile_instant(name, name);
  tpu_profile_stop(0);
  tpu_profile_event *ev = NULL;
  CHECK(tpu_profile_take(&ev, NULL) == 1);
  if (ev != NULL) CHECK(strlen(ev[0].name) == TPU_PROFILE_NAME_MAX - 1 && strlen(ev[0].detail) == TPU_PROFILE_DETAIL_MAX - 1);
  free(ev);
}

static void *close_later(void *arg) {
  struct timespec ts = {0, 20 * 1000 * 1000};
  nanosleep(&ts, NULL);
  tpu_profile_close(*(uint64_t *)arg, tpu_profile_now_ns());
  return NULL;
}

static void test_open_spans(void) {
  tpu_profile_start();
  int64_t t0 = tpu_profile_now_ns();
  uint64_t h = tpu_profile_open(TPU_PROFILE_DEVICE, "p", "", 0, t0);
  uint64_t never = tpu_profile_open(TPU_PROFILE_DEVICE, "q", "", 1, t0);
  CHECK(h != 0 && never != 0 && h != never);
  pthread_t th;
  pthread_create(&th, NULL, close_later, &h);
  tpu_profile_stop(2LL * 1000 * 1000 * 1000); /* waits for |h|, then gives up on |never| */
  pthread_join(th, NULL);
  tpu_profile_close(never, t0 + 5); /* after the stop: ignored */
  tpu_profile_event *ev = NULL;
  size_t n = tpu_profile_take(&ev, NULL);
  CHECK(n == 2);
  if (n == 2) {
    CHECK(ev[0].end_ns >= ev[0].start_ns + 20 * 1000 * 1000 - 1000000); /* closed by the thread */
    CHECK(ev[1].end_ns >= ev[1].start_ns && ev[1].end_ns != t0 + 5);    /* ended at the stop */
  }
  free(ev);
  /* A handle of an earlier recording touches nothing of the next. */
  tpu_profile_start();
  uint64_t h2 = tpu_profile_open(TPU_PROFILE_DEVICE, "r", "", 0, t0);
  tpu_profile_close(h, t0 + 1);
  tpu_profile_stop(0);
  n = tpu_profile_take(&ev, NULL);
  CHECK(n == 1 && h2 != 0);
  if (n == 1) CHECK(ev[0].end_ns >= ev[0].start_ns && ev[0].end_ns != t0 + 1);
  free(ev);
}

static void test_runtime_spans(void) {
  tpu_runtime *rt = test_runtime_create();
  CHECK(rt != NULL);
  if (rt == NULL) return;
  tpu_profile_start();
  tpu_profile_push_correlation(42);
  tpu_compile_options o;
  tpu_compile_options_init(&o);
  o.name = "double";
  tpu_executable *exe = NULL;
  tpu_buffer *in = NULL, *out[2] = {NULL, NULL};
  float x[4] = {1, 2, 3, 4}, y[4];
  int64_t dims[1] = {4};
  CHECK_OK(tpu_executable_compile(rt, kDouble, strlen(kDouble), &o, &exe));
  CHECK(strcmp(tpu_executable_name(exe), "double") == 0);
  CHECK_OK(tpu_buffer_from_host(rt, 0, x, TPU_F32, dims, 1, &in));
  CHECK_OK(tpu_executable_execute(rt, exe, 0, &in, 1, NULL, false, &out[0])); /* inline */
  CHECK_OK(tpu_executable_execute(rt, exe, 0, &in, 1, NULL, true, &out[1]));  /* tracked */
  CHECK_OK(tpu_runtime_synchronize(rt, 0));
  CHECK_OK(tpu_buffer_to_host(rt, out[1], y, sizeof y));
  CHECK(y[3] == 8);
  tpu_profile_pop_correlation();
  tpu_profile_stop(1000LL * 1000 * 1000);
  tpu_profile_event *ev = NULL;
  size_t n = tpu_profile_take(&ev, NULL);
  int compiles = 0, executes = 0, device = 0;
  for (size_t i = 0; i < n; i++) {
    CHECK(strcmp(ev[i].name, "double") == 0 && ev[i].correlation == 42);
    CHECK(ev[i].end_ns >= ev[i].start_ns);
    if (ev[i].kind == TPU_PROFILE_COMPILE) compiles += strcmp(ev[i].detail, "miss") == 0;
    if (ev[i].kind == TPU_PROFILE_EXECUTE) executes++;
    if (ev[i].kind == TPU_PROFILE_DEVICE) {
      device++;
      CHECK(ev[i].device == 0);
    }
  }
  CHECK(compiles == 1 && executes == 2 && device == 2);
  free(ev);
  for (int i = 0; i < 2; i++) tpu_buffer_destroy(rt, out[i]);
  tpu_buffer_destroy(rt, in);
  tpu_executable_destroy(rt, exe);
  tpu_runtime_destroy(rt);
}

int main(void) {
  RUN(test_off_records_nothing);
  RUN(test_correlation_and_instant);
  RUN(test_long_names_truncate);
  RUN(test_open_spans);
  RUN(test_runtime_spans);
  return check_failures ? 1 : 0;
}
