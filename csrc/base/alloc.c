/* Host allocations as statuses, with the test hook that fails one.
 *
 * The hook costs one relaxed atomic load per allocation while disarmed. */
#include "base/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_long g_countdown; /* > 0: allocations until the injected failure */
static atomic_bool g_injected;

void tpu_alloc_fail_nth(long n) {
  atomic_store(&g_injected, false);
  atomic_store(&g_countdown, n > 0 ? n : 0);
}

bool tpu_alloc_failure_injected(void) { return atomic_load(&g_injected); }

/* Whether this allocation is the one to fail. */
static bool inject(void) {
  if (atomic_load_explicit(&g_countdown, memory_order_relaxed) == 0) return false;
  long left = atomic_fetch_sub(&g_countdown, 1);
  if (left == 1) {
    atomic_store(&g_injected, true);
    return true;
  }
  if (left <= 0) atomic_fetch_add(&g_countdown, 1); /* lost a race with the last one */
  return false;
}

static tpu_status_t out_of_memory(size_t size) {
  return tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory (allocating %zu bytes)", size);
}

void *tpu_alloc_or_null(size_t size) { return inject() ? NULL : malloc(size ? size : 1); }

void *tpu_realloc_or_null(void *ptr, size_t size) { return inject() ? NULL : realloc(ptr, size ? size : 1); }

tpu_status_t tpu_alloc(size_t size, void **out_ptr) {
  *out_ptr = tpu_alloc_or_null(size);
  return *out_ptr == NULL ? out_of_memory(size) : NULL;
}

tpu_status_t tpu_alloc_zeroed(size_t count, size_t size, void **out_ptr) {
  *out_ptr = NULL;
  if (size != 0 && count > (size_t)-1 / size) return out_of_memory((size_t)-1);
  size_t n = count * size;
  void *p = inject() ? NULL : calloc(n ? n : 1, 1);
  if (p == NULL) return out_of_memory(n);
  *out_ptr = p;
  return NULL;
}

tpu_status_t tpu_realloc(void **inout_ptr, size_t size) {
  void *p = tpu_realloc_or_null(*inout_ptr, size);
  if (p == NULL) return out_of_memory(size);
  *inout_ptr = p;
  return NULL;
}

tpu_status_t tpu_strdup(const char *s, char **out_copy) {
  size_t n = strlen(s) + 1;
  tpu_status_t st = tpu_alloc(n, (void **)out_copy);
  if (st == NULL) memcpy(*out_copy, s, n);
  return st;
}

void tpu_free(void *ptr) { free(ptr); }
