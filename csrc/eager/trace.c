/* Fused eager: calls recorded instead of run, and the one program that runs
 * a run of them (see eager.h, "eager modes").
 *
 * A recorded call keeps what strict eager would run it with: its one-op
 * entry (the output metadata PyTorch's meta functions gave, whether it draws
 * random numbers; the program itself is compiled only if the call ever runs
 * alone), a copy of its arguments, its random seed and offset, and its new
 * outputs as arguments of their own (a storage and the layout PyTorch gave
 * the tensor). The storages it reads or writes are marked: whatever touches
 * a marked storage from outside (the host reading or writing it, a program
 * of another mode, a compiled graph) runs the trace first: a cut.
 *
 * One trace per process, under one lock: a call of any thread in fused mode
 * records into it. At a cut the calls become one program over one call that
 * holds all their arguments (program.c's builder in sequential mode: reads
 * see earlier calls' writes), keyed by every call's one-op key, which
 * storages are shared across calls, and which written storages PyTorch still
 * holds; a storage nobody holds is no result (an intermediate never becomes
 * a buffer). Steady-state training records the same calls every step and
 * finds its program in the eager cache.
 *
 * Storages PyTorch frees while recorded calls use them are freed after the
 * run. A program that fails to build, compile or run, or whose data checks
 * fail (an index out of range: the program then leaves every storage as it
 * was), is replaced by the calls' own programs, in order: the state strict
 * eager leaves. A thread's calls stop at its first that fails, whose error
 * is parked for that thread, which raises it at its next cut or recorded
 * call (the cutting thread at once); other threads' calls go on. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/profile.h"
#include "base/stats.h"
#include "base/strbuf.h"
#include "eager/internal.h"

int tpu_trace_pending;

static const char *const kCutNames[TPU_CUT_COUNT_] = {
    [TPU_CUT_SYNC] = "sync",
    [TPU_CUT_HOST_READ] = "host_read",
    [TPU_CUT_HOST_WRITE] = "host_write",
    [TPU_CUT_ALONE] = "run_alone",
    [TPU_CUT_GRAPH] = "compiled_graph",
    [TPU_CUT_STRICT] = "other_mode",
    [TPU_CUT_DEVICE] = "device",
    [TPU_CUT_SIZE] = "size_cap",
    [TPU_CUT_LOOP] = "loop",
    [TPU_CUT_MODE] = "mode_change",
    [TPU_CUT_OTHER] = "storage",
};

const char *tpu_cut_reason_name(tpu_cut_reason r) {
  return r >= 0 && r < TPU_CUT_COUNT_ ? kCutNames[r] : "unknown";
}

/* --- arena: argument copies; blocks never move ------------------------------ */

typedef struct block {
  struct block *next;
  size_t used, cap;
  alignas(16) unsigned char data[];
} block;

/* --- the trace ----------------------------------------------------------------- */

typedef struct rec {
  tpu_eager_entry *entry; /* held */
  const tpu_eager_op *op;
  int base;     /* its arguments: args[base, base + num_args) */
  int num_args;
  int num_outs; /* then one argument per new output (NONE where there is none) */
  tpu_hlo_precision_t precision;
  int rng;         /* index of its (seed, offset) pair, or -1 */
  uint64_t thread; /* the recording thread (thread_serial) */
} rec;

/* An error a replay found in a call of |thread|, raised at that thread's
 * next cut or call (errors). */
typedef struct parked {
  uint64_t thread;
  tpu_status_t st;
} parked;

/* Loop detection looks back this many calls for a repeat. */
#define HISTORY 256
#define MAX_PERIOD 128
/* A loop's trace holds whole iterations, at least this many calls. */
#define MIN_LOOP_CALLS 64
/* A storage that no call of a trace writes is bound to a parameter of its
 * own per call that reads it (program.c, read_storage): one argument of the
 * launch each. XLA's CPU client keeps a usage event per argument on the
 * buffer and, from 1024 of them, scans them all at every argument it adds:
 * a trace of 4096 calls reading one storage cost 3.9 us a call instead of
 * 1.5. A trace ends once a storage has this many readers. */
#define MAX_READERS 512

