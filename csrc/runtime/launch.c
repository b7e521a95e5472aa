/* Launching: execute (one device or replicated), the in-flight launches
 * per device, deferred buffer destroys and synchronize, markers, the
 * profiler's device spans. */

#include "runtime/runtime.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/stats.h"
#include "runtime/internal.h"

/* --- pending launches ----------------------------------------------------- */

static bool event_ready(const PJRT_Api *api, PJRT_Event *ev) {
  PJRT_Event_IsReady_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Event_IsReady_Args, is_ready),
                               .event = ev};
  tpu_status_t st = CALL(api, PJRT_Event_IsReady, &a, "polling");
  if (st != NULL) {
    tpu_status_free(st);
    return false;
  }
  return a.is_ready;
}

#define LAUNCH_FAILED "a program failed"

/* Records the first asynchronous error; frees the others. Lock held. */
static void note_async_error(tpu_runtime *rt, tpu_status_t st) {
  if (st == NULL) return;
  if (rt->async_error == NULL) rt->async_error = st;
  else tpu_status_free(st);
}

static bool queue_push(seq_queue *q, void *ptr, uint64_t seq) {
  if (q->count == q->cap) {
    size_t cap = q->cap ? q->cap * 2 : 64;
    seq_entry *items = tpu_alloc_or_null(cap * sizeof *items);
    if (items == NULL) return false;
    for (size_t i = 0; i < q->count; i++) items[i] = q->items[(q->head + i) % q->cap];
    free(q->items);
    q->items = items;
    q->cap = cap;
    q->head = 0;
  }
  q->items[(q->head + q->count) % q->cap] = (seq_entry){ptr, seq};
  q->count++;
  return true;
}

static void queue_pop(seq_queue *q) {
  q->head = (q->head + 1) % q->cap;
  q->count--;
}

/* Drops |p|'s finished launches from the front, waiting for the oldest
 * while more than |max| are in flight. Lock held. */
static void drop_finished(tpu_runtime *rt, seq_queue *p, size_t max) {
  while (p->count > 0) {
    PJRT_Event *front = p->items[p->head].ptr;
    if (p->count <= max && !event_ready(rt->api, front)) break;
    note_async_error(rt, tpu_runtime_event_await(rt->api, front, LAUNCH_FAILED));
    queue_pop(p);
  }
}

/* --- deferred buffer destroys ----------------------------------------------
 * On the CPU plugin, destroying a buffer donated to a launch in flight (an
 * in-place op's old buffer, a fused trace's written storage) waits until
 * that launch finishes: each `x.mul_` waited for the one before it, and the
 * host never ran ahead of the device. A buffer released while tracked
 * launches are in flight waits in |rt->doomed| with the number of the newest
 * launch, and is destroyed once every launch up to that one has finished:
 * when a later launch or release finds them finished, or at synchronize.
 * Untracked launches (programs the plugin runs inline) are done when they
 * return. */

/* Destroys the doomed buffers that no launch in flight can use. Lock held. */
static void destroy_released(tpu_runtime *rt) {
  if (rt->doomed.count == 0) return; /* every tracked launch passes here */
  uint64_t in_flight = UINT64_MAX; /* the oldest launch in flight */
  for (int d = 0; d < rt->num_devices; d++) {
    const seq_queue *p = &rt->pending[d];
    if (p->count > 0 && p->items[p->head].seq < in_flight) in_flight = p->items[p->head].seq;
  }
  seq_queue *q = &rt->doomed;
  while (q->count > 0 && q->items[q->head].seq < in_flight) {
    tpu_runtime_destroy_now(rt->api, q->items[q->head].ptr);
    queue_pop(q);
  }
}

bool tpu_runtime_defer_destroy(tpu_runtime *rt, PJRT_Buffer *buf) {
  if (!rt->defer_destroys || tpu_runtime_in_forked_child()) return false;
  pthread_mutex_lock(&rt->lock);
  bool in_flight = false;
  for (int d = 0; d < rt->num_devices; d++) {
    drop_finished(rt, &rt->pending[d], SIZE_MAX);
    in_flight |= rt->pending[d].count > 0;
  }
  bool deferred = in_flight && queue_push(&rt->doomed, buf, rt->launches);
  destroy_released(rt);
  pthread_mutex_unlock(&rt->lock);
  return deferred;
}

