/* Pinned host memory: the blocks PyTorch's pin_memory() and DataLoader(pin_memory=True)
 * get for tpu, page-aligned, and recognised afterwards by any address inside them
 * (Tensor.is_pinned() asks about a storage's data pointer). */
#ifndef TPU_BASE_PINNED_H_
#define TPU_BASE_PINNED_H_

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A block of |nbytes| (at least one page's alignment), or NULL when out of memory;
 * released by tpu_pinned_free. */
void *tpu_pinned_alloc(size_t nbytes);
/* Releases a block tpu_pinned_alloc returned (NULL: nothing). */
void tpu_pinned_free(void *block);
/* Whether |ptr| lies inside a live pinned block. */
bool tpu_pinned_contains(const void *ptr);
/* Live pinned blocks and their bytes. */
void tpu_pinned_usage(size_t *out_blocks, size_t *out_bytes);

#ifdef __cplusplus
}
#endif

#endif /* TPU_BASE_PINNED_H_ */