static struct {
  pthread_mutex_t lock;
  int device;
  rec *recs;
  int n, cap;
  tpu_eager_arg *args;
  int num_args, cap_args;
  tpu_storage **held;
  int num_held, cap_held;
  uint64_t *rng; /* (seed, offset) pairs */
  int num_rng, cap_rng;
  block *arena;
  int max_calls;
  int max_readers; /* the most calls that read one storage no call writes (MAX_READERS) */
  /* the calls' one-op keys since the last cut that was not a loop's */
  uint64_t history[HISTORY];
  int64_t stream;
  int period, matched, loop_calls;
  bool no_loops;
  tpu_strbuf key;
  char last_failure[1024];
  parked *parked;
  int num_parked, cap_parked;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* g.num_parked, read without the lock. */
static int g_any_parked;

/* A thread that works for others (tpu_eager_set_thread_works_for_others)
 * records its calls as this thread number: their errors go to the thread
 * that cuts. */
#define FOR_OTHERS 0
static _Thread_local uint64_t t_serial;

/* This thread's number, unique in the process (an address could be a later
 * thread's). */
static uint64_t thread_serial(void) {
  static _Atomic uint64_t next = 1;
  if (t_serial == 0) t_serial = atomic_fetch_add(&next, 1);
  return t_serial == UINT64_MAX ? FOR_OTHERS : t_serial;
}

void tpu_eager_set_thread_works_for_others(void) { t_serial = UINT64_MAX; }

void tpu_eager_fused_last_failure(char *out, size_t cap) {
  pthread_mutex_lock(&g.lock);
  snprintf(out, cap, "%s", g.last_failure);
  pthread_mutex_unlock(&g.lock);
}

void tpu_eager_set_fused_loop_detection(bool on) {
  pthread_mutex_lock(&g.lock);
  g.no_loops = !on;
  pthread_mutex_unlock(&g.lock);
}

void tpu_eager_set_fused_max_ops(int n) {
  pthread_mutex_lock(&g.lock);
  g.max_calls = n;
  pthread_mutex_unlock(&g.lock);
}

/* The cap set at run time, else the process's option. */
static int max_calls(void) {
  return g.max_calls > 0 ? g.max_calls : tpu_eager_context_get()->options.fused_max_ops;
}

static void *arena_alloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (g.arena == NULL || g.arena->cap - g.arena->used < n) {
    size_t cap = n > (256u << 10) ? n : (256u << 10);
    block *b = tpu_alloc_or_null(sizeof *b + cap);
    if (b == NULL) return NULL;
    b->next = g.arena;
    b->used = 0;
    b->cap = cap;
    g.arena = b;
  }
  void *p = g.arena->data + g.arena->used;
  g.arena->used += n;
  return p;
}

static void *arena_copy(const void *src, size_t n) {
  void *p = arena_alloc(n ? n : 1);
  if (p != NULL && n) memcpy(p, src, n);
  return p;
}

/* Keeps the arena's newest block (reused by the next trace). */
static void arena_reset(void) {
  if (g.arena == NULL) return;
  block *keep = g.arena, *b = keep->next;
  while (b != NULL) {
    block *next = b->next;
    free(b);
    b = next;
  }
  keep->next = NULL;
  keep->used = 0;
}

static bool grow(void **p, int *cap, int need, size_t elem) {
  if (need <= *cap) return true;
  int c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *np = tpu_realloc_or_null(*p, (size_t)c * elem);
  if (np == NULL) return false;
  *p = np;
  *cap = c;
  return true;
}

/* Marks |s| as used by the trace and names it in the trace's key: its index
 * among the trace's storages, after, on its first use, its size and buffer
 * type (as its first reader fixes it; nothing outside the trace changes
 * them before the cut). NULL (a Python number, an absent tensor) is -1. */
static bool track(tpu_storage *s) {
  if (!grow((void **)&g.held, &g.cap_held, g.num_held + 1, sizeof *g.held)) return false;
  s->trace.slot = g.num_held;
  s->trace.readers = 0;
  s->trace.reader = -1;
  g.held[g.num_held++] = s;
  __atomic_store_n(&s->trace.held, 1, __ATOMIC_RELEASE);
  __atomic_add_fetch(&tpu_trace_pending, 1, __ATOMIC_ACQ_REL);
  return true;
}

