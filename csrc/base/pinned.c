/* Pinned host memory (see pinned.h). The live blocks are a sorted array of
 * (start, size) under a lock: pin_memory makes a few blocks per batch and
 * is_pinned looks one address up, so a binary search over an array is all
 * it needs. Page-aligned blocks are what XLA's host transfers take without
 * an extra copy. */
#include "base/pinned.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

enum { PINNED_ALIGN = 4096 };

typedef struct block {
  uintptr_t start;
  size_t size;   /* the addresses it covers: at least 1 */
  size_t nbytes; /* what was asked for */
} block;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static block *g_blocks;
static size_t g_count, g_capacity, g_bytes;

/* The index of the first block starting after |addr|. Caller holds g_lock. */
static size_t upper_bound(uintptr_t addr) {
  size_t lo = 0, hi = g_count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (g_blocks[mid].start <= addr) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

void *tpu_pinned_alloc(size_t nbytes) {
  void *p = NULL;
  /* A zero-byte block still gets an address of its own, so that is_pinned holds. */
  if (posix_memalign(&p, PINNED_ALIGN, nbytes ? nbytes : 1) != 0) return NULL;
  pthread_mutex_lock(&g_lock);
  if (g_count == g_capacity) {
    size_t capacity = g_capacity ? 2 * g_capacity : 64;
    block *grown = tpu_realloc_or_null(g_blocks, capacity * sizeof *grown);
    if (grown == NULL) {
      pthread_mutex_unlock(&g_lock);
      free(p);
      return NULL;
    }
    g_blocks = grown;
    g_capacity = capacity;
  }
  size_t at = upper_bound((uintptr_t)p);
  memmove(&g_blocks[at + 1], &g_blocks[at], (g_count - at) * sizeof *g_blocks);
  g_blocks[at] = (block){(uintptr_t)p, nbytes ? nbytes : 1, nbytes};
  g_count++;
  g_bytes += nbytes;
  pthread_mutex_unlock(&g_lock);
  return p;
}

void tpu_pinned_free(void *p) {
  if (p == NULL) return;
  pthread_mutex_lock(&g_lock);
  size_t at = upper_bound((uintptr_t)p);
  if (at > 0 && g_blocks[at - 1].start == (uintptr_t)p) {
    g_bytes -= g_blocks[at - 1].nbytes;
    memmove(&g_blocks[at - 1], &g_blocks[at], (g_count - at) * sizeof *g_blocks);
    g_count--;
  }
  pthread_mutex_unlock(&g_lock);
  free(p);
}

bool tpu_pinned_contains(const void *ptr) {
  uintptr_t addr = (uintptr_t)ptr;
  pthread_mutex_lock(&g_lock);
  size_t at = upper_bound(addr);
  bool inside = at > 0 && addr - g_blocks[at - 1].start < g_blocks[at - 1].size;
  pthread_mutex_unlock(&g_lock);
  return inside;
}

void tpu_pinned_usage(size_t *out_blocks, size_t *out_bytes) {
  pthread_mutex_lock(&g_lock);
  *out_blocks = g_count;
  *out_bytes = g_bytes;
  pthread_mutex_unlock(&g_lock);
}
