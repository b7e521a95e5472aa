/* Storage boxes: the device buffer behind a PyTorch storage (see eager.h). */
#include <pthread.h>
#include <stdio.h>
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

/* What a device's storages may hold: |g_fraction| (1 unless
 * torch.tpu.set_per_process_memory_fraction set it) of its capacity, read
 * from the runtime at the first storage (-1: the plugin reports none, no
 * limit). The fraction changes under g_live_lock, the capacity is atomic. */
static double g_fraction[COUNTED_DEVICES];
static bool g_fraction_set[COUNTED_DEVICES];
static int64_t g_capacity[COUNTED_DEVICES];
static bool g_capacity_read[COUNTED_DEVICES];

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

/* "5.96 GiB", as PyTorch's CUDA allocator writes sizes. */
static void format_size(char *out, size_t cap, int64_t n) {
  if (n <= 1024) snprintf(out, cap, "%lld bytes", (long long)n);
  else if (n <= 1 << 20) snprintf(out, cap, "%.2f KiB", n / 1024.0);
  else if (n <= 1 << 30) snprintf(out, cap, "%.2f MiB", n / 1048576.0);
  else snprintf(out, cap, "%.2f GiB", n / 1073741824.0);
}

/* The device's capacity in bytes (-1: unknown), read once (two threads may
 * both read it; they store the same number). */
static int64_t capacity(const tpu_eager_context *ctx, int device) {
  if (!counted(device) || ctx == NULL) return -1;
  if (__atomic_load_n(&g_capacity_read[device], __ATOMIC_ACQUIRE))
    return __atomic_load_n(&g_capacity[device], __ATOMIC_RELAXED);
  int64_t free_bytes = 0, total = -1;
  tpu_status_t st = tpu_runtime_memory_info(ctx->rt, device, &free_bytes, &total);
  if (st != NULL) total = -1;
  tpu_status_free(st);
  __atomic_store_n(&g_capacity[device], total, __ATOMIC_RELAXED);
  __atomic_store_n(&g_capacity_read[device], true, __ATOMIC_RELEASE);
  return total;
}

static double fraction_locked(int device) { return g_fraction_set[device] ? g_fraction[device] : 1.0; }

/* The bytes |device|'s storages may hold (-1: no limit); g_live_lock held. */
static int64_t limit_locked(int device) {
  if (!counted(device) || !__atomic_load_n(&g_capacity_read[device], __ATOMIC_ACQUIRE)) return -1;
  int64_t total = __atomic_load_n(&g_capacity[device], __ATOMIC_RELAXED);
  if (total < 0) return -1;
  return (int64_t)(fraction_locked(device) * (double)total);
}

/* The error of a storage that does not fit, worded as CUDA's allocator words
 * it (libraries look for " out of memory." in it). */
static tpu_status_t out_of_memory(const tpu_eager_context *ctx, int device, int64_t nbytes, int64_t in_use,
                                  int64_t limit, int64_t total) {
  int64_t free_bytes = 0, unused = 0;
  tpu_status_t st = tpu_runtime_memory_info(ctx->rt, device, &free_bytes, &unused);
  if (st != NULL) free_bytes = total - in_use;
  tpu_status_free(st);
  char want[32], cap[32], free_s[32], allowed[64] = "", used[32];
  format_size(want, sizeof want, nbytes);
  format_size(cap, sizeof cap, total);
  format_size(free_s, sizeof free_s, free_bytes);
  format_size(used, sizeof used, in_use);
  if (limit < total) {
    format_size(allowed, 32, limit);
    strcat(allowed, " allowed; ");
  }
  return tpu_status_new(TPU_ERR_OUT_OF_MEMORY,
                        "tpu out of memory. Tried to allocate %s. tpu %d has a total capacity of %s of which %s is "
                        "free. %sOf the allocated memory %s is allocated by PyTorch, and 0 bytes is reserved by "
                        "PyTorch but unallocated. See torch.tpu.set_per_process_memory_fraction and "
                        "torch.tpu.memory_summary().",
                        want, device, cap, free_s, allowed, used);
}

tpu_status_t tpu_storage_new(const tpu_eager_context *ctx, int device, int64_t nbytes, tpu_storage **out) {
  *out = NULL;
  int64_t total = capacity(ctx, device);
  tpu_storage *s = tpu_alloc_or_null(sizeof *s);
  if (s == NULL) return tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "tpu: out of host memory");
  memset(s, 0, sizeof *s);
  s->ctx = ctx;
  s->nbytes = nbytes;
  s->device = device;
  pthread_mutex_lock(&g_live_lock);
  int64_t limit = limit_locked(device), in_use = counted(device) ? g_stats[device][TPU_MEMORY_ALL][0].current : 0;
  if (limit >= 0 && nbytes > limit - in_use) {
    pthread_mutex_unlock(&g_live_lock);
    free(s);
    return out_of_memory(ctx, device, nbytes, in_use, limit, total);
  }
  count(device, nbytes, 1);
  s->live_prev = g_live_tail;
  if (g_live_tail != NULL) g_live_tail->live_next = s;
  else g_live_head = s;
  g_live_tail = s;
  pthread_mutex_unlock(&g_live_lock);
  *out = s;
  return NULL;
}

tpu_status_t tpu_storage_set_memory_fraction(const tpu_eager_context *ctx, int device, double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0))
    return tpu_status_new(TPU_ERR_VALUE, "Invalid fraction value: %g. Allowed range: 0~1", fraction);
  if (!counted(device)) return tpu_status_new(TPU_ERR_VALUE, "tpu %d: no memory statistics past device %d", device,
                                              COUNTED_DEVICES - 1);
  capacity(ctx, device);
  pthread_mutex_lock(&g_live_lock);
  g_fraction[device] = fraction;
  g_fraction_set[device] = true;
  pthread_mutex_unlock(&g_live_lock);
  return NULL;
}

double tpu_storage_memory_fraction(int device) {
  if (!counted(device)) return 1.0;
  pthread_mutex_lock(&g_live_lock);
  double f = fraction_locked(device);
  pthread_mutex_unlock(&g_live_lock);
  return f;
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
  if (__atomic_load_n(&s->trace.held, __ATOMIC_ACQUIRE) && tpu_trace_drop(s)) return;
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
  s->writer = NULL;
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

tpu_status_t tpu_storage_read_error(const tpu_storage *s, tpu_status_t st) {
  if (st == NULL || tpu_status_code(st) != TPU_ERR_OUT_OF_MEMORY || s->writer == NULL) return st;
  return tpu_status_annotate(st,
                             "tpu out of memory. %s ran out of memory while it ran (XLA's scratch memory inside "
                             "a program, which memory_allocated() does not count)",
                             s->writer);
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
  return tpu_status_annotate(st, "copying a storage of %lld bytes into one of %lld", (long long)src->nbytes,
                             (long long)dst->nbytes);
}