/* Counts the calls that read |s| while no call of the trace writes it
 * (MAX_READERS); a written storage is one parameter (-1). */
static void count_use(tpu_storage *s, bool writes) {
  if (writes) {
    s->trace.readers = -1;
  } else if (s->trace.readers >= 0 && s->trace.reader != g.n) {
    s->trace.reader = g.n;
    if (++s->trace.readers > g.max_readers) g.max_readers = s->trace.readers;
  }
}

static bool hold(tpu_storage *s, tpu_dtype_t reader, bool writes) {
  if (s == NULL) {
    tpu_strbuf_put_i64(&g.key, -1);
    return true;
  }
  if (!s->trace.held) {
    if (!track(s)) return false;
    tpu_hlo_type scratch;
    const tpu_hlo_type *t = tpu_storage_type_in(s, reader, &scratch);
    int64_t head[4] = {-2, s->nbytes, t->dtype, t->rank};
    tpu_strbuf_append(&g.key, head, sizeof head);
    tpu_strbuf_append(&g.key, t->dims, (size_t)t->rank * sizeof(int64_t));
  }
  count_use(s, writes);
  tpu_strbuf_put_i64(&g.key, s->trace.slot);
  return true;
}

/* A call's new output: its size and type follow from the call's entry,
 * which the key names, and its slot from the storages before it. */
static bool hold_new(tpu_storage *s) {
  tpu_strbuf_put_i64(&g.key, -4);
  if (!track(s)) return false;
  count_use(s, true);
  return true;
}

/* |src| with the sizes and strides it has (a view holds room for PyTorch's
 * 64 dims: most of it unused). */
static void copy_view(tpu_view *dst, const tpu_view *src) {
  dst->dtype = src->dtype;
  dst->rank = src->rank;
  dst->offset = src->offset;
  memcpy(dst->sizes, src->sizes, (size_t)src->rank * sizeof *src->sizes);
  memcpy(dst->strides, src->strides, (size_t)src->rank * sizeof *src->strides);
}

static bool copy_ref(tpu_tensor_ref *dst, const tpu_tensor_ref *src, bool writes) {
  dst->storage = src->storage;
  copy_view(&dst->view, &src->view);
  dst->host_scalar = src->host_scalar;
  dst->wrapped_number = src->wrapped_number;
  dst->conj = src->conj;
  dst->neg = src->neg;
  if (src->host_scalar != NULL) {
    dst->host_scalar = arena_copy(src->host_scalar, tpu_dtype_size(src->view.dtype));
    if (dst->host_scalar == NULL) return false;
  }
  return hold(src->storage, src->view.dtype, writes);
}

/* A copy of |src| whose pointers point into the arena (a tensor's sizes and
 * strides are fixed at the cut: |g.args| moves as it grows). */
static bool copy_arg(tpu_eager_arg *dst, const tpu_eager_arg *src) {
  dst->lower = src->lower;
  dst->items = src->items;
  dst->mutated = src->mutated;
  tpu_lower_arg *l = &dst->lower;
  const tpu_lower_arg *sl = &src->lower;
  switch (l->kind) {
    case TPU_ARG_TENSOR:
      return copy_ref(&dst->tensor, &src->tensor, src->mutated);
    case TPU_ARG_TENSOR_LIST: {
      tpu_tensor_ref *items = arena_alloc((size_t)(l->n ? l->n : 1) * sizeof *items);
      int *ranks = arena_alloc((size_t)(l->n ? l->n : 1) * sizeof *ranks);
      const int64_t **sizes = arena_alloc((size_t)(l->n ? l->n : 1) * sizeof *sizes);
      tpu_dtype_t *dtypes = arena_copy(sl->item_dtypes, (size_t)l->n * sizeof *dtypes);
      if (items == NULL || ranks == NULL || sizes == NULL || dtypes == NULL) return false;
      for (int i = 0; i < l->n; i++) {
        if (!copy_ref(&items[i], &src->items[i], src->mutated)) return false;
        ranks[i] = sl->item_ranks[i];
        sizes[i] = items[i].view.sizes;
      }
      dst->items = items;
      l->item_dtypes = dtypes;
      l->item_ranks = ranks;
      l->item_sizes = (const int64_t *const *)sizes;
      return true;
    }
    case TPU_ARG_SCALAR_LIST:
      l->item_dtypes = arena_copy(sl->item_dtypes, (size_t)l->n * sizeof *l->item_dtypes);
      if (l->dtype == TPU_S64) l->ints = arena_copy(sl->ints, tpu_scalar_list_bytes(sl));
      else l->floats = arena_copy(sl->floats, tpu_scalar_list_bytes(sl));
      return l->item_dtypes != NULL && tpu_scalar_list_values(l) != NULL;
    case TPU_ARG_INT_LIST:
      return (l->ints = arena_copy(sl->ints, (size_t)l->n * sizeof *l->ints)) != NULL;
    case TPU_ARG_FLOAT_LIST:
      return (l->floats = arena_copy(sl->floats, (size_t)l->n * sizeof *l->floats)) != NULL;
    case TPU_ARG_BOOL_LIST:
      return (l->bools = arena_copy(sl->bools, (size_t)l->n * sizeof *l->bools)) != NULL;
    case TPU_ARG_STRING:
      return (l->s = arena_copy(sl->s, strlen(sl->s) + 1)) != NULL;
    default:
      return true;
  }
}

