/* The one status type of the C layers.
 *
 * A function that can fail returns tpu_status_t: NULL means success, anything
 * else is a heap object the caller owns and must pass on or free with
 * tpu_status_free(). The code says which Python exception a user should see;
 * the message is written for that user. Library code never prints or aborts:
 * it returns a status. Creating a status never fails (an allocation failure
 * yields a static out-of-memory status that tpu_status_free ignores). */
#ifndef TPU_BASE_STATUS_H_
#define TPU_BASE_STATUS_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_code {
  TPU_OK = 0,
  TPU_ERR_RUNTIME,         /* RuntimeError */
  TPU_ERR_INDEX,           /* IndexError */
  TPU_ERR_TYPE,            /* TypeError */
  TPU_ERR_VALUE,           /* ValueError */
  TPU_ERR_NOT_IMPLEMENTED, /* NotImplementedError */
  TPU_ERR_OUT_OF_MEMORY,   /* torch.OutOfMemoryError */
  TPU_ERR_NOT_FOUND,       /* RuntimeError; a missing plugin, file or rule */
  TPU_ERR_UNAVAILABLE,     /* RuntimeError; a capability the plugin lacks */
} tpu_code_t;

typedef struct tpu_status *tpu_status_t;

#if defined(__GNUC__)
#define TPU_MUST_USE __attribute__((warn_unused_result))
#define TPU_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TPU_MUST_USE
#define TPU_PRINTF(f, a)
#endif

/* A new status with |code| and a printf-formatted message. */
tpu_status_t tpu_status_new(tpu_code_t code, const char *fmt, ...) TPU_PRINTF(2, 3);

/* Prefixes the message of |st| with context ("while compiling aten::add: ...")
 * and returns |st|. NULL passes through. */
tpu_status_t tpu_status_annotate(tpu_status_t st, const char *fmt, ...) TPU_PRINTF(2, 3);

tpu_code_t tpu_status_code(tpu_status_t st);
/* Valid while |st| lives; "" for NULL. */
const char *tpu_status_message(tpu_status_t st);
void tpu_status_free(tpu_status_t st);

/* Evaluates |expr| (a tpu_status_t); on failure returns it from the caller. */
#define TPU_RETURN_IF_ERROR(expr)           \
  do {                                      \
    tpu_status_t tpu_st_ = (expr);          \
    if (tpu_st_ != NULL) return tpu_st_;    \
  } while (0)

/* Same as above, but jumps to |label| with the status stored in |var|. */
#define TPU_GOTO_IF_ERROR(var, expr, label) \
  do {                                      \
    (var) = (expr);                         \
    if ((var) != NULL) goto label;          \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif /* TPU_BASE_STATUS_H_ */
