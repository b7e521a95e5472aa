/* The in-memory cache of eager entries (compiled one-op programs), by call
 * key (eager.c builds the keys): a hash table of nodes that each hold one
 * reference on their entry. Clearing it (at the program cap, when memory
 * maps run short, or on request) moves entries still held by callers to a
 * held list and frees the rest after their launches finished; an entry
 * released later waits on the unheld list for the next clear. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "eager/eager.h"
#include "eager/internal.h"
#include "eager/program.h"

/* The cache's own nodes: a key (held inline) and the entry it names. The
 * cache holds one reference on each entry it keeps. */
typedef struct cache_node {
  struct cache_node *next; /* its bucket's chain, or the held or unheld list */
  tpu_eager_entry *entry;
  uint64_t hash;
  size_t key_len;
  char key[];
} cache_node;

static pthread_mutex_t g_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_node **g_buckets;
static size_t g_num_buckets, g_num_entries;
/* Out of the cache (cleared), with callers still holding their entries. */
static cache_node *g_held;
/* Out of the cache, nobody holds their entries any more, whose last launch
 * may still run: freed by the next clear, after it waited for every launch. */
static cache_node *g_unheld;

static bool node_has_key(const cache_node *n, const char *key, size_t len, uint64_t h) {
  return n->hash == h && n->key_len == len && memcmp(n->key, key, len) == 0;
}

/* Whether the process holds more than half the memory maps Linux allows it
 * (vm.max_map_count, 65530 by default): a few loaded executables can use
 * many (a general eigendecomposition's loops map hundreds of regions), so
 * the count of programs alone does not bound them. False where /proc says
 * nothing. Reads /proc/self/maps: called per program loaded, not per call. */
static bool maps_running_out(void) {
  static long limit;
  if (limit == 0) {
    long max = 65530;
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    if (f != NULL) {
      if (fscanf(f, "%ld", &max) != 1 || max <= 0) max = 65530;
      fclose(f);
    }
    limit = max / 2;
  }
  FILE *f = fopen("/proc/self/maps", "r");
  if (f == NULL) return false;
  char buf[1 << 16];
  long lines = 0;
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < got; i++) lines += buf[i] == '\n';
  fclose(f);
  return lines > limit;
}

tpu_eager_entry *tpu_eager_cache_find(const char *key, size_t len, uint64_t h) {
  tpu_eager_entry *found = NULL;
  pthread_mutex_lock(&g_cache_lock);
  if (g_num_buckets != 0)
    for (const cache_node *n = g_buckets[h & (g_num_buckets - 1)]; n != NULL; n = n->next)
      if (node_has_key(n, key, len, h)) {
        found = n->entry;
        tpu_eager_entry_retain(found);
        break;
      }
  pthread_mutex_unlock(&g_cache_lock);
  return found;
}

/* Inserts |e| unless an equal key is present (a racing compile); returns the
 * entry that stays cached, NULL if out of memory. Lock held. */
static tpu_eager_entry *insert_locked(tpu_eager_entry *e, const char *key, size_t len, uint64_t h) {
  if (g_num_entries + 1 > g_num_buckets) {
    size_t nb = g_num_buckets ? g_num_buckets * 2 : 256;
    cache_node **b = tpu_alloc_or_null(nb * sizeof *b);
    if (b != NULL) {
      memset(b, 0, nb * sizeof *b);
      for (size_t i = 0; i < g_num_buckets; i++)
        for (cache_node *x = g_buckets[i], *next; x != NULL; x = next) {
          next = x->next;
          x->next = b[x->hash & (nb - 1)];
          b[x->hash & (nb - 1)] = x;
        }
      free(g_buckets);
      g_buckets = b;
      g_num_buckets = nb;
    }
  }
  if (g_num_buckets == 0) return NULL;
  cache_node **head = &g_buckets[h & (g_num_buckets - 1)];
  for (cache_node *x = *head; x != NULL; x = x->next)
    if (node_has_key(x, key, len, h)) return x->entry;
  cache_node *n = tpu_alloc_or_null(sizeof *n + len);
  if (n == NULL) return NULL;
  n->next = *head;
  n->entry = e;
  n->hash = h;
  n->key_len = len;
  memcpy(n->key, key, len);
  tpu_eager_entry_set_hash(e, h);
  *head = n;
  g_num_entries++;
  return e;
}

size_t tpu_eager_cache_size(void) {
  pthread_mutex_lock(&g_cache_lock);
  size_t n = g_num_entries;
  pthread_mutex_unlock(&g_cache_lock);
  return n;
}

void tpu_eager_entry_release(tpu_eager_entry *e) {
  if (e == NULL || !tpu_eager_entry_unref(e)) return;
  /* The cache holds a reference while it keeps an entry: this one left it,
   * and its node waits on the held list. */
  pthread_mutex_lock(&g_cache_lock);
  for (cache_node **link = &g_held; *link != NULL; link = &(*link)->next)
    if ((*link)->entry == e) {
      cache_node *n = *link;
      *link = n->next;
      n->next = g_unheld;
      g_unheld = n;
      break;
    }
  pthread_mutex_unlock(&g_cache_lock);
}

tpu_status_t tpu_eager_cache_clear(void) {
  cache_node *dead = NULL;
  pthread_mutex_lock(&g_cache_lock);
  for (size_t i = 0; i < g_num_buckets; i++) {
    for (cache_node *n = g_buckets[i], *next; n != NULL; n = next) {
      next = n->next;
      cache_node **list = tpu_eager_entry_unref(n->entry) ? &dead : &g_held; /* held: freed after its release */
      n->next = *list;
      *list = n;
    }
    g_buckets[i] = NULL;
  }
  g_num_entries = 0;
  for (cache_node *n = g_unheld, *next; n != NULL; n = next) {
    next = n->next;
    n->next = dead;
    dead = n;
  }
  g_unheld = NULL;
  pthread_mutex_unlock(&g_cache_lock);
  /* Nobody holds these, so every launch of theirs was made before now:
   * wait for those before their executables go. */
  tpu_status_t st = tpu_runtime_synchronize(tpu_eager_context_get()->rt, -1);
  for (cache_node *n = dead, *next; n != NULL; n = next) {
    next = n->next;
    tpu_eager_entry_free(n->entry);
    free(n);
  }
  return st;
}

tpu_eager_entry *tpu_eager_cache_insert(tpu_eager_entry *e, const char *key, size_t len, uint64_t h) {
  size_t cached = tpu_eager_cache_size();
  /* Each loaded executable maps a few memory regions and Linux allows about
   * 65k per process, so a process that keeps compiling new signatures (a
   * test suite, an op sweep) would run out; at the cap
   * (options.max_cached_programs), or when the maps pass half the limit,
   * the cache is emptied and programs come back from the disk cache as
   * they are used. */
  if (cached >= tpu_eager_context_get()->options.max_cached_programs || (cached >= 64 && maps_running_out())) {
    tpu_status_t st = tpu_eager_cache_clear();
    if (st != NULL) { /* a launch's error, which its own waiters report */
      tpu_status_free(st);
    }
  }
  pthread_mutex_lock(&g_cache_lock);
  tpu_eager_entry *kept = insert_locked(e, key, len, h);
  if (kept != NULL) tpu_eager_entry_retain(kept); /* the caller's */
  pthread_mutex_unlock(&g_cache_lock);
  if (kept != e) tpu_eager_entry_free(e);
  return kept;
}
