/* Entries (internal.h): the flat view of a call that programs and entries
 * index storages by, an entry's compile (lazy or not, dumped when asked)
 * and its accessors. */
#include "eager/eager.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/compiles.h"
#include "base/stats.h"
#include "base/strbuf.h"
#include "eager/internal.h"
#include "runtime/compile_cache.h"

/* --- the flat view of a call ------------------------------------------------- */

bool tpu_ref_is_none(const tpu_tensor_ref *r) {
  return r->storage == NULL && r->host_scalar == NULL && r->view.dtype == TPU_INVALID;
}

void tpu_flat_release(flat_call *f) {
  if (f->refs != f->small) free(f->refs);
}

int tpu_flat_index(const flat_call *f, int arg, int item) {
  for (int i = 0; i < f->n; i++)
    if (f->refs[i].arg == arg && f->refs[i].item == item) return i;
  return -1;
}

tpu_status_t tpu_flatten_call(const tpu_eager_call *call, flat_call *f) {
  int total = 0;
  for (int a = 0; a < call->num_args; a++) {
    const tpu_eager_arg *arg = &call->args[a];
    if (arg->lower.kind == TPU_ARG_TENSOR) total++;
    else if (arg->lower.kind == TPU_ARG_TENSOR_LIST) total += arg->lower.n;
  }
  f->n = 0;
  f->refs = total <= 32 ? f->small : tpu_alloc_or_null((size_t)total * sizeof *f->refs);
  /* Long lists (an optimizer's hundreds of tensors) find shared storages
   * through a hash table of first refs instead of a scan. */
  size_t cap = 0;
  int *first = NULL;
  if (total > 32) {
    for (cap = 64; cap < (size_t)total * 2; cap *= 2) {
    }
    first = tpu_alloc_or_null(cap * sizeof *first);
    if (first != NULL) memset(first, 0xff, cap * sizeof *first);
  }
  if (f->refs == NULL || (total > 32 && first == NULL)) {
    free(first);
    tpu_flat_release(f);
    return tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  for (int a = 0; a < call->num_args; a++) {
    const tpu_eager_arg *arg = &call->args[a];
    int count = arg->lower.kind == TPU_ARG_TENSOR ? 1 : arg->lower.kind == TPU_ARG_TENSOR_LIST ? arg->lower.n : 0;
    for (int i = 0; i < count; i++) {
      ref_slot *r = &f->refs[f->n];
      r->arg = a;
      r->item = arg->lower.kind == TPU_ARG_TENSOR ? -1 : i;
      r->ref = arg->lower.kind == TPU_ARG_TENSOR ? &arg->tensor : &arg->items[i];
      r->slot = -1;
      if (r->ref->storage != NULL && first != NULL) {
        size_t h = (size_t)(((uintptr_t)r->ref->storage >> 4) * 0x9e3779b97f4a7c15ULL) & (cap - 1);
        while (first[h] >= 0 && f->refs[first[h]].ref->storage != r->ref->storage) h = (h + 1) & (cap - 1);
        if (first[h] < 0) first[h] = f->n;
        r->slot = first[h];
      } else if (r->ref->storage != NULL) {
        for (int j = 0; j < f->n; j++)
          if (f->refs[j].ref->storage == r->ref->storage) {
            r->slot = f->refs[j].slot;
            break;
          }
        if (r->slot < 0) r->slot = f->n;
      }
      f->n++;
    }
  }
  free(first);
  return NULL;
}

/* --- entries ---------------------------------------------------------------------- */

void tpu_eager_entry_free(tpu_eager_entry *e) {
  if (e == NULL) return;
  tpu_executable_destroy(e->ctx->rt, e->exe);
  free(e->name);
  free(e->signature);
  free(e->text);
  free(e->item_common_dtypes);
  free(e->params);
  free(e->donate);
  free(e->results);
  free(e->meta);
  free(e);
}

const tpu_eager_out_meta *tpu_eager_entry_meta(const tpu_eager_entry *e, int i) {
  static const tpu_eager_out_meta none = {.dtype = TPU_INVALID};
  return i < e->num_meta ? &e->meta[i] : &none;
}

const tpu_eager_out_meta *tpu_eager_entry_metas(const tpu_eager_entry *e) { return e->meta; }

bool tpu_eager_entry_set_dtypes(tpu_eager_entry *e, tpu_dtype_t common, const tpu_dtype_t *items, int n) {
  e->common_dtype = common;
  if (items == NULL) return true;
  e->item_common_dtypes = tpu_alloc_or_null((size_t)n * sizeof *items);
  if (e->item_common_dtypes == NULL) return false;
  memcpy(e->item_common_dtypes, items, (size_t)n * sizeof *items);
  return true;
}

tpu_dtype_t tpu_eager_entry_common_dtype(const tpu_eager_entry *e) { return e->common_dtype; }
const tpu_dtype_t *tpu_eager_entry_item_common_dtypes(const tpu_eager_entry *e) { return e->item_common_dtypes; }

void tpu_eager_entry_retain(tpu_eager_entry *e) { atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed); }

