/* Storage boxes: the device buffer behind a PyTorch storage (see eager.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "eager/internal.h"

/* Per-device statistics of live storages, as PyTorch's allocators keep
 * them: bytes and counts, for all storages and for each pool (small: under
 * 1 MiB, as CUDA's allocator splits them); devices past the table go
 * uncounted. They change under the lock of the list of live storages, which
 * making and freeing a storage take anyway (atomics cost a fused chain of
 * small ops about 2% of its host time). */
enum { COUNTED_DEVICES = 64, SMALL_POOL_BYTES = 1 << 20 };
typedef struct counter {
  int64_t current, peak, allocated, freed;
} counter;
static counter g_stats[COUNTED_DEVICES][TPU_MEMORY_POOLS][2]; /* [device][pool][bytes, count] */

/* Every live storage, oldest first, for torch.tpu.memory_snapshot(). */
static pthread_mutex_t g_live_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_storage *g_live_head, *g_live_tail;

static bool counted(int device) { return device >= 0 && device < COUNTED_DEVICES; }

static void add(counter *c, int64_t delta) {
  c->current += delta;
  if (delta > 0) c->allocated += delta;
  else c->freed -= delta;
  if (c->current > c->peak) c->peak = c->current;
}

/* One storage of |nbytes| made (|sign| 1) or freed (-1); g_live_lock held. */
static void count(int device, int64_t nbytes, int sign) {
  if (!counted(device)) return;
  int pools[2] = {TPU_MEMORY_ALL, nbytes < SMALL_POOL_BYTES ? TPU_MEMORY_SMALL : TPU_MEMORY_LARGE};
  for (int i = 0; i < 2; i++) {
    add(&g_stats[device][pools[i]][0], sign * nbytes);
    add(&g_stats[device][pools[i]][1], sign);
  }
}

tpu_storage *tpu_storage_new(const tpu_eager_context *ctx, int device, int64_t nbytes) {
  tpu_storage *s = tpu_alloc_or_null(sizeof *s);
  if (s != NULL) {
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->nbytes = nbytes;
    s->device = device;
    pthread_mutex_lock(&g_live_lock);
    count(device, nbytes, 1);
    s->live_prev = g_live_tail;
    if (g_live_tail != NULL) g_live_tail->live_next = s;
    else g_live_head = s;
    g_live_tail = s;
    pthread_mutex_unlock(&g_live_lock);
  }
  return s;
}

void tpu_storage_each_live(int device, void (*fn)(void *ctx, const tpu_storage *s), void *ctx) {
  pthread_mutex_lock(&g_live_lock);
  for (const tpu_storage *s = g_live_head; s != NULL; s = s->live_next)
    if (device < 0 || s->device == device) fn(ctx, s);
  pthread_mutex_unlock(&g_live_lock);
}

int tpu_poisoned_storages;

static void clear_poison(tpu_storage *s) {
  char *old = __atomic_exchange_n(&s->poison, NULL, __ATOMIC_ACQ_REL);
  if (old == NULL) return;
  free(old);
  __atomic_sub_fetch(&tpu_poisoned_storages, 1, __ATOMIC_RELEASE);
}

void tpu_storage_destroy(tpu_storage *s) {
  tpu_buffer_destroy(s->ctx->rt, s->buf);
  clear_poison(s);
  free(s);
}

bool tpu_trace_drop(tpu_storage *s); /* trace.c */

void tpu_storage_free(tpu_storage *s) {
  if (s == NULL) return;
  pthread_mutex_lock(&g_live_lock);
  if (s->live_prev != NULL) s->live_prev->live_next = s->live_next;
  else g_live_head = s->live_next;
  if (s->live_next != NULL) s->live_next->live_prev = s->live_prev;
  else g_live_tail = s->live_prev;
  count(s->device, s->nbytes, -1);
  pthread_mutex_unlock(&g_live_lock);
  /* A storage a recorded call uses is freed by its trace. */
  if (__atomic_load_n(&s->traced, __ATOMIC_ACQUIRE) && tpu_trace_drop(s)) return;
  tpu_storage_destroy(s);
}

void tpu_storage_memory(int device, int pool, tpu_memory_stat *out_bytes, tpu_memory_stat *out_count) {
  tpu_memory_stat *out[2] = {out_bytes, out_count};
  pthread_mutex_lock(&g_live_lock);
  for (int k = 0; k < 2; k++) {
    *out[k] = (tpu_memory_stat){0};
    if (!counted(device) || pool < 0 || pool >= TPU_MEMORY_POOLS) continue;
    const counter *c = &g_stats[device][pool][k];
    *out[k] = (tpu_memory_stat){.current = c->current, .peak = c->peak, .allocated = c->allocated, .freed = c->freed};
  }
  pthread_mutex_unlock(&g_live_lock);
}

void tpu_storage_reset_memory(int device, bool peak, bool accumulated) {
  if (!counted(device)) return;
  pthread_mutex_lock(&g_live_lock);
  for (int p = 0; p < TPU_MEMORY_POOLS; p++)
    for (int k = 0; k < 2; k++) {
      counter *c = &g_stats[device][p][k];
      if (peak) c->peak = c->current;
      if (accumulated) c->allocated = c->freed = 0;
    }
  pthread_mutex_unlock(&g_live_lock);
}