/* Recorded call |r| as strict eager would run it. */
static tpu_eager_call rec_call(const rec *r) {
  tpu_eager_call c = {
      .op = r->op,
      .num_args = r->num_args,
      .args = g.args + r->base,
      .common_dtype = tpu_eager_entry_common_dtype(r->entry), /* a hit's call has none */
      .item_common_dtypes = tpu_eager_entry_item_common_dtypes(r->entry),
      .precision = r->precision,
      .device = g.device,
  };
  if (r->rng >= 0) {
    c.rng_seed = g.rng[2 * r->rng];
    c.rng_offset = g.rng[2 * r->rng + 1];
  }
  return c;
}

/* Builds the program of the whole trace, for the context its calls' entries
 * were built for (one per process). */
static tpu_status_t build(const tpu_eager_call *all, tpu_eager_entry **out) {
  char name[64];
  snprintf(name, sizeof name, "fused_%d_calls", g.n);
  tpu_program *p = NULL;
  TPU_RETURN_IF_ERROR(tpu_program_new(tpu_eager_entry_context(g.recs[0].entry), all, name, &p));
  /* fused_exact off lets XLA fuse across calls (faster, not bit-identical
   * to strict eager). */
  tpu_program_set_fused(p, tpu_eager_context_get()->options.fused_exact);
  tpu_status_t st = NULL;
  for (int i = 0; i < g.n && st == NULL; i++) {
    const rec *r = &g.recs[i];
    tpu_eager_call c = rec_call(r);
    tpu_program_begin_call(p, r->base, r->num_args);
    const bool per_item = r->op->num_item_args > 0;
    for (int k = per_item ? 0 : -1, end = per_item ? tpu_eager_call_items(&c) : 0; k < end && st == NULL; k++)
      st = tpu_eager_apply(p, &c, k, tpu_eager_entry_metas(r->entry), r->num_args);
    tpu_program_end_call(p);
  }
  if (st == NULL) {
    tpu_program_set_base(p, 0);
    for (int a = 0; a < all->num_args; a++) {
      const tpu_eager_arg *arg = &all->args[a];
      if (arg->lower.kind == TPU_ARG_TENSOR && arg->tensor.storage != NULL && arg->tensor.storage->trace.dropped)
        tpu_program_discard(p, a, -1);
      if (arg->lower.kind == TPU_ARG_TENSOR_LIST)
        for (int i = 0; i < arg->lower.n; i++)
          if (arg->items[i].storage != NULL && arg->items[i].storage->trace.dropped) tpu_program_discard(p, a, i);
    }
    st = tpu_program_finish(p, out);
  }
  if (st == NULL) {
    /* What an error found when its results are read names: the ops. */
    char writer[256];
    int len = snprintf(writer, sizeof writer, "%s", g.recs[0].op->name);
    for (int i = 1; i < g.n && i < 4 && len < (int)sizeof writer; i++)
      len += snprintf(writer + len, sizeof writer - (size_t)len, ", %s", g.recs[i].op->name);
    if (len < (int)sizeof writer)
      snprintf(writer + len, sizeof writer - (size_t)len, "%s (a fused program of %d calls)", g.n > 4 ? ", ..." : "",
               g.n);
    (*out)->writer = tpu_str_intern(writer);
  }
  tpu_program_free(p);
  return st;
}

