/* Growable buffer, the project's byte hash, interned strings. */
#include "base/strbuf.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

static bool reserve(tpu_strbuf *sb, size_t extra) {
  if (sb->failed) return false;
  size_t need = sb->len + extra + 1;
  if (need <= sb->cap) return true;
  size_t cap = sb->cap ? sb->cap : 256;
  while (cap < need) cap *= 2;
  char *p = tpu_realloc_or_null(sb->data, cap);
  if (p == NULL) {
    sb->failed = true;
    return false;
  }
  sb->data = p;
  sb->cap = cap;
  return true;
}

void tpu_strbuf_append(tpu_strbuf *sb, const void *bytes, size_t n) {
  if (!reserve(sb, n)) return;
  memcpy(sb->data + sb->len, bytes, n);
  sb->len += n;
  sb->data[sb->len] = '\0';
}

void tpu_strbuf_puts(tpu_strbuf *sb, const char *s) { tpu_strbuf_append(sb, s, strlen(s)); }

void tpu_strbuf_printf(tpu_strbuf *sb, const char *fmt, ...) {
  if (sb->failed) return;
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof small) {
    tpu_strbuf_append(sb, small, (size_t)n);
    return;
  }
  if (!reserve(sb, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  sb->len += (size_t)n;
}

void tpu_strbuf_put_i64(tpu_strbuf *sb, int64_t v) { tpu_strbuf_append(sb, &v, sizeof v); }

void tpu_strbuf_clear(tpu_strbuf *sb) {
  sb->len = 0;
  sb->failed = false;
  if (sb->data) sb->data[0] = '\0';
}

void tpu_strbuf_release(tpu_strbuf *sb) {
  free(sb->data);
  sb->data = NULL;
  sb->len = sb->cap = 0;
  sb->failed = false;
}

char *tpu_strbuf_take(tpu_strbuf *sb) {
  char *p = sb->data;
  if (p == NULL && !sb->failed && (p = tpu_alloc_or_null(1)) != NULL) *p = '\0';
  sb->data = NULL;
  sb->len = sb->cap = 0;
  return p;
}

tpu_status_t tpu_strbuf_status(const tpu_strbuf *sb) {
  return sb->failed ? tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory building text")
                    : NULL;
}

/* Multiply-xorshift mixing over 8-byte words: fast on short keys, good
 * avalanche; collisions are still checked by full key comparison. */
static inline uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

/* Four lanes of 8 bytes at a time, each its own chain of multiplies, so
 * that they run side by side (keys of _foreach_ calls are tens of KB and
 * hashed per call); then the rest a word at a time. */
uint64_t tpu_hash64(const void *bytes, size_t n, uint64_t seed) {
  const unsigned char *p = bytes;
  uint64_t h = seed ^ (n * 0x9e3779b97f4a7c15ULL);
  if (n >= 32) {
    uint64_t lane[4] = {h, h ^ 0x6a09e667f3bcc909ULL, h ^ 0xbb67ae8584caa73bULL, h ^ 0x3c6ef372fe94f82bULL};
    while (n >= 32) {
      for (int i = 0; i < 4; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, 8);
        lane[i] = (lane[i] ^ (w * 0xff51afd7ed558ccdULL)) * 0x9e3779b97f4a7c15ULL;
        lane[i] ^= lane[i] >> 31;
      }
      p += 32;
      n -= 32;
    }
    h = mix(lane[0]) ^ mix(lane[1] + 1) * 3 ^ mix(lane[2] + 2) * 5 ^ mix(lane[3] + 3) * 7;
  }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ mix(w)) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  uint64_t tail = 0;
  memcpy(&tail, p, n);
  h = (h ^ mix(tail ^ n)) * 0x9e3779b97f4a7c15ULL;
  return mix(h);
}

typedef struct interned {
  struct interned *next;
  char text[];
} interned;

static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;
static interned *intern_list;

const char *tpu_str_intern(const char *s) {
  pthread_mutex_lock(&intern_lock);
  interned *e = intern_list;
  while (e != NULL && strcmp(e->text, s) != 0) e = e->next;
  if (e == NULL) {
    size_t n = strlen(s) + 1;
    e = tpu_alloc_or_null(sizeof *e + n);
    if (e != NULL) {
      memcpy(e->text, s, n);
      e->next = intern_list;
      intern_list = e;
    }
  }
  pthread_mutex_unlock(&intern_lock);
  return e != NULL ? e->text : NULL;
}