void tpu_storage_set(tpu_storage *s, tpu_buffer *buf, const tpu_hlo_type *type) {
  /* Recorded calls that read the storage run before it changes; an error
   * of theirs is parked for the thread that made the failing call (trace.c),
   * which raises it at its next cut. */
  tpu_status_free(tpu_storage_settle(s, TPU_CUT_HOST_WRITE));
  tpu_storage_put(s, buf, type);
}

void tpu_storage_put(tpu_storage *s, tpu_buffer *buf, const tpu_hlo_type *type) {
  tpu_buffer *old = s->buf;
  s->buf = buf;
  s->type = *type;
  clear_poison(s); /* written: it has a value now */
  if (old != NULL && old != buf) tpu_buffer_destroy(s->ctx->rt, old);
}

tpu_hlo_type tpu_storage_type(const tpu_storage *s, tpu_dtype_t reader) {
  tpu_hlo_type t = tpu_hlo_make_type(reader, 0, NULL);
  return *tpu_storage_type_in(s, reader, &t);
}

const tpu_hlo_type *tpu_storage_type_in(const tpu_storage *s, tpu_dtype_t reader, tpu_hlo_type *scratch) {
  if (s->buf != NULL) return &s->type;
  int64_t n = s->nbytes / (int64_t)tpu_dtype_size(reader);
  scratch->dtype = reader; /* as tpu_storage_dense_type: a 1 has no dim */
  scratch->rank = n != 1;
  scratch->dims[0] = n;
  return scratch;
}

tpu_hlo_type tpu_storage_dense_type(tpu_dtype_t dtype, int rank, const int64_t *sizes) {
  tpu_hlo_type t = tpu_hlo_make_type(dtype, 0, NULL);
  for (int i = 0; i < rank; i++)
    if (sizes[i] != 1) t.dims[t.rank++] = sizes[i];
  return t;
}

tpu_status_t tpu_storage_poison(tpu_storage *s, const char *why) {
  char *copy = NULL;
  TPU_RETURN_IF_ERROR(tpu_strdup(why, &copy));
  clear_poison(s);
  __atomic_add_fetch(&tpu_poisoned_storages, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&s->poison, copy, __ATOMIC_RELEASE);
  return NULL;
}

tpu_status_t tpu_storage_check_value(const tpu_storage *s) {
  const char *why = __atomic_load_n(&s->poison, __ATOMIC_ACQUIRE);
  return why != NULL ? tpu_status_new(TPU_ERR_RUNTIME, "%s", why) : NULL;
}

tpu_status_t tpu_storage_materialize(tpu_storage *s, tpu_dtype_t dtype) {
  if (s->buf != NULL) return NULL;
  tpu_hlo_type t = tpu_storage_type(s, dtype);
  tpu_buffer *buf = NULL;
  TPU_RETURN_IF_ERROR(tpu_buffer_uninitialized(s->ctx->rt, s->device, dtype, t.dims, t.rank, &buf));
  tpu_storage_put(s, buf, &t);
  return NULL;
}

tpu_status_t tpu_storage_copy_prefix(tpu_storage *dst, const tpu_storage *src) {
  TPU_RETURN_IF_ERROR(tpu_storage_settle((tpu_storage *)src, TPU_CUT_OTHER));
  TPU_RETURN_IF_ERROR(tpu_storage_check_value(src));
  if (src->buf == NULL || dst->nbytes == 0) return NULL;
  tpu_runtime *rt = dst->ctx->rt;
  tpu_hlo_builder *b = NULL;
  TPU_RETURN_IF_ERROR(tpu_hlo_builder_create(&b));
  size_t es = tpu_dtype_size(src->type.dtype);
  tpu_dtype_t dt = (dst->nbytes % (int64_t)es == 0 && src->nbytes % (int64_t)es == 0) ? src->type.dtype : TPU_U8;
  int64_t n_dst = dst->nbytes / (int64_t)tpu_dtype_size(dt);
  tpu_hlo_value x = tpu_hlo_storage_as(b, tpu_hlo_param(b, &src->type, -1), dt);
  int64_t have = tpu_hlo_type_of(b, x)->dims[0];
  if (have >= n_dst) {
    x = tpu_hlo_slice_dim(b, x, 0, 0, n_dst, 1);
  } else {
    int64_t lo = 0, hi = n_dst - have;
    x = tpu_hlo_pad(b, x, tpu_hlo_scalar_i64(b, dt, 0), &lo, &hi, NULL);
  }
  tpu_hlo_type out_type = tpu_storage_dense_type(dt, 1, &n_dst);
  x = tpu_hlo_reshape(b, x, out_type.rank, out_type.dims);
  char *text = NULL;
  tpu_executable *exe = NULL;
  tpu_buffer *out = NULL;
  tpu_status_t st = tpu_hlo_finish(b, &x, 1, &text);
  if (st == NULL) st = tpu_executable_compile(rt, text, strlen(text), NULL, &exe);
  tpu_buffer *arg = src->buf;
  if (st == NULL) st = tpu_executable_execute(rt, exe, src->device, &arg, 1, NULL, true, &out);
  if (st == NULL) tpu_storage_put(dst, out, &out_type);
  tpu_executable_destroy(rt, exe);
  free(text);
  tpu_hlo_builder_destroy(b);
  return st;
}
