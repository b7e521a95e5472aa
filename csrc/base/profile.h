/* Runtime tracing for profilers: spans the runtime records while a profiler
 * is on, kept in one process-wide buffer until the profiler takes them.
 *
 * The runtime knows no PyTorch: csrc/torch/profiler.cpp turns the buffer
 * into Kineto activities for torch.profiler. What is recorded:
 * - TPU_PROFILE_COMPILE: getting a program ready on the host, |detail| "miss"
 *   (compiled by XLA), "disk load" (read from the persistent compile cache)
 *   or "hit" (found in the in-memory eager cache, a zero-length span);
 * - TPU_PROFILE_EXECUTE: the host's launch call of a program;
 * - TPU_PROFILE_DEVICE: the program on its device, from its launch to its
 *   completion event (PJRT_Event_OnReady); closed from the plugin's thread;
 * - TPU_PROFILE_INSTANT: a point in time with a reason (tpu_profile_instant).
 * Times are CLOCK_REALTIME nanoseconds (what Kineto and c10::getTime use).
 * Each event carries the correlation id current on the recording thread
 * (the innermost ATen op the profiler is inside; 0 outside any).
 *
 * Cost when off: callers test tpu_profile_enabled(), one relaxed load of a
 * global flag, before doing anything else. All functions are thread-safe. */
#ifndef TPU_BASE_PROFILE_H_
#define TPU_BASE_PROFILE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_profile_kind {
  TPU_PROFILE_COMPILE = 0,
  TPU_PROFILE_EXECUTE,
  TPU_PROFILE_DEVICE,
  TPU_PROFILE_INSTANT,
} tpu_profile_kind_t;

#define TPU_PROFILE_NAME_MAX 96
#define TPU_PROFILE_DETAIL_MAX 96

typedef struct tpu_profile_event {
  tpu_profile_kind_t kind;
  int device;            /* the device of a program, -1 for host-only events */
  int32_t thread;        /* the recording thread's system id (gettid) */
  uint64_t correlation;  /* the recording thread's correlation id, 0: none */
  int64_t start_ns;      /* CLOCK_REALTIME */
  int64_t end_ns;        /* < start_ns: a device span still open */
  char name[TPU_PROFILE_NAME_MAX];     /* truncated copies */
  char detail[TPU_PROFILE_DETAIL_MAX];
} tpu_profile_event;

/* Non-zero while a profiler records; read through tpu_profile_enabled(). */
extern int tpu_profile_flag;
static inline bool tpu_profile_enabled(void) { return __atomic_load_n(&tpu_profile_flag, __ATOMIC_RELAXED) != 0; }

/* CLOCK_REALTIME nanoseconds. */
int64_t tpu_profile_now_ns(void);

/* Empties the buffer and starts recording. */
void tpu_profile_start(void);
/* Stops recording, then waits up to |wait_ns| for open device spans to
 * close (programs still running finish within it, or stay open: their end
 * is then the time of the stop). */
void tpu_profile_stop(int64_t wait_ns);
/* Hands over the recorded events (|*out| malloc'ed, freed by the caller;
 * NULL when none) and empties the buffer. |*out_dropped| (may be NULL):
 * events not recorded because the buffer was full. */
size_t tpu_profile_take(tpu_profile_event **out, uint64_t *out_dropped);

/* The calling thread's correlation ids: a stack, as the profiler enters
 * and leaves nested ops; events take the innermost. */
void tpu_profile_push_correlation(uint64_t id);
void tpu_profile_pop_correlation(void);
uint64_t tpu_profile_correlation(void);

/* Records a finished span (no-op when not recording). */
void tpu_profile_span(tpu_profile_kind_t kind, const char *name, const char *detail, int device, int64_t start_ns,
                    int64_t end_ns);
/* Records a span whose end comes later: returns a handle for
 * tpu_profile_close (0: not recorded). */
uint64_t tpu_profile_open(tpu_profile_kind_t kind, const char *name, const char *detail, int device, int64_t start_ns);
/* Ends the span of |handle| at |end_ns|, from any thread. Handles of an
 * earlier recording are ignored. */
void tpu_profile_close(uint64_t handle, int64_t end_ns);

/* Records a zero-length host event of |kind| now (no-op when not
 * recording). */
void tpu_profile_mark(tpu_profile_kind_t kind, const char *name, const char *detail);

/* The hook for decisions worth seeing on a timeline: records a zero-length
 * host event |name| with |detail| (say "fused eager cut", "a .item() reads
 * a pending value") when a profiler records; costs one branch otherwise.
 * Both strings are copied (truncated to 95 bytes); NULL detail is "". */
void tpu_profile_instant(const char *name, const char *detail);

#ifdef __cplusplus
}
#endif

#endif /* TPU_BASE_PROFILE_H_ */