bool tpu_eager_entry_unref(tpu_eager_entry *e) {
  return atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1;
}

void tpu_eager_entry_set_hash(tpu_eager_entry *e, uint64_t hash) { e->hash = hash; }

uint64_t tpu_eager_entry_hash(const tpu_eager_entry *e) { return e->hash; }
const tpu_eager_context *tpu_eager_entry_context(const tpu_eager_entry *e) { return e->ctx; }
uint64_t tpu_eager_entry_serial(const tpu_eager_entry *e) { return e->serial; }

bool tpu_eager_entry_uses_rng(const tpu_eager_entry *e) {
  for (int i = 0; i < e->num_params; i++)
    if (e->params[i].kind == SRC_RNG) return true;
  return false;
}

/* Writes |text| into |dir| (NULL: nowhere), named after the program. */
static void dump_program(const char *dir, const char *name, uint64_t hash, const char *text) {
  if (dir == NULL) return;
  char path[4096];
  char safe[128];
  size_t j = 0;
  for (const char *c = name; *c && j + 1 < sizeof safe; c++) safe[j++] = (*c == ':' || *c == '/') ? '_' : *c;
  safe[j] = '\0';
  snprintf(path, sizeof path, "%s/%s-%016llx.mlir", dir, safe, (unsigned long long)hash);
  FILE *fp = fopen(path, "w");
  if (fp != NULL) {
    fputs(text, fp);
    fclose(fp);
  }
}

tpu_status_t tpu_eager_entry_compile(tpu_eager_entry *e, const char *text) {
  dump_program(e->ctx->dump_dir, e->name, tpu_hash64(text, strlen(text), 0), text);
  bool loaded = false;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  TPU_RETURN_IF_ERROR(tpu_compile_cached(e->ctx->rt, text, strlen(text), &e->options, &e->exe, &loaded),
                      "%s: compiling its program", e->name);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  int64_t ns = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
  /* stats() and compiles() count the same programs and seconds. */
  tpu_stats_add(loaded ? TPU_STAT_CACHE_LOADS : TPU_STAT_CACHE_MISSES, 1);
  tpu_stats_add(TPU_STAT_COMPILE_NS, (uint64_t)ns);
  tpu_compiles_note(e->name, e->signature, loaded ? TPU_COMPILE_LOADED : TPU_COMPILE_COMPILED, 1e-9 * (double)ns);
  return NULL;
}

static pthread_mutex_t g_lazy_lock = PTHREAD_MUTEX_INITIALIZER;

tpu_status_t tpu_eager_entry_executable(const tpu_eager_entry *ce, tpu_executable **out) {
  tpu_eager_entry *e = (tpu_eager_entry *)ce;
  *out = __atomic_load_n(&e->exe, __ATOMIC_ACQUIRE);
  if (*out != NULL || e->text == NULL) return NULL;
  pthread_mutex_lock(&g_lazy_lock);
  tpu_status_t st = NULL;
  if (e->exe == NULL) {
    tpu_eager_entry tmp = *e; /* compiling writes exe; publish it atomically */
    tmp.exe = NULL;
    st = tpu_eager_entry_compile(&tmp, e->text);
    if (st == NULL) __atomic_store_n(&e->exe, tmp.exe, __ATOMIC_RELEASE);
  }
  *out = e->exe;
  pthread_mutex_unlock(&g_lazy_lock);
  return st;
}

