/* Status objects: a code and an owned message string.
 *
 * Allocated with the C library directly, not tpu_alloc: a status reports a
 * failed allocation, so an injected failure (base/alloc.h) must not be
 * spent on the report. */
#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tpu_status {
  tpu_code_t code;
  char *message;
};

static char oom_message[] = "out of host memory while reporting an error";
static struct tpu_status oom_status = {TPU_ERR_OUT_OF_MEMORY, oom_message};

static char *vformat(const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  char *s = malloc((size_t)n + 1);
  if (s == NULL) return NULL;
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  return s;
}

tpu_status_t tpu_status_new(tpu_code_t code, const char *fmt, ...) {
  struct tpu_status *st = malloc(sizeof(*st));
  if (st == NULL) return &oom_status;
  va_list ap;
  va_start(ap, fmt);
  st->message = vformat(fmt, ap);
  va_end(ap);
  if (st->message == NULL) {
    free(st);
    return &oom_status;
  }
  st->code = code == TPU_OK ? TPU_ERR_RUNTIME : code;
  return st;
}

/* Replaces |st|'s message with |head| |sep| |tail|; keeps it when out of
 * memory (the error itself matters more than its context). */
static void set_message(struct tpu_status *st, const char *head, const char *sep, const char *tail) {
  size_t a = strlen(head), s = strlen(sep), b = strlen(tail);
  char *joined = malloc(a + s + b + 1);
  if (joined == NULL) return;
  memcpy(joined, head, a);
  memcpy(joined + a, sep, s);
  memcpy(joined + a + s, tail, b + 1);
  free(st->message);
  st->message = joined;
}

tpu_status_t tpu_status_annotate(tpu_status_t st, const char *fmt, ...) {
  if (st == NULL || st == &oom_status) return st;
  va_list ap;
  va_start(ap, fmt);
  char *prefix = vformat(fmt, ap);
  va_end(ap);
  if (prefix == NULL) return st;
  set_message(st, prefix, ": ", st->message);
  free(prefix);
  return st;
}

tpu_status_t tpu_status_join(tpu_status_t first, tpu_status_t second) {
  if (first == NULL) return second;
  if (second != NULL && first != &oom_status) set_message(first, first->message, "; then: ", second->message);
  tpu_status_free(second);
  return first;
}

tpu_code_t tpu_status_code(tpu_status_t st) { return st == NULL ? TPU_OK : st->code; }

const char *tpu_status_message(tpu_status_t st) { return st == NULL ? "" : st->message; }

void tpu_status_free(tpu_status_t st) {
  if (st == NULL || st == &oom_status) return;
  free(st->message);
  free(st);
}
