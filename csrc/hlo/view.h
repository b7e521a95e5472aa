/* Views inside programs: reading a tensor out of its storage buffer and
 * writing a value back through a view.
 *
 * A storage is a row-major buffer of some element type S and some shape
 * (its bytes are what counts: any shape is read as 1-D first). A tensor is a
 * view of it: dtype T, sizes, strides and offset counted in elements of T.
 * Reading reinterprets the storage's bytes as T when S != T, then applies the
 * view geometry with slice/reshape/transpose/broadcast when the strides allow
 * it (a "strided box"), and with a gather otherwise; a view that is the whole
 * buffer in its own type and shape is the buffer itself. Writing is the
 * inverse: dynamic_update_slice for a strided box, a scatter otherwise. The
 * result of a write is the whole new storage: the value itself when the view
 * covers the storage densely, else 1-D of T. This is the storage model of
 * docs/ARCHITECTURE.md; eager and compiled programs share it. */
#ifndef TPU_HLO_VIEW_H_
#define TPU_HLO_VIEW_H_

#include <stdbool.h>
#include <stdint.h>

#include "hlo/builder.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_view {
  tpu_dtype_t dtype;
  int rank;
  int64_t sizes[TPU_MAX_TENSOR_RANK];
  int64_t strides[TPU_MAX_TENSOR_RANK]; /* in elements of dtype */
  int64_t offset;                    /* in elements of dtype */
} tpu_view;

int64_t tpu_view_numel(const tpu_view *v);
/* True when the view is the whole storage of |storage_bytes| bytes, dense,
 * row-major, from offset 0, of one element type: a write can simply replace
 * the buffer. */
bool tpu_view_is_whole(const tpu_view *v, int64_t storage_bytes);
/* True for dense row-major strides (size-1 dims ignored). */
bool tpu_view_is_contiguous(const tpu_view *v);

/* The storage's bytes (any shape) as a 1-D array of |dtype|. */
tpu_hlo_value tpu_hlo_storage_as(tpu_hlo_builder *b, tpu_hlo_value storage, tpu_dtype_t dtype);
/* The tensor |v| read from |storage|: a value of type (v->dtype, v->sizes). */
tpu_hlo_value tpu_hlo_view_read(tpu_hlo_builder *b, tpu_hlo_value storage, const tpu_view *v);
/* |storage| with the elements of |v| replaced by |value| (shape v->sizes,
 * converted to v->dtype here). Returns the new storage: |value| when |v| is
 * the whole storage, else 1-D of v->dtype. Where |v| is expanded (several
 * elements at one memory location), the location takes the last of its
 * elements whose value changed it, or, when |adds|, the sum of their
 * changes (PyTorch's CPU kernels write element by element: the fills, and
 * index_put_ with accumulate). */
tpu_hlo_value tpu_hlo_view_write(tpu_hlo_builder *b, tpu_hlo_value storage, const tpu_view *v,
                                 tpu_hlo_value value, bool adds);

#ifdef __cplusplus
}
#endif

#endif /* TPU_HLO_VIEW_H_ */