/* The key of the whole trace, built as calls are recorded (tpu_trace_record,
 * hold): per call its one-op entry (by serial: the entry's own key holds
 * everything about the call alone) and per tensor the storage it names
 * (which calls share storages, and each storage's size and type); at the
 * cut, the count of calls and which storages nobody holds any more. */
static bool trace_key(uint64_t *out_hash) {
  tpu_strbuf_put_i64(&g.key, g.n);
  for (int i = 0; i < g.num_held; i++) tpu_strbuf_put_i64(&g.key, g.held[i]->trace.dropped);
  *out_hash = tpu_hash64(g.key.data, g.key.len, 0);
  return !g.key.failed;
}

static int parked_index(uint64_t thread) {
  for (int i = 0; i < g.num_parked; i++)
    if (g.parked[i].thread == thread) return i;
  return -1;
}

/* Keeps |st| for |thread| (lock held). Out of host memory, it is lost. */
static void park(uint64_t thread, tpu_status_t st) {
  if (!grow((void **)&g.parked, &g.cap_parked, g.num_parked + 1, sizeof *g.parked)) {
    tpu_status_free(st);
    return;
  }
  g.parked[g.num_parked++] = (parked){thread, st};
  __atomic_store_n(&g_any_parked, g.num_parked, __ATOMIC_RELEASE);
}

static tpu_status_t take_parked(int i) {
  tpu_status_t st = g.parked[i].st;
  g.parked[i] = g.parked[--g.num_parked];
  __atomic_store_n(&g_any_parked, g.num_parked, __ATOMIC_RELEASE);
  return st;
}

/* The calling thread's parked error, taken (lock held); else one of the
 * calls recorded for others (a backward it started: replay parks those
 * only for the cut that follows). */
static tpu_status_t unpark_locked(void) {
  int i = parked_index(thread_serial());
  tpu_status_t st = i >= 0 ? take_parked(i) : NULL;
  int others = parked_index(FOR_OTHERS);
  if (others >= 0) {
    tpu_status_t theirs = take_parked(others);
    if (st == NULL) st = theirs;
    else tpu_status_free(theirs);
  }
  return st;
}

static tpu_status_t unpark(void) {
  if (__atomic_load_n(&g_any_parked, __ATOMIC_ACQUIRE) == 0) return NULL;
  pthread_mutex_lock(&g.lock);
  tpu_status_t st = unpark_locked();
  pthread_mutex_unlock(&g.lock);
  return st;
}

#define NEVER_COMPUTED "this tensor's value was never computed: "

/* Marks the storages call |r| makes as having no value: it failed with
 * |error|, or did not run after its thread's call that did. Strict eager
 * raises at the failing call, so a program never holds these tensors
 * there; fused eager handed them out, and a read raises instead of
 * returning whatever the memory held. A call that failed by reading such a
 * storage passes its message on as it is. */
static void poison_outputs(const rec *r, const char *error) {
  char why[1280];
  if (strncmp(error, NEVER_COMPUTED, strlen(NEVER_COMPUTED)) == 0)
    snprintf(why, sizeof why, "%s", error);
  else
    snprintf(why, sizeof why,
             NEVER_COMPUTED "fused eager recorded the %s call that makes it after a call that failed (%s), "
             "where strict eager raises",
             r->op->name, error);
  for (int o = 0; o < r->num_outs; o++) {
    const tpu_eager_arg *a = &g.args[r->base + r->num_args + o];
    if (a->lower.kind != TPU_ARG_TENSOR) continue;
    tpu_status_t st = tpu_storage_poison(a->tensor.storage, why);
    if (st != NULL) park(r->thread, st); /* out of memory: the thread's error, not this one's */
  }
}

/* The calls one by one, on their own programs: what strict eager does. A
 * thread's calls stop at its first that fails (strict raises there, and
 * the thread's later calls would not have been made); its error is parked
 * for it, and other threads' calls go on. What the failing call and those
 * after it would have made has no value (poison_outputs). */
