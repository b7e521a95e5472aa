/* Storage boxes: the device buffer behind a PyTorch storage (see eager.h). */
#include <stdlib.h>
#include <string.h>

#include "eager/eager.h"

tpu_storage *tpu_storage_new(int device, int64_t nbytes) {
  tpu_storage *s = calloc(1, sizeof *s);
  if (s != NULL) {
    s->nbytes = nbytes;
    s->device = device;
  }
  return s;
}

void tpu_storage_free(tpu_storage *s) {
  if (s == NULL) return;
  tpu_buffer_destroy(tpu_eager_runtime(), s->buf);
  free(s);
}

void tpu_storage_set(tpu_storage *s, tpu_buffer *buf, const tpu_hlo_type *type) {
  tpu_buffer *old = s->buf;
  s->buf = buf;
  s->type = *type;
  if (old != NULL && old != buf) tpu_buffer_destroy(tpu_eager_runtime(), old);
}

tpu_hlo_type tpu_storage_type(const tpu_storage *s, tpu_dtype_t reader) {
  if (s->buf != NULL) return s->type;
  int64_t n = s->nbytes / (int64_t)tpu_dtype_size(reader);
  return tpu_storage_dense_type(reader, 1, &n);
}

tpu_hlo_type tpu_storage_dense_type(tpu_dtype_t dtype, int rank, const int64_t *sizes) {
  tpu_hlo_type t = tpu_hlo_make_type(dtype, 0, NULL);
  for (int i = 0; i < rank; i++)
    if (sizes[i] != 1) t.dims[t.rank++] = sizes[i];
  return t;
}

tpu_status_t tpu_storage_materialize(tpu_storage *s, tpu_dtype_t dtype) {
  if (s->buf != NULL) return NULL;
  tpu_hlo_type t = tpu_storage_type(s, dtype);
  tpu_buffer *buf = NULL;
  TPU_RETURN_IF_ERROR(tpu_buffer_uninitialized(tpu_eager_runtime(), s->device, dtype, t.dims, t.rank, &buf));
  tpu_storage_set(s, buf, &t);
  return NULL;
}

tpu_status_t tpu_storage_copy_prefix(tpu_storage *dst, const tpu_storage *src) {
  if (src->buf == NULL || dst->nbytes == 0) return NULL;
  tpu_runtime *rt = tpu_eager_runtime();
  tpu_hlo_builder *b = NULL;
  TPU_RETURN_IF_ERROR(tpu_hlo_builder_create(&b));
  size_t es = tpu_dtype_size(src->type.dtype);
  tpu_dtype_t dt = (dst->nbytes % (int64_t)es == 0 && src->nbytes % (int64_t)es == 0) ? src->type.dtype : TPU_U8;
  int64_t n_dst = dst->nbytes / (int64_t)tpu_dtype_size(dt);
  tpu_hlo_value x = tpu_hlo_storage_as(b, tpu_hlo_param(b, &src->type, -1), dt);
  int64_t have = tpu_hlo_type_of(b, x)->dims[0];
  if (have >= n_dst) {
    x = tpu_hlo_slice_dim(b, x, 0, 0, n_dst, 1);
  } else {
    int64_t lo = 0, hi = n_dst - have;
    x = tpu_hlo_pad(b, x, tpu_hlo_scalar_i64(b, dt, 0), &lo, &hi, NULL);
  }
  tpu_hlo_type out_type = tpu_storage_dense_type(dt, 1, &n_dst);
  x = tpu_hlo_reshape(b, x, out_type.rank, out_type.dims);
  char *text = NULL;
  tpu_executable *exe = NULL;
  tpu_buffer *out = NULL;
  tpu_status_t st = tpu_hlo_finish(b, &x, 1, &text);
  if (st == NULL) st = tpu_executable_compile(rt, text, strlen(text), &exe);
  tpu_buffer *arg = src->buf;
  if (st == NULL) st = tpu_executable_execute(rt, exe, src->device, &arg, 1, NULL, true, &out);
  if (st == NULL) tpu_storage_set(dst, out, &out_type);
  tpu_executable_destroy(rt, exe);
  free(text);
  tpu_hlo_builder_destroy(b);
  return st;
}
