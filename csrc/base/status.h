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
tpu_status_t tpu_status_new(tpu_code_t code, const char *fmt, ...) TPU_PRINTF(2, 3) TPU_MUST_USE;

/* Prefixes the message of |st| with context ("while compiling aten::add: ...")
 * and returns |st|. NULL passes through. */
tpu_status_t tpu_status_annotate(tpu_status_t st, const char *fmt, ...) TPU_PRINTF(2, 3) TPU_MUST_USE;

/* One status for two errors, as when cleaning up after a failure fails too:
 * NULL if both are NULL, the other if one is, else |first| (its code) with
 * |second|'s message appended ("...; then: ..."), |second| freed. Takes
 * both. */
tpu_status_t tpu_status_join(tpu_status_t first, tpu_status_t second) TPU_MUST_USE;

tpu_code_t tpu_status_code(tpu_status_t st);
/* Valid while |st| lives; "" for NULL. */
const char *tpu_status_message(tpu_status_t st);
void tpu_status_free(tpu_status_t st);

/* TPU_RETURN_IF_ERROR(expr) evaluates |expr| (a tpu_status_t) and on
 * failure returns it from the caller. TPU_RETURN_IF_ERROR(expr, fmt, ...)
 * first prefixes the message with the context |fmt| formats (evaluated only
 * on failure): TPU_RETURN_IF_ERROR(compile(p), "while compiling %s", name)
 * returns "while compiling aten::add: <compile's message>". */
#define TPU_RETURN_IF_ERROR(...)                                                              \
  TPU_STATUS_PICK_(__VA_ARGS__, TPU_RETURN_IF_ERROR_CTX_, TPU_RETURN_IF_ERROR_CTX_,            \
                   TPU_RETURN_IF_ERROR_CTX_, TPU_RETURN_IF_ERROR_CTX_, TPU_RETURN_IF_ERROR_CTX_, \
                   TPU_RETURN_IF_ERROR_CTX_, TPU_RETURN_IF_ERROR_CTX_, TPU_RETURN_IF_ERROR_CTX_, \
                   TPU_RETURN_IF_ERROR_PLAIN_, unused_)                                         \
  (__VA_ARGS__)
#define TPU_STATUS_PICK_(a1, a2, a3, a4, a5, a6, a7, a8, a9, name, ...) name
#define TPU_RETURN_IF_ERROR_PLAIN_(expr)  \
  do {                                    \
    tpu_status_t tpu_st_ = (expr);        \
    if (tpu_st_ != NULL) return tpu_st_;  \
  } while (0)
#define TPU_RETURN_IF_ERROR_CTX_(expr, ...)                                   \
  do {                                                                        \
    tpu_status_t tpu_st_ = (expr);                                            \
    if (tpu_st_ != NULL) return tpu_status_annotate(tpu_st_, __VA_ARGS__);    \
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
