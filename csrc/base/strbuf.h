/* A growable byte buffer for text (StableHLO) and binary keys.
 *
 * Appends never fail loudly: an allocation failure sets |failed| and later
 * appends do nothing, so a builder checks once at the end
 * (tpu_strbuf_status). The buffer owns |data|; tpu_strbuf_release frees it. */
#ifndef TPU_BASE_STRBUF_H_
#define TPU_BASE_STRBUF_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_strbuf {
  char *data; /* NUL-terminated when len > 0 */
  size_t len;
  size_t cap;
  bool failed;
} tpu_strbuf;

#define TPU_STRBUF_INIT {NULL, 0, 0, false}

void tpu_strbuf_append(tpu_strbuf *sb, const void *bytes, size_t n);
void tpu_strbuf_puts(tpu_strbuf *sb, const char *s);
void tpu_strbuf_printf(tpu_strbuf *sb, const char *fmt, ...) TPU_PRINTF(2, 3);
void tpu_strbuf_put_i64(tpu_strbuf *sb, int64_t v); /* binary, 8 bytes */
void tpu_strbuf_clear(tpu_strbuf *sb);               /* keeps the allocation */
void tpu_strbuf_release(tpu_strbuf *sb);
/* Takes ownership of the text; the buffer is empty afterwards. */
char *tpu_strbuf_take(tpu_strbuf *sb);
tpu_status_t tpu_strbuf_status(const tpu_strbuf *sb) TPU_MUST_USE;

/* A copy of |s| that lives as long as the process, one per distinct text:
 * for messages that outlive the call that names them (an assertion's text
 * in a cached program). NULL if out of memory. */
const char *tpu_str_intern(const char *s);

/* 64-bit hash of |n| bytes with |seed|; two seeds make a 128-bit key. */
uint64_t tpu_hash64(const void *bytes, size_t n, uint64_t seed);

#ifdef __cplusplus
}
#endif

#endif /* TPU_BASE_STRBUF_H_ */