/* Adds |ev| to |device|'s launches in flight, dropping finished ones from
 * the front (and the buffers only they used) and waiting for the oldest
 * when too many are in flight. */
static void pending_push(tpu_runtime *rt, int device, PJRT_Event *ev) {
  pthread_mutex_lock(&rt->lock);
  seq_queue *p = &rt->pending[device];
  drop_finished(rt, p, TPU_MAX_PENDING - 1);
  bool pushed = queue_push(p, ev, rt->launches + 1);
  if (pushed) rt->launches++;
  destroy_released(rt);
  pthread_mutex_unlock(&rt->lock);
  if (pushed) return;
  tpu_status_t st = tpu_runtime_event_await(rt->api, ev, LAUNCH_FAILED); /* no room to keep it */
  pthread_mutex_lock(&rt->lock);
  note_async_error(rt, st);
  pthread_mutex_unlock(&rt->lock);
}

tpu_status_t tpu_runtime_synchronize(tpu_runtime *rt, int device) {
  /* Before the lock, which a launching thread of the parent may have held. */
  TPU_RETURN_IF_ERROR(tpu_runtime_check_fork());
  pthread_mutex_lock(&rt->lock);
  for (int d = 0; d < rt->num_devices; d++)
    if (device < 0 || d == device) drop_finished(rt, &rt->pending[d], 0);
  destroy_released(rt);
  tpu_status_t st = rt->async_error;
  rt->async_error = NULL;
  pthread_mutex_unlock(&rt->lock);
  return st;
}

void tpu_runtime_error_reported(tpu_runtime *rt, tpu_status_t st) {
  if (st == NULL || tpu_runtime_in_forked_child()) return;
  pthread_mutex_lock(&rt->lock);
  for (int d = 0; d < rt->num_devices; d++) drop_finished(rt, &rt->pending[d], 0);
  destroy_released(rt);
  /* The same failure: its innermost message (after the last ": " of the
   * contexts XLA and the runtime put before it) is in what the read raised. */
  const char *cause = rt->async_error != NULL ? tpu_status_message(rt->async_error) : NULL;
  const char *inner = NULL;
  for (const char *p = cause; p != NULL && (p = strstr(p, ": ")) != NULL; p += 2) inner = p + 2;
  if (cause != NULL && strncmp(cause, LAUNCH_FAILED ": ", strlen(LAUNCH_FAILED ": ")) == 0 && inner != NULL &&
      *inner != '\0' && strstr(tpu_status_message(st), inner) != NULL) {
    tpu_status_free(rt->async_error);
    rt->async_error = NULL;
  }
  pthread_mutex_unlock(&rt->lock);
}

/* --- markers --------------------------------------------------------------- */

struct tpu_marker {
  const PJRT_Api *api;
  pthread_mutex_t lock;
  pthread_cond_t reached;
  int refs;
  bool done;
  int64_t made_ns, reached_ns;
};

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void marker_reach(tpu_marker *m) {
  pthread_mutex_lock(&m->lock);
  m->reached_ns = now_ns();
  m->done = true;
  pthread_cond_broadcast(&m->reached);
  pthread_mutex_unlock(&m->lock);
}

/* The callback owns |error|; the launch's error reaches the user through
 * synchronize, so it is only freed here. */
static void marker_on_ready(PJRT_Error *error, void *arg) {
  tpu_marker *m = arg;
  if (error != NULL) {
    PJRT_Error_Destroy_Args d = {.struct_size = TPU_PJRT_SIZE(PJRT_Error_Destroy_Args, error), .error = error};
    m->api->PJRT_Error_Destroy(&d);
  }
  marker_reach(m);
  tpu_marker_release(m);
}

