/* Compile progress counters (see progress.h): one burst at a time, under a
 * lock taken twice per compile, which costs nothing beside a compile. */
#include "base/progress.h"

#include <pthread.h>
#include <time.h>

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_progress g_burst;
static double g_start, g_last_end;

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Fills the burst's clocks at |now|. Caller holds g_lock. */
static tpu_progress snapshot(double now) {
  tpu_progress p = g_burst;
  if (p.active) {
    p.seconds = now - g_start;
    p.idle_seconds = p.in_flight > 0 ? 0 : now - g_last_end;
  }
  return p;
}

void tpu_progress_compile_begin(void) {
  double now = now_seconds();
  pthread_mutex_lock(&g_lock);
  if (!g_burst.active) {
    g_burst = (tpu_progress){.active = true};
    g_start = now;
  }
  g_burst.in_flight++;
  pthread_mutex_unlock(&g_lock);
}

void tpu_progress_compile_end(bool loaded) {
  double now = now_seconds();
  pthread_mutex_lock(&g_lock);
  if (g_burst.active && g_burst.in_flight > 0) {
    g_burst.in_flight--;
    g_burst.done++;
    g_burst.loaded += loaded;
    g_last_end = now;
  }
  pthread_mutex_unlock(&g_lock);
}

void tpu_progress_read(tpu_progress *out) {
  double now = now_seconds();
  pthread_mutex_lock(&g_lock);
  *out = snapshot(now);
  pthread_mutex_unlock(&g_lock);
}

bool tpu_progress_end_burst(double idle_seconds, tpu_progress *out) {
  double now = now_seconds();
  pthread_mutex_lock(&g_lock);
  *out = snapshot(now);
  bool ends = out->active && out->in_flight == 0 && out->idle_seconds >= idle_seconds;
  if (ends) {
    out->seconds = g_last_end - g_start;
    g_burst = (tpu_progress){0};
  }
  pthread_mutex_unlock(&g_lock);
  return ends;
}