static void replay(void) {
  for (int i = 0; i < g.n; i++) {
    const rec *r = &g.recs[i];
    int parked = parked_index(r->thread);
    if (parked >= 0) {
      poison_outputs(r, tpu_status_message(g.parked[parked].st));
      continue;
    }
    tpu_eager_call c = rec_call(r);
    tpu_storage *outs_small[16], **outs = r->num_outs <= 16 ? outs_small : tpu_alloc_or_null((size_t)r->num_outs * sizeof *outs);
    if (outs == NULL) {
      park(r->thread, tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory"));
      continue;
    }
    /* A storage PyTorch let go of still gets its value: a later call may
     * read it (reset frees it). */
    for (int o = 0; o < r->num_outs; o++) {
      const tpu_eager_arg *a = &g.args[r->base + r->num_args + o];
      outs[o] = a->lower.kind == TPU_ARG_TENSOR ? a->tensor.storage : NULL;
    }
    tpu_status_t st = tpu_eager_execute_raw(r->entry, &c, outs);
    if (outs != outs_small) free(outs);
    if (st != NULL) {
      poison_outputs(r, tpu_status_message(st));
      park(r->thread, st);
    }
  }
}

static void reset(bool loop) {
  for (int i = 0; i < g.num_held; i++) {
    tpu_storage *s = g.held[i];
    __atomic_store_n(&s->trace.held, 0, __ATOMIC_RELEASE);
    if (s->trace.dropped) tpu_storage_destroy(s);
  }
  __atomic_sub_fetch(&tpu_trace_pending, g.num_held, __ATOMIC_ACQ_REL);
  for (int i = 0; i < g.n; i++) tpu_eager_entry_release(g.recs[i].entry);
  g.n = g.num_args = g.num_held = g.num_rng = g.max_readers = 0;
  tpu_strbuf_clear(&g.key);
  arena_reset();
  if (!loop) g.stream = g.period = g.matched = g.loop_calls = 0;
}

/* Runs the trace; lock held. Returns the calling thread's error: from its
 * own calls in this trace, else one an earlier cut (of any thread) parked
 * for it. */
static tpu_status_t flush_locked(tpu_cut_reason why) {
  if (g.n == 0) {
    if (g.num_held > 0) reset(false); /* a call that failed to record */
    return unpark_locked();
  }
  tpu_stats_op_bump(TPU_OPSTAT_CUT, tpu_cut_reason_name(why));
  if (tpu_profile_enabled()) {
    char detail[64];
    snprintf(detail, sizeof detail, "%s, %d ops", tpu_cut_reason_name(why), g.n);
    tpu_profile_instant("fused eager cut", detail);
  }
  tpu_stats_add(TPU_STAT_FUSED_PROGRAMS, 1);
  tpu_stats_max(TPU_STAT_FUSED_MAX_OPS, (uint64_t)g.n);
  for (int a = 0; a < g.num_args; a++)
    if (g.args[a].lower.kind == TPU_ARG_TENSOR) {
      g.args[a].lower.sizes = g.args[a].tensor.view.sizes;
      g.args[a].lower.strides = g.args[a].tensor.view.strides;
    }
  tpu_eager_call all = {.num_args = g.num_args, .args = g.args, .device = g.device, .rng_states = g.rng};
  tpu_status_t st = NULL;
  tpu_eager_entry *e = NULL;
  uint64_t h = 0;
  bool check_failed = false;
  if (trace_key(&h)) e = tpu_eager_cache_find(g.key.data, g.key.len, h);
  if (e != NULL) {
    tpu_stats_add(TPU_STAT_TRACE_HITS, 1);
  } else {
    tpu_stats_add(TPU_STAT_TRACE_MISSES, 1);
    st = build(&all, &e);
    if (st == NULL && !g.key.failed) {
      e = tpu_eager_cache_insert(e, g.key.data, g.key.len, h);
      if (e == NULL) st = tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    } else if (st == NULL) { /* no key (out of memory): run it once, uncached */
      st = tpu_eager_execute_checked(e, &all, NULL, &check_failed);
      tpu_eager_entry_free(e);
      e = NULL;
      if (st == NULL) goto done;
    }
  }
  if (st == NULL) st = tpu_eager_execute_checked(e, &all, NULL, &check_failed);
  tpu_eager_entry_release(e);
  if (st != NULL) { /* strict eager's state, and its first error */
    if (!check_failed) { /* the program's failure, not the data's */
      tpu_stats_add(TPU_STAT_FUSED_REPLAYS, 1);
      snprintf(g.last_failure, sizeof g.last_failure, "%s", tpu_status_message(st));
    }
    tpu_status_free(st);
    st = NULL;
    replay();
  }
done:
  reset(why == TPU_CUT_LOOP);
  return st != NULL ? st : unpark_locked();
}

tpu_status_t tpu_eager_flush(tpu_cut_reason why) {
  if (__atomic_load_n(&tpu_trace_pending, __ATOMIC_ACQUIRE) == 0 && g.n == 0) return unpark();
  pthread_mutex_lock(&g.lock);
  tpu_status_t st = flush_locked(why);
  pthread_mutex_unlock(&g.lock);
  return st;
}

tpu_status_t tpu_storage_settle(tpu_storage *s, tpu_cut_reason why) {
  tpu_status_t st;
  if (s == NULL || !__atomic_load_n(&s->trace.held, __ATOMIC_ACQUIRE)) {
    st = unpark();
  } else {
    pthread_mutex_lock(&g.lock);
    st = s->trace.held ? flush_locked(why) : unpark_locked();
    pthread_mutex_unlock(&g.lock);
  }
  if (st == NULL && s != NULL && why == TPU_CUT_HOST_READ) st = tpu_storage_check_value(s);
  return st;
}

bool tpu_trace_drop(tpu_storage *s) {
  pthread_mutex_lock(&g.lock);
  bool held = s->trace.held;
  if (held) s->trace.dropped = true;
  pthread_mutex_unlock(&g.lock);
  return held;
}

static bool ref_traced(const tpu_tensor_ref *r) {
  return r->storage != NULL && __atomic_load_n(&r->storage->trace.held, __ATOMIC_ACQUIRE);
}

bool tpu_trace_call_touches(const tpu_eager_call *call) {
  if (__atomic_load_n(&tpu_trace_pending, __ATOMIC_ACQUIRE) == 0) return false;
  for (int a = 0; a < call->num_args; a++) {
    const tpu_eager_arg *arg = &call->args[a];
    if (arg->lower.kind == TPU_ARG_TENSOR && ref_traced(&arg->tensor)) return true;
    if (arg->lower.kind == TPU_ARG_TENSOR_LIST)
      for (int i = 0; i < arg->lower.n; i++)
        if (ref_traced(&arg->items[i])) return true;
  }
  return false;
}

tpu_status_t tpu_trace_settle_call(const tpu_eager_call *call, tpu_cut_reason why) {
  if (!tpu_trace_call_touches(call)) return unpark();
  return tpu_eager_flush(why);
}

/* Loop detection, after call |h| was recorded: the smallest period the
 * recent calls repeat with; once a whole period repeated, traces hold whole
 * periods (at least MIN_LOOP_CALLS calls), so that every iteration of a
 * loop without a sync records the same trace. */
static void note_call(uint64_t h) {
  int64_t i = g.stream;
  if (g.period > 0) {
    if (g.history[(i - g.period) % HISTORY] == h) {
      g.matched++;
    } else {
      g.period = g.matched = g.loop_calls = 0;
    }
  }
  if (g.period == 0)
    for (int d = 1; d <= MAX_PERIOD && d <= i; d++)
      if (g.history[(i - d) % HISTORY] == h) {
        g.period = d;
        g.matched = 1;
        break;
      }
  g.history[i % HISTORY] = h;
  g.stream++;
  if (g.period > 0 && g.matched >= g.period && g.loop_calls == 0) {
    int n = (MIN_LOOP_CALLS + g.period - 1) / g.period * g.period;
    g.loop_calls = n <= max_calls() ? n : 0;
  }
}

tpu_status_t tpu_trace_record(tpu_eager_entry *e, const tpu_eager_call *call, tpu_storage *const *new_outputs) {
  /* A forked child refuses at the call, as strict's execute does, not at a
   * later cut; a thread whose earlier call failed at another thread's cut
   * raises it here. */
  TPU_RETURN_IF_ERROR(tpu_runtime_check_fork());
  TPU_RETURN_IF_ERROR(unpark());
  const tpu_eager_op *op = call->op;
  const bool rng = tpu_eager_entry_uses_rng(e);
  if (rng && op->num_item_args > 0) { /* items draw states strict mixes per item: run it as strict does */
    TPU_RETURN_IF_ERROR(tpu_trace_settle_call(call, TPU_CUT_ALONE));
    return tpu_eager_execute(e, call, new_outputs);
  }
  pthread_mutex_lock(&g.lock);
  tpu_status_t st = NULL;
  if (g.n > 0 && call->device != g.device) st = flush_locked(TPU_CUT_DEVICE);
  const int items = op->num_item_args > 0 ? tpu_eager_call_items(call) : 1;
  const int num_outs = items * op->num_outputs;
  const int need = g.num_args + call->num_args + num_outs;
  if (st == NULL && (!grow((void **)&g.recs, &g.cap, g.n + 1, sizeof *g.recs) ||
                     !grow((void **)&g.args, &g.cap_args, need, sizeof *g.args) ||
                     (rng && !grow((void **)&g.rng, &g.cap_rng, 2 * (g.num_rng + 1), sizeof *g.rng))))
    st = tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  if (st != NULL) {
    pthread_mutex_unlock(&g.lock);
    return st;
  }
  if (g.n == 0) g.device = call->device;
  if (g.key.len == 0) tpu_strbuf_put_i64(&g.key, -1); /* apart from one-op keys, which begin with an op id */
  tpu_strbuf_put_i64(&g.key, (int64_t)tpu_eager_entry_serial(e));
  rec *r = &g.recs[g.n];
  *r = (rec){
      .entry = e,
      .op = op,
      .base = g.num_args,
      .num_args = call->num_args,
      .num_outs = num_outs,
      .precision = call->precision,
      .rng = -1,
      .thread = thread_serial(),
  };
  bool ok = true;
  for (int a = 0; a < call->num_args && ok; a++) ok = copy_arg(&g.args[r->base + a], &call->args[a]);
  for (int o = 0; o < num_outs && ok; o++) {
    tpu_eager_arg *a = &g.args[r->base + call->num_args + o];
    tpu_eager_arg_clear(a);
    a->mutated = true;
    const tpu_eager_out_meta *m = tpu_eager_entry_meta(e, o);
    if (new_outputs == NULL || new_outputs[o] == NULL || m->dtype == TPU_INVALID) {
      tpu_strbuf_put_i64(&g.key, -1);
      continue;
    }
    a->lower.kind = TPU_ARG_TENSOR;
    a->lower.dtype = m->dtype;
    a->lower.rank = m->rank;
    a->tensor.storage = new_outputs[o];
    a->tensor.view.dtype = m->dtype;
    a->tensor.view.rank = m->rank;
    memcpy(a->tensor.view.sizes, m->sizes, (size_t)m->rank * sizeof *m->sizes);
    memcpy(a->tensor.view.strides, m->strides, (size_t)m->rank * sizeof *m->strides);
    ok = hold_new(new_outputs[o]);
  }
  if (!ok) { /* what is held stays held until the next cut; this call runs now */
    g.key.failed = true; /* the key holds part of this call */
    pthread_mutex_unlock(&g.lock);
    TPU_RETURN_IF_ERROR(tpu_eager_flush(TPU_CUT_OTHER));
    return tpu_eager_execute(e, call, new_outputs);
  }
  if (rng) {
    r->rng = g.num_rng++;
    g.rng[2 * r->rng] = call->rng_seed;
    g.rng[2 * r->rng + 1] = call->rng_offset;
  }
  tpu_eager_entry_retain(e);
  g.num_args = need;
  g.n++;
  tpu_stats_add(TPU_STAT_FUSED_OPS, 1);
  tpu_stats_add(TPU_STAT_OPS, 1);
  note_call(tpu_eager_entry_hash(e));
  if (!g.no_loops && g.loop_calls > 0 && g.n >= g.loop_calls && g.n % g.period == 0) st = flush_locked(TPU_CUT_LOOP);
  else if (g.n >= max_calls() || g.max_readers >= MAX_READERS) st = flush_locked(TPU_CUT_SIZE);
  pthread_mutex_unlock(&g.lock);
  return st;
}