tpu_marker *tpu_marker_record(tpu_runtime *rt, int device) {
  tpu_marker *m = tpu_alloc_or_null(sizeof *m);
  if (m == NULL) return NULL;
  memset(m, 0, sizeof *m);
  pthread_mutex_init(&m->lock, NULL);
  pthread_cond_init(&m->reached, NULL);
  m->api = rt->api;
  m->refs = 1;
  m->made_ns = now_ns();
  if (tpu_runtime_in_forked_child()) { /* this process launched nothing */
    marker_reach(m);
    return m;
  }
  /* The newest launch still in flight finishes after all earlier ones (one
   * in-order queue per device); programs run inline were done at launch.
   * The lock keeps the event alive while the callback is attached. */
  pthread_mutex_lock(&rt->lock);
  PJRT_Event *last = NULL;
  if (device >= 0 && device < rt->num_devices && rt->pending[device].count > 0) {
    const seq_queue *p = &rt->pending[device];
    last = p->items[(p->head + p->count - 1) % p->cap].ptr;
  }
  bool waiting = false;
  if (last != NULL && TPU_PJRT_HAS(rt->api, PJRT_Event_OnReady) && !event_ready(rt->api, last)) {
    m->refs++;
    PJRT_Event_OnReady_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Event_OnReady_Args, user_arg),
                                 .event = last, .callback = marker_on_ready, .user_arg = m};
    PJRT_Error *err = rt->api->PJRT_Event_OnReady(&a);
    waiting = err == NULL;
    if (!waiting) {
      m->refs--;
      tpu_status_free(tpu_runtime_from_pjrt(rt->api, err, "watching a launch"));
    }
  }
  pthread_mutex_unlock(&rt->lock);
  if (!waiting) marker_reach(m);
  return m;
}

bool tpu_marker_done(tpu_marker *m) {
  pthread_mutex_lock(&m->lock);
  bool done = m->done;
  pthread_mutex_unlock(&m->lock);
  return done;
}

void tpu_marker_wait(tpu_marker *m) {
  pthread_mutex_lock(&m->lock);
  while (!m->done) pthread_cond_wait(&m->reached, &m->lock);
  pthread_mutex_unlock(&m->lock);
}

int64_t tpu_marker_time_ns(tpu_marker *m) {
  pthread_mutex_lock(&m->lock);
  int64_t t = m->reached_ns > m->made_ns ? m->reached_ns : m->made_ns;
  pthread_mutex_unlock(&m->lock);
  return t;
}

void tpu_marker_release(tpu_marker *m) {
  if (m == NULL) return;
  pthread_mutex_lock(&m->lock);
  bool last = --m->refs == 0;
  pthread_mutex_unlock(&m->lock);
  if (!last) return;
  pthread_mutex_destroy(&m->lock);
  pthread_cond_destroy(&m->reached);
  free(m);
}

/* --- tracing ----------------------------------------------------------------
 * A traced launch always asks for the completion event: its callback closes
 * the device span, whether the plugin ran the program inline (the event is
 * ready at once) or on its threads. The event then joins the pending list,
 * as a tracked launch's does. */
typedef struct trace_wait {
  const PJRT_Api *api;
  uint64_t span;
} trace_wait;

static void trace_on_ready(PJRT_Error *error, void *arg) {
  trace_wait *w = arg;
  int64_t now = tpu_profile_now_ns();
  if (error != NULL) {
    PJRT_Error_Destroy_Args d = {.struct_size = TPU_PJRT_SIZE(PJRT_Error_Destroy_Args, error), .error = error};
    w->api->PJRT_Error_Destroy(&d);
  }
  tpu_profile_close(w->span, now);
  free(w);
}

static tpu_status_t traced_execute(tpu_runtime *rt, tpu_executable *exe, int device,
                                   PJRT_LoadedExecutable_Execute_Args *a, int64_t *keep_heap) {
  int64_t t0 = tpu_profile_now_ns();
  tpu_status_t st = CALL(rt->api, PJRT_LoadedExecutable_Execute, a, "launching a program");
  int64_t t1 = tpu_profile_now_ns();
  free(keep_heap);
  tpu_profile_span(TPU_PROFILE_EXECUTE, tpu_executable_name(exe), st != NULL ? "failed" : "", device, t0, t1);
  if (st != NULL) return st;
  tpu_stats_add(TPU_STAT_EXECUTIONS, 1);
  PJRT_Event *done = *a->device_complete_events;
  if (done == NULL) return NULL;
  uint64_t span = tpu_profile_open(TPU_PROFILE_DEVICE, tpu_executable_name(exe), "", device, t0);
  trace_wait *w = span != 0 && TPU_PJRT_HAS(rt->api, PJRT_Event_OnReady) ? tpu_alloc_or_null(sizeof *w) : NULL;
  if (w != NULL) {
    *w = (trace_wait){.api = rt->api, .span = span};
    PJRT_Event_OnReady_Args r = {.struct_size = TPU_PJRT_SIZE(PJRT_Event_OnReady_Args, user_arg),
                                 .event = done, .callback = trace_on_ready, .user_arg = w};
    PJRT_Error *err = rt->api->PJRT_Event_OnReady(&r);
    if (err != NULL) {
      tpu_status_free(tpu_runtime_from_pjrt(rt->api, err, "watching a launch"));
      free(w);
      w = NULL;
    }
  }
  if (w == NULL) tpu_profile_close(span, t1); /* no completion to wait for: the launch's end */
  pending_push(rt, device, done);
  return NULL;
}

