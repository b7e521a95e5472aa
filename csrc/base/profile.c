/* The trace buffer: one growable array of events under one lock, with a
 * generation number so that a device span closed after its recording ended
 * (the plugin's callback runs late) cannot touch the next recording. */
#include "base/profile.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"

/* About 230 bytes an event: a recording holds at most ~230 MB. */
#define MAX_EVENTS (1u << 20)
#define MAX_DEPTH 64

int tpu_profile_flag;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_closed = PTHREAD_COND_INITIALIZER;
static tpu_profile_event *g_events; /* under g_lock, as everything below */
static size_t g_count, g_cap;
static size_t g_open;      /* device spans not closed yet */
static uint32_t g_generation;
static uint64_t g_dropped;

static _Thread_local uint64_t t_stack[MAX_DEPTH];
static _Thread_local int t_depth; /* may exceed MAX_DEPTH: deeper ids are not kept */
static _Thread_local int32_t t_tid;

int64_t tpu_profile_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int32_t thread_id(void) {
  if (t_tid == 0) t_tid = (int32_t)syscall(SYS_gettid);
  return t_tid;
}

void tpu_profile_push_correlation(uint64_t id) {
  if (t_depth < MAX_DEPTH) t_stack[t_depth] = id;
  t_depth++;
}

void tpu_profile_pop_correlation(void) {
  if (t_depth > 0) t_depth--;
}

uint64_t tpu_profile_correlation(void) {
  if (t_depth == 0) return 0;
  return t_stack[(t_depth <= MAX_DEPTH ? t_depth : MAX_DEPTH) - 1];
}

void tpu_profile_start(void) {
  pthread_mutex_lock(&g_lock);
  g_generation++;
  g_count = 0;
  g_open = 0;
  g_dropped = 0;
  __atomic_store_n(&tpu_profile_flag, 1, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&g_lock);
}

void tpu_profile_stop(int64_t wait_ns) {
  pthread_mutex_lock(&g_lock);
  __atomic_store_n(&tpu_profile_flag, 0, __ATOMIC_RELAXED);
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  int64_t t = (int64_t)deadline.tv_sec * 1000000000 + deadline.tv_nsec + (wait_ns > 0 ? wait_ns : 0);
  deadline.tv_sec = t / 1000000000;
  deadline.tv_nsec = t % 1000000000;
  while (g_open > 0)
    if (pthread_cond_timedwait(&g_closed, &g_lock, &deadline) == ETIMEDOUT) break;
  /* Spans still open end at the stop; later closes find another generation. */
  int64_t now = tpu_profile_now_ns();
  for (size_t i = 0; g_open > 0 && i < g_count; i++)
    if (g_events[i].end_ns < g_events[i].start_ns) {
      g_events[i].end_ns = now > g_events[i].start_ns ? now : g_events[i].start_ns;
      g_open--;
    }
  g_generation++;
  pthread_mutex_unlock(&g_lock);
}

size_t tpu_profile_take(tpu_profile_event **out, uint64_t *out_dropped) {
  pthread_mutex_lock(&g_lock);
  *out = g_events;
  size_t n = g_count;
  if (out_dropped != NULL) *out_dropped = g_dropped;
  g_events = NULL;
  g_count = g_cap = 0;
  g_open = 0;
  g_dropped = 0;
  g_generation++;
  pthread_mutex_unlock(&g_lock);
  return n;
}

static void copy_text(char *dst, size_t cap, const char *src) {
  size_t n = src != NULL ? strnlen(src, cap - 1) : 0;
  if (n) memcpy(dst, src, n);
  dst[n] = '\0';
}

/* Appends an event; returns its handle (0: not recorded). */
static uint64_t record(tpu_profile_kind_t kind, const char *name, const char *detail, int device, int64_t start_ns,
                       int64_t end_ns) {
  uint64_t correlation = tpu_profile_correlation();
  int32_t tid = thread_id();
  uint64_t handle = 0;
  pthread_mutex_lock(&g_lock);
  if (!tpu_profile_enabled()) goto done;
  if (g_count == g_cap) {
    size_t cap = g_cap ? g_cap * 2 : 4096;
    tpu_profile_event *grown = cap <= MAX_EVENTS ? tpu_realloc_or_null(g_events, cap * sizeof *grown) : NULL;
    if (grown == NULL) {
      g_dropped++;
      goto done;
    }
    g_events = grown;
    g_cap = cap;
  }
  tpu_profile_event *e = &g_events[g_count];
  e->kind = kind;
  e->device = device;
  e->thread = tid;
  e->correlation = correlation;
  e->start_ns = start_ns;
  e->end_ns = end_ns;
  copy_text(e->name, sizeof e->name, name);
  copy_text(e->detail, sizeof e->detail, detail);
  g_count++;
  if (end_ns < start_ns) g_open++;
  handle = (uint64_t)g_generation << 32 | (uint64_t)g_count; /* index + 1 */
done:
  pthread_mutex_unlock(&g_lock);
  return handle;
}

void tpu_profile_span(tpu_profile_kind_t kind, const char *name, const char *detail, int device, int64_t start_ns,
                    int64_t end_ns) {
  if (end_ns < start_ns) end_ns = start_ns;
  record(kind, name, detail, device, start_ns, end_ns);
}

uint64_t tpu_profile_open(tpu_profile_kind_t kind, const char *name, const char *detail, int device, int64_t start_ns) {
  return record(kind, name, detail, device, start_ns, start_ns - 1);
}

void tpu_profile_close(uint64_t handle, int64_t end_ns) {
  if (handle == 0) return;
  pthread_mutex_lock(&g_lock);
  size_t index = (size_t)(handle & 0xffffffffu) - 1;
  if ((uint32_t)(handle >> 32) == g_generation && index < g_count) {
    tpu_profile_event *e = &g_events[index];
    if (e->end_ns < e->start_ns) {
      e->end_ns = end_ns > e->start_ns ? end_ns : e->start_ns;
      if (--g_open == 0) pthread_cond_broadcast(&g_closed);
    }
  }
  pthread_mutex_unlock(&g_lock);
}

void tpu_profile_mark(tpu_profile_kind_t kind, const char *name, const char *detail) {
  if (!tpu_profile_enabled()) return;
  int64_t now = tpu_profile_now_ns();
  record(kind, name, detail, -1, now, now);
}

void tpu_profile_instant(const char *name, const char *detail) { tpu_profile_mark(TPU_PROFILE_INSTANT, name, detail); }
