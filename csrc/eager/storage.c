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

void tpu_storage_set(tpu_storage *s, tpu_buffer *buf, tpu_dtype_t dtype) {
  tpu_buffer *old = s->buf;
  s->buf = buf;
  s->dtype = dtype;
  if (old != NULL && old != buf) tpu_buffer_destroy(tpu_eager_runtime(), old);
}

tpu_status_t tpu_storage_materialize(tpu_storage *s, tpu_dtype_t dtype) {
  if (s->buf != NULL) return NULL;
  int64_t n = s->nbytes / (int64_t)tpu_dtype_size(dtype);
  tpu_buffer *buf = NULL;
  TPU_RETURN_IF_ERROR(tpu_buffer_uninitialized(tpu_eager_runtime(), s->device, dtype, &n, 1, &buf));
  tpu_storage_set(s, buf, dtype);
  return NULL;
}

tpu_status_t tpu_storage_copy_prefix(tpu_storage *dst, const tpu_storage *src) {
  if (src->buf == NULL || dst->nbytes == 0) return NULL;
  tpu_runtime *rt = tpu_eager_runtime();
  tpu_hlo_builder *b = NULL;
  TPU_RETURN_IF_ERROR(tpu_hlo_builder_create(&b));
  size_t es = tpu_dtype_size(src->dtype);
  tpu_dtype_t dt = (dst->nbytes % (int64_t)es == 0 && src->nbytes % (int64_t)es == 0) ? src->dtype : TPU_U8;
  int64_t n_src = src->nbytes / (int64_t)es, n_dst = dst->nbytes / (int64_t)tpu_dtype_size(dt);
  tpu_hlo_type t = tpu_hlo_make_type(src->dtype, 1, &n_src);
  tpu_hlo_value x = tpu_hlo_storage_as(b, tpu_hlo_param(b, &t, -1), dt);
  int64_t have = tpu_hlo_type_of(b, x)->dims[0];
  if (have >= n_dst) {
    x = tpu_hlo_slice_dim(b, x, 0, 0, n_dst, 1);
  } else {
    int64_t lo = 0, hi = n_dst - have;
    x = tpu_hlo_pad(b, x, tpu_hlo_scalar_i64(b, dt, 0), &lo, &hi, NULL);
  }
  char *text = NULL;
  tpu_executable *exe = NULL;
  tpu_buffer *out = NULL;
  tpu_status_t st = tpu_hlo_finish(b, &x, 1, &text);
  if (st == NULL) st = tpu_executable_compile(rt, text, strlen(text), &exe);
  tpu_buffer *arg = src->buf;
  if (st == NULL) st = tpu_executable_execute(rt, exe, src->device, &arg, 1, NULL, true, &out);
  if (st == NULL) tpu_storage_set(dst, out, dt);
  tpu_executable_destroy(rt, exe);
  free(text);
  tpu_hlo_builder_destroy(b);
  return st;
}
