/* Host memory for the C layers, as statuses.
 *
 * Every allocation of base/, runtime/ and eager/ goes through these, so an
 * allocation failure comes back as a TPU_ERR_OUT_OF_MEMORY status like any
 * other error, and tests can fail the Nth allocation on purpose
 * (tpu_alloc_fail_nth) to walk every failure path. Memory is the C
 * library's: release it with free() (tpu_free is the same). */
#ifndef TPU_BASE_ALLOC_H_
#define TPU_BASE_ALLOC_H_

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* |size| bytes (at least one) in |*out_ptr|, the caller's; NULL on failure. */
tpu_status_t tpu_alloc(size_t size, void **out_ptr) TPU_MUST_USE;
/* |count| zeroed elements of |size| bytes (at least one byte). */
tpu_status_t tpu_alloc_zeroed(size_t count, size_t size, void **out_ptr) TPU_MUST_USE;
/* Resizes |*inout_ptr| (NULL: a new block) to |size| bytes; on failure
 * |*inout_ptr| is left as it was, still the caller's. */
tpu_status_t tpu_realloc(void **inout_ptr, size_t size) TPU_MUST_USE;
/* A copy of |s| in |*out_copy|, the caller's. */
tpu_status_t tpu_strdup(const char *s, char **out_copy) TPU_MUST_USE;
void tpu_free(void *ptr);

/* The same allocations where a caller keeps its own failure flag (a builder
 * that checks once at the end): NULL on failure, which counts as one. */
void *tpu_alloc_or_null(size_t size);
void *tpu_realloc_or_null(void *ptr, size_t size);

/* Test hook: the |n|th allocation from now (1: the next) fails, once; 0
 * disarms. Process-wide, any thread's allocation counts. */
void tpu_alloc_fail_nth(long n);
/* Whether the failure armed by tpu_alloc_fail_nth has happened. */
bool tpu_alloc_failure_injected(void);

#ifdef __cplusplus
}
#endif

#endif /* TPU_BASE_ALLOC_H_ */
