/* Process-wide telemetry counters, cheap enough for the hot path (relaxed
 * atomics), plus per-op counters for fallbacks. Read by torchtpu.stats(). */
#ifndef TPU_BASE_STATS_H_
#define TPU_BASE_STATS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_counter {
  TPU_STAT_OPS = 0,          /* eager ops dispatched to a lowering */
  TPU_STAT_CACHE_HITS,       /* eager executable found in memory */
  TPU_STAT_CACHE_MISSES,     /* program compiled from scratch (eager or graph) */
  TPU_STAT_CACHE_LOADS,      /* program loaded from the on-disk cache instead */
  TPU_STAT_COMPILE_NS,       /* time spent compiling programs and loading them from disk */
  TPU_STAT_EXECUTIONS,       /* programs launched */
  TPU_STAT_H2D_BYTES,        /* host to device bytes */
  TPU_STAT_D2H_BYTES,        /* device to host bytes */
  TPU_STAT_FUSED_OPS,        /* eager calls recorded (fused eager) */
  TPU_STAT_FUSED_PROGRAMS,   /* runs of recorded calls launched as one program */
  TPU_STAT_TRACE_HITS,       /* ... whose program was in memory */
  TPU_STAT_TRACE_MISSES,     /* ... whose program was built */
  TPU_STAT_FUSED_MAX_OPS,    /* the most calls one fused program held */
  TPU_STAT_FUSED_REPLAYS,    /* fused programs that failed, their calls run one by one instead */
  TPU_STAT_COUNT_
} tpu_counter_t;

void tpu_stats_add(tpu_counter_t c, uint64_t v);
/* Raises |c| to |v| if it is less. */
void tpu_stats_max(tpu_counter_t c, uint64_t v);
uint64_t tpu_stats_get(tpu_counter_t c);
const char *tpu_stats_name(tpu_counter_t c);

/* Named per-op counters, one table per kind (fallbacks, decompositions). */
typedef enum tpu_op_counter_kind {
  TPU_OPSTAT_FALLBACK = 0,
  TPU_OPSTAT_DECOMPOSITION,
  TPU_OPSTAT_CUT, /* fused eager's cuts, by reason */
  TPU_OPSTAT_KIND_COUNT_
} tpu_op_counter_kind_t;

/* Adds 1 to |name|'s counter; returns the new value (0 if out of memory). */
uint64_t tpu_stats_op_bump(tpu_op_counter_kind_t kind, const char *name);
/* Calls |fn| for every (name, count) of |kind|, under the table's lock:
 * |fn| must not call back into the stats. */
void tpu_stats_op_each(tpu_op_counter_kind_t kind,
                       void (*fn)(void *ctx, const char *name, uint64_t count), void *ctx);

/* Zeroes every counter. */
void tpu_stats_reset(void);

#ifdef __cplusplus
}
#endif

#endif /* TPU_BASE_STATS_H_ */
