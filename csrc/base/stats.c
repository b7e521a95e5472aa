/* Telemetry counters. */
#include "base/stats.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

static _Atomic uint64_t counters[TPU_STAT_COUNT_];

static const char *const names[TPU_STAT_COUNT_] = {
    [TPU_STAT_OPS] = "ops",
    [TPU_STAT_CACHE_HITS] = "cache_hits",
    [TPU_STAT_CACHE_MISSES] = "cache_misses",
    [TPU_STAT_CACHE_LOADS] = "cache_loads",
    [TPU_STAT_COMPILE_NS] = "compile_ns",
    [TPU_STAT_EXECUTIONS] = "executions",
    [TPU_STAT_H2D_BYTES] = "h2d_bytes",
    [TPU_STAT_D2H_BYTES] = "d2h_bytes",
    [TPU_STAT_FUSED_OPS] = "fused_ops",
    [TPU_STAT_FUSED_PROGRAMS] = "fused_programs",
    [TPU_STAT_TRACE_HITS] = "trace_hits",
    [TPU_STAT_TRACE_MISSES] = "trace_misses",
    [TPU_STAT_FUSED_MAX_OPS] = "fused_max_ops",
    [TPU_STAT_FUSED_REPLAYS] = "fused_replays",
};

void tpu_stats_add(tpu_counter_t c, uint64_t v) {
  atomic_fetch_add_explicit(&counters[c], v, memory_order_relaxed);
}

void tpu_stats_max(tpu_counter_t c, uint64_t v) {
  uint64_t cur = atomic_load_explicit(&counters[c], memory_order_relaxed);
  while (cur < v && !atomic_compare_exchange_weak_explicit(&counters[c], &cur, v, memory_order_relaxed,
                                                           memory_order_relaxed)) {
  }
}

uint64_t tpu_stats_get(tpu_counter_t c) {
  return atomic_load_explicit(&counters[c], memory_order_relaxed);
}

const char *tpu_stats_name(tpu_counter_t c) { return names[c]; }

typedef struct op_count {
  char *name;
  uint64_t count;
  struct op_count *next;
} op_count;

static pthread_mutex_t op_lock = PTHREAD_MUTEX_INITIALIZER;
static op_count *op_tables[TPU_OPSTAT_KIND_COUNT_];

uint64_t tpu_stats_op_bump(tpu_op_counter_kind_t kind, const char *name) {
  uint64_t result = 0;
  pthread_mutex_lock(&op_lock);
  op_count *e = op_tables[kind];
  while (e != NULL && strcmp(e->name, name) != 0) e = e->next;
  if (e == NULL) {
    size_t n = strlen(name) + 1;
    e = tpu_alloc_or_null(sizeof *e + n);
    if (e != NULL) {
      memset(e, 0, sizeof *e);
      e->name = memcpy((char *)(e + 1), name, n);
      e->next = op_tables[kind];
      op_tables[kind] = e;
    }
  }
  if (e != NULL) result = ++e->count;
  pthread_mutex_unlock(&op_lock);
  return result;
}

void tpu_stats_op_each(tpu_op_counter_kind_t kind,
                       void (*fn)(void *ctx, const char *name, uint64_t count), void *ctx) {
  pthread_mutex_lock(&op_lock);
  for (op_count *e = op_tables[kind]; e != NULL; e = e->next) fn(ctx, e->name, e->count);
  pthread_mutex_unlock(&op_lock);
}

void tpu_stats_reset(void) {
  for (int i = 0; i < TPU_STAT_COUNT_; i++) atomic_store(&counters[i], 0);
  pthread_mutex_lock(&op_lock);
  for (int k = 0; k < TPU_OPSTAT_KIND_COUNT_; k++) {
    op_count *e = op_tables[k];
    while (e != NULL) {
      op_count *next = e->next;
      free(e);
      e = next;
    }
    op_tables[k] = NULL;
  }
  pthread_mutex_unlock(&op_lock);
}