tpu_status_t tpu_executable_execute_replicas(tpu_runtime *rt, tpu_executable *exe, int num_replicas,
                                             tpu_buffer *const *const *args, size_t num_args,
                                             tpu_buffer **const *outs) {
  if (num_replicas < 1 || num_replicas > rt->num_devices)
    return tpu_status_new(TPU_ERR_VALUE, "%d replicas, but the client has %d devices", num_replicas,
                          rt->num_devices);
  PJRT_ExecuteOptions options = {.struct_size = TPU_PJRT_SIZE(PJRT_ExecuteOptions, incarnation_ids)};
  PJRT_LoadedExecutable_Execute_Args a = {
      .struct_size = TPU_PJRT_SIZE(PJRT_LoadedExecutable_Execute_Args, execute_device),
      .executable = exe->exe,
      .options = &options,
      .argument_lists = (PJRT_Buffer *const *const *)args,
      .num_devices = (size_t)num_replicas,
      .num_args = num_args,
      .output_lists = (PJRT_Buffer **const *)outs,
  };
  for (int r = 0; r < num_replicas; r++)
    for (size_t i = 0; i < exe->num_outputs; i++) outs[r][i] = NULL;
  int64_t t0 = tpu_profile_enabled() ? tpu_profile_now_ns() : 0;
  tpu_status_t st = CALL(rt->api, PJRT_LoadedExecutable_Execute, &a, "launching a replicated program");
  if (t0 != 0)
    tpu_profile_span(TPU_PROFILE_EXECUTE, tpu_executable_name(exe), st != NULL ? "failed" : "", -1, t0,
                     tpu_profile_now_ns());
  if (st == NULL) tpu_stats_add(TPU_STAT_EXECUTIONS, 1);
  return st;
}

tpu_status_t tpu_executable_execute(tpu_runtime *rt, tpu_executable *exe, int device,
                                    tpu_buffer *const *args, size_t num_args, const bool *donate,
                                    bool track, tpu_buffer **outs) {
  TPU_RETURN_IF_ERROR(tpu_runtime_check_device(rt, device));
  int64_t keep_small[32];
  int64_t *keep = keep_small;
  size_t num_keep = 0;
  if (donate != NULL) {
    if (num_args > 32) {
      TPU_RETURN_IF_ERROR(tpu_alloc(num_args * sizeof *keep, (void **)&keep));
    }
    for (size_t i = 0; i < num_args; i++)
      if (!donate[i]) keep[num_keep++] = (int64_t)i;
  }
  PJRT_ExecuteOptions options = {
      .struct_size = TPU_PJRT_SIZE(PJRT_ExecuteOptions, incarnation_ids),
      .non_donatable_input_indices = donate != NULL ? keep : NULL,
      .num_non_donatable_input_indices = num_keep,
  };
  PJRT_Buffer *const *arg_list = (PJRT_Buffer *const *)args;
  PJRT_Buffer **out_list = (PJRT_Buffer **)outs;
  PJRT_Event *done = NULL;
  PJRT_LoadedExecutable_Execute_Args a = {
      .struct_size = TPU_PJRT_SIZE(PJRT_LoadedExecutable_Execute_Args, execute_device),
      .executable = exe->exe,
      .options = &options,
      .argument_lists = &arg_list,
      .num_devices = 1,
      .num_args = num_args,
      .output_lists = &out_list,
      .device_complete_events = track ? &done : NULL,
      .execute_device = rt->devices[device],
  };
  for (size_t i = 0; i < exe->num_outputs; i++) outs[i] = NULL;
  if (tpu_profile_enabled()) {
    a.device_complete_events = &done;
    return traced_execute(rt, exe, device, &a, keep != keep_small ? keep : NULL);
  }
  tpu_status_t st = CALL(rt->api, PJRT_LoadedExecutable_Execute, &a, "launching a program");
  if (keep != keep_small) free(keep);
  if (st != NULL) return st;
  tpu_stats_add(TPU_STAT_EXECUTIONS, 1);
  if (done != NULL) pending_push(rt, device, done);
  return NULL;
}
