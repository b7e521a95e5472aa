/* View reads and writes inside programs (see view.h). */
#include "hlo/view.h"

#include <string.h>

int64_t tpu_view_numel(const tpu_view *v) {
  int64_t n = 1;
  for (int i = 0; i < v->rank; i++) n *= v->sizes[i];
  return n;
}

bool tpu_view_is_contiguous(const tpu_view *v) {
  int64_t expected = 1;
  for (int i = v->rank - 1; i >= 0; i--) {
    if (v->sizes[i] == 1) continue;
    if (v->strides[i] != expected) return false;
    expected *= v->sizes[i];
  }
  return true;
}

bool tpu_view_is_whole(const tpu_view *v, int64_t storage_bytes) {
  return v->offset == 0 && tpu_view_is_contiguous(v) &&
         tpu_view_numel(v) * (int64_t)tpu_dtype_size(v->dtype) == storage_bytes;
}

static int64_t length(tpu_hlo_builder *b, tpu_hlo_value x) { return tpu_hlo_type_of(b, x)->dims[0]; }

static tpu_hlo_value flat(tpu_hlo_builder *b, tpu_hlo_value x, int64_t n) {
  return tpu_hlo_reshape(b, x, 1, &n);
}

/* The storage's buffer as 1-D, whatever its shape. */
static tpu_hlo_value flat_storage(tpu_hlo_builder *b, tpu_hlo_value storage) {
  return flat(b, storage, tpu_hlo_type_numel(tpu_hlo_type_of(b, storage)));
}

tpu_hlo_value tpu_hlo_storage_as(tpu_hlo_builder *b, tpu_hlo_value storage, tpu_dtype_t t) {
  tpu_dtype_t s = tpu_hlo_dtype(b, storage);
  if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
  storage = flat_storage(b, storage);
  if (s == t) return storage;
  int64_t n = length(b, storage);
  size_t ss = tpu_dtype_size(s), ts = tpu_dtype_size(t);
  if (s == TPU_BOOL || t == TPU_BOOL) {
    /* i1 has no bytes to bitcast: go through uint8 by value. */
    if (s == TPU_BOOL) return tpu_hlo_storage_as(b, tpu_hlo_convert(b, storage, TPU_U8), t);
    tpu_hlo_value u8 = tpu_hlo_storage_as(b, storage, TPU_U8);
    return tpu_hlo_convert(b, u8, TPU_BOOL);
  }
  if (tpu_dtype_is_complex(s)) {
    tpu_hlo_value parts[2] = {tpu_hlo_unary(b, TPU_HLO_REAL, storage),
                              tpu_hlo_unary(b, TPU_HLO_IMAG, storage)};
    int64_t d2[2] = {n, 1};
    parts[0] = tpu_hlo_reshape(b, parts[0], 2, d2);
    parts[1] = tpu_hlo_reshape(b, parts[1], 2, d2);
    tpu_hlo_value pairs = tpu_hlo_concatenate(b, parts, 2, 1);
    return tpu_hlo_storage_as(b, flat(b, pairs, 2 * n), t);
  }
  if (tpu_dtype_is_complex(t)) {
    tpu_dtype_t r = tpu_dtype_real(t);
    tpu_hlo_value x = tpu_hlo_storage_as(b, storage, r);
    int64_t m = length(b, x) / 2;
    if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
    x = tpu_hlo_slice_dim(b, x, 0, 0, 2 * m, 1);
    int64_t d2[2] = {m, 2};
    x = tpu_hlo_reshape(b, x, 2, d2);
    tpu_hlo_value re = flat(b, tpu_hlo_slice_dim(b, x, 1, 0, 1, 1), m);
    tpu_hlo_value im = flat(b, tpu_hlo_slice_dim(b, x, 1, 1, 2, 1), m);
    return tpu_hlo_binary(b, TPU_HLO_COMPLEX, re, im);
  }
  if (ss == ts) {
    tpu_hlo_type to = tpu_hlo_make_type(t, 1, &n);
    return tpu_hlo_bitcast(b, storage, &to);
  }
  if (ss > ts) {
    int64_t k = (int64_t)(ss / ts);
    int64_t d2[2] = {n, k};
    tpu_hlo_type to = tpu_hlo_make_type(t, 2, d2);
    return flat(b, tpu_hlo_bitcast(b, storage, &to), n * k);
  }
  int64_t k = (int64_t)(ts / ss);
  int64_t usable = n - n % k;
  tpu_hlo_value x = usable == n ? storage : tpu_hlo_slice_dim(b, storage, 0, 0, usable, 1);
  int64_t d2[2] = {usable / k, k};
  x = tpu_hlo_reshape(b, x, 2, d2);
  int64_t m = usable / k;
  tpu_hlo_type to = tpu_hlo_make_type(t, 1, &m);
  return tpu_hlo_bitcast(b, x, &to);
}

/* The dims of a view that move through memory, sorted by decreasing stride,
 * and whether they form a strided box (each stride a multiple of the next,
 * no overlap), which slice+reshape can express. */
typedef struct geometry {
  int m;                            /* moving dims */
  int dim[TPU_HLO_MAX_RANK];        /* view dim of sorted entry j */
  int64_t size[TPU_HLO_MAX_RANK];   /* sorted by decreasing stride */
  int64_t stride[TPU_HLO_MAX_RANK];
  bool box;
} geometry;

static void analyse(const tpu_view *v, geometry *g) {
  g->m = 0;
  for (int i = 0; i < v->rank; i++) {
    if (v->sizes[i] == 1 || v->strides[i] == 0) continue;
    int j = g->m++;
    while (j > 0 && g->stride[j - 1] < v->strides[i]) {
      g->dim[j] = g->dim[j - 1];
      g->size[j] = g->size[j - 1];
      g->stride[j] = g->stride[j - 1];
      j--;
    }
    g->dim[j] = i;
    g->size[j] = v->sizes[i];
    g->stride[j] = v->strides[i];
  }
  g->box = true;
  for (int j = 0; j + 1 < g->m; j++)
    if (g->stride[j] % g->stride[j + 1] != 0 || g->size[j + 1] * g->stride[j + 1] > g->stride[j])
      g->box = false;
  for (int j = 0; j < g->m; j++)
    if (g->stride[j] < 0) g->box = false;
}

/* The box region of storage |x| as an (m+1)-d array R whose leading corner
 * [0:size_0, …, 0:size_{m-1}, 0:1] holds the view. |out_avail| is how many
 * storage elements R covers before padding. */
static tpu_hlo_value box_region(tpu_hlo_builder *b, tpu_hlo_value x, const tpu_view *v,
                                const geometry *g, int64_t *out_len, int64_t *out_avail) {
  int64_t total = length(b, x);
  int64_t len = g->m ? g->size[0] * g->stride[0] : 1;
  int64_t avail = total - v->offset < len ? total - v->offset : len;
  *out_len = len;
  *out_avail = avail;
  tpu_hlo_value seg = tpu_hlo_slice_dim(b, x, 0, v->offset, v->offset + avail, 1);
  if (avail < len) {
    int64_t lo = 0, hi = len - avail;
    seg = tpu_hlo_pad(b, seg, tpu_hlo_scalar_i64(b, v->dtype, 0), &lo, &hi, NULL);
  }
  int64_t r[TPU_HLO_MAX_RANK + 1];
  if (g->m == 0) {
    r[0] = 1;
    return tpu_hlo_reshape(b, seg, 1, r);
  }
  if (g->m + 1 > TPU_HLO_MAX_RANK) return tpu_hlo_fail(b, TPU_ERR_NOT_IMPLEMENTED, "view of too many dimensions");
  r[0] = g->size[0];
  for (int j = 0; j + 1 < g->m; j++) r[j + 1] = g->stride[j] / g->stride[j + 1];
  r[g->m] = g->stride[g->m - 1];
  return tpu_hlo_reshape(b, seg, g->m + 1, r);
}

/* Linear storage indices of every element of |v|, shape sizes (+ trailing 1
 * when |vector_dim|). */
static tpu_hlo_value linear_indices(tpu_hlo_builder *b, const tpu_view *v, bool vector_dim) {
  tpu_hlo_type t = tpu_hlo_make_type(TPU_S64, v->rank, v->sizes);
  tpu_hlo_value idx = tpu_hlo_const_i64(b, &t, v->offset);
  for (int i = 0; i < v->rank; i++) {
    if (v->sizes[i] == 1 || v->strides[i] == 0) continue;
    tpu_hlo_value io = tpu_hlo_iota(b, &t, i);
    if (v->strides[i] != 1) io = tpu_hlo_binary(b, TPU_HLO_MUL, io, tpu_hlo_const_i64(b, &t, v->strides[i]));
    idx = tpu_hlo_binary(b, TPU_HLO_ADD, idx, io);
  }
  if (!vector_dim) return idx;
  int64_t dims[TPU_HLO_MAX_RANK + 1];
  for (int i = 0; i < v->rank; i++) dims[i] = v->sizes[i];
  dims[v->rank] = 1;
  return tpu_hlo_reshape(b, idx, v->rank + 1, dims);
}

tpu_hlo_value tpu_hlo_view_read(tpu_hlo_builder *b, tpu_hlo_value storage, const tpu_view *v) {
  tpu_hlo_type out = tpu_hlo_make_type(v->dtype, v->rank, v->sizes);
  if (tpu_view_numel(v) == 0) return tpu_hlo_const_i64(b, &out, 0);
  /* The whole buffer as it was last written whole: the value itself. */
  if (tpu_hlo_type_equal(tpu_hlo_type_of(b, storage), &out) && v->offset == 0 && tpu_view_is_contiguous(v))
    return storage;
  tpu_hlo_value x = tpu_hlo_storage_as(b, storage, v->dtype);
  if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
  int64_t total = length(b, x), numel = tpu_view_numel(v);
  if (tpu_view_is_contiguous(v) && v->offset + numel <= total) {
    x = tpu_hlo_slice_dim(b, x, 0, v->offset, v->offset + numel, 1);
    return tpu_hlo_reshape(b, x, v->rank, v->sizes);
  }
  geometry g;
  analyse(v, &g);
  if (!g.box) {
    tpu_hlo_value idx = linear_indices(b, v, true);
    tpu_hlo_gather_dims d;
    memset(&d, 0, sizeof d);
    d.num_collapsed = d.num_start_map = 1;
    d.collapsed_slice_dims[0] = 0;
    d.start_index_map[0] = 0;
    d.index_vector_dim = v->rank;
    int64_t one = 1;
    return tpu_hlo_gather(b, x, idx, &d, &one, &out);
  }
  int64_t len, avail;
  tpu_hlo_value r = box_region(b, x, v, &g, &len, &avail);
  int64_t zero[TPU_HLO_MAX_RANK + 1] = {0}, limit[TPU_HLO_MAX_RANK + 1];
  for (int j = 0; j < g.m; j++) limit[j] = g.size[j];
  limit[g.m] = 1;
  r = tpu_hlo_slice(b, r, zero, limit, NULL);
  r = tpu_hlo_reshape(b, r, g.m, g.size);
  /* Sorted order -> the view's order of moving dims. */
  int64_t perm[TPU_HLO_MAX_RANK];
  int k = 0;
  for (int i = 0; i < v->rank; i++)
    for (int j = 0; j < g.m; j++)
      if (g.dim[j] == i) perm[k++] = j;
  r = tpu_hlo_transpose(b, r, perm);
  int64_t compact[TPU_HLO_MAX_RANK];
  for (int i = 0; i < v->rank; i++) compact[i] = v->strides[i] == 0 ? 1 : v->sizes[i];
  r = tpu_hlo_reshape(b, r, v->rank, compact);
  int64_t bdims[TPU_HLO_MAX_RANK];
  for (int i = 0; i < v->rank; i++) bdims[i] = i;
  return tpu_hlo_broadcast_in_dim(b, r, &out, bdims);
}

/* True where |x| and |y| differ in their bits (so NaN equals NaN, and -0.0
 * differs from 0.0). */
static tpu_hlo_value bits_differ(tpu_hlo_builder *b, tpu_hlo_value x, tpu_hlo_value y) {
  tpu_dtype_t t = tpu_hlo_dtype(b, x);
  if (tpu_dtype_is_complex(t))
    return tpu_hlo_binary(b, TPU_HLO_OR,
                          bits_differ(b, tpu_hlo_unary(b, TPU_HLO_REAL, x), tpu_hlo_unary(b, TPU_HLO_REAL, y)),
                          bits_differ(b, tpu_hlo_unary(b, TPU_HLO_IMAG, x), tpu_hlo_unary(b, TPU_HLO_IMAG, y)));
  if (tpu_dtype_is_float(t)) {
    tpu_hlo_type u = *tpu_hlo_type_of(b, x);
    u.dtype = tpu_dtype_same_width_uint(t);
    x = tpu_hlo_bitcast(b, x, &u);
    y = tpu_hlo_bitcast(b, y, &u);
  }
  return tpu_hlo_compare(b, TPU_HLO_NE, x, y);
}

/* |value|, written through view |v| whose expanded dims (stride 0, size > 1)
 * put several elements at one memory location, as one value per location:
 * the shape of |w|, |v| with those dims of size 1. PyTorch's CPU kernels
 * that allow such writes (fills, indexing puts) write element by element,
 * so a location ends with the last write that changed it: here, the last
 * element (row-major) whose value differs from the location's, or, when
 * |adds| (index_put_ with accumulate), the location's value plus every
 * element's change. */
static tpu_hlo_value resolve_overlap(tpu_hlo_builder *b, tpu_hlo_value storage, const tpu_view *v,
                                     const tpu_view *w, tpu_hlo_value value, bool adds) {
  const tpu_dtype_t t = v->dtype;
  tpu_hlo_type vt = tpu_hlo_make_type(t, v->rank, v->sizes);
  int64_t same[TPU_HLO_MAX_RANK], z[TPU_HLO_MAX_RANK];
  int nz = 0;
  for (int i = 0; i < v->rank; i++) {
    same[i] = i;
    if (w->sizes[i] != v->sizes[i]) z[nz++] = i;
  }
  tpu_hlo_value old = tpu_hlo_view_read(b, storage, w);
  tpu_hlo_value spread = tpu_hlo_broadcast_in_dim(b, old, &vt, same);
  if (adds && t != TPU_BOOL) {
    tpu_hlo_value change = tpu_hlo_binary(b, TPU_HLO_SUB, value, spread);
    tpu_hlo_value sum = tpu_hlo_reduce_simple(b, change, tpu_hlo_scalar_i64(b, t, 0), TPU_HLO_ADD, z, nz);
    return tpu_hlo_binary(b, TPU_HLO_ADD, old, tpu_hlo_reshape(b, sum, w->rank, w->sizes));
  }
  /* Each element's position among the expanded dims where it changes its
   * location, -1 where it does not; the reduction keeps the highest. */
  tpu_hlo_type pt = vt;
  pt.dtype = TPU_S64;
  tpu_hlo_value pos = tpu_hlo_const_i64(b, &pt, 0);
  int64_t step = 1;
  for (int j = nz - 1; j >= 0; j--) {
    tpu_hlo_value io = tpu_hlo_iota(b, &pt, (int)z[j]);
    pos = tpu_hlo_binary(b, TPU_HLO_ADD, pos, tpu_hlo_binary(b, TPU_HLO_MUL, io, tpu_hlo_const_i64(b, &pt, step)));
    step *= v->sizes[z[j]];
  }
  pos = tpu_hlo_select(b, bits_differ(b, value, spread), pos, tpu_hlo_const_i64(b, &pt, -1));
  tpu_hlo_type sc[4] = {tpu_hlo_make_type(t, 0, NULL), tpu_hlo_make_type(TPU_S64, 0, NULL)};
  sc[2] = sc[0];
  sc[3] = sc[1];
  tpu_hlo_value a[4];
  tpu_hlo_region body;
  tpu_hlo_region_begin(b, 4, sc, a);
  tpu_hlo_value later = tpu_hlo_compare(b, TPU_HLO_GE, a[1], a[3]);
  tpu_hlo_value r[2] = {tpu_hlo_select(b, later, a[0], a[2]), tpu_hlo_select(b, later, a[1], a[3])};
  tpu_hlo_region_end(b, r, 2, &body);
  tpu_hlo_value xs[2] = {value, pos}, inits[2] = {tpu_hlo_scalar_i64(b, t, 0), tpu_hlo_scalar_i64(b, TPU_S64, -2)};
  tpu_hlo_value out[2];
  tpu_hlo_reduce(b, xs, inits, 2, z, nz, &body, out);
  return tpu_hlo_reshape(b, out[0], w->rank, w->sizes);
}

tpu_hlo_value tpu_hlo_view_write(tpu_hlo_builder *b, tpu_hlo_value storage, const tpu_view *v,
                                 tpu_hlo_value value, bool adds) {
  tpu_dtype_t s = tpu_hlo_dtype(b, storage);
  if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
  int64_t bytes = tpu_hlo_type_numel(tpu_hlo_type_of(b, storage)) * (int64_t)tpu_dtype_size(s);
  if (bytes % (int64_t)tpu_dtype_size(v->dtype) != 0)
    return tpu_hlo_fail(b, TPU_ERR_NOT_IMPLEMENTED,
                        "writing %s elements into a storage whose size is not a multiple of them",
                        tpu_dtype_name(v->dtype));
  value = tpu_hlo_convert(b, value, v->dtype);
  int64_t total = bytes / (int64_t)tpu_dtype_size(v->dtype), numel = tpu_view_numel(v);
  /* The whole storage: the value, in the view's shape. */
  if (numel > 0 && numel == total && v->offset == 0 && tpu_view_is_contiguous(v)) return value;
  tpu_hlo_value x = tpu_hlo_storage_as(b, storage, v->dtype);
  if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
  if (numel == 0) return x;
  if (tpu_view_is_contiguous(v) && v->offset + numel <= total) {
    tpu_hlo_value f = flat(b, value, numel);
    tpu_hlo_value at = tpu_hlo_scalar_i64(b, TPU_S64, v->offset);
    return tpu_hlo_dynamic_update_slice(b, x, f, &at);
  }
  tpu_view w = *v;
  bool overlaps = false;
  for (int i = 0; i < v->rank; i++)
    if (v->strides[i] == 0 && v->sizes[i] > 1) {
      w.sizes[i] = 1;
      overlaps = true;
    }
  if (overlaps) value = resolve_overlap(b, x, v, &w, value, adds);
  numel = tpu_view_numel(&w);
  geometry g;
  analyse(&w, &g);
  if (!g.box) {
    tpu_hlo_value idx = flat(b, linear_indices(b, &w, false), numel);
    int64_t d2[2] = {numel, 1};
    idx = tpu_hlo_reshape(b, idx, 2, d2);
    tpu_hlo_scatter_dims d;
    memset(&d, 0, sizeof d);
    d.num_inserted = d.num_to_operand = 1;
    d.inserted_window_dims[0] = 0;
    d.scatter_dims_to_operand_dims[0] = 0;
    d.index_vector_dim = 1;
    return tpu_hlo_scatter(b, x, idx, flat(b, value, numel), &d, NULL, true);
  }
  int64_t len, avail;
  tpu_hlo_value r = box_region(b, x, &w, &g, &len, &avail);
  /* value (view order) -> sorted order with a trailing unit dim */
  int64_t moving[TPU_HLO_MAX_RANK];
  int k = 0;
  for (int i = 0; i < w.rank; i++)
    if (w.sizes[i] != 1) moving[k++] = w.sizes[i];
  tpu_hlo_value val = tpu_hlo_reshape(b, value, g.m, moving);
  int64_t perm[TPU_HLO_MAX_RANK];
  for (int j = 0; j < g.m; j++) {
    int pos = 0; /* position of view dim g.dim[j] among moving dims */
    for (int i = 0; i < g.dim[j]; i++)
      if (w.sizes[i] != 1) pos++;
    perm[j] = pos;
  }
  val = tpu_hlo_transpose(b, val, perm);
  int64_t shaped[TPU_HLO_MAX_RANK + 1];
  for (int j = 0; j < g.m; j++) shaped[j] = g.size[j];
  shaped[g.m] = 1;
  val = tpu_hlo_reshape(b, val, g.m + 1, shaped);
  tpu_hlo_value zeros[TPU_HLO_MAX_RANK + 1];
  for (int j = 0; j <= g.m; j++) zeros[j] = tpu_hlo_scalar_i64(b, TPU_S64, 0);
  r = tpu_hlo_dynamic_update_slice(b, r, val, zeros);
  tpu_hlo_value f = flat(b, r, len);
  if (avail < len) f = tpu_hlo_slice_dim(b, f, 0, 0, avail, 1);
  tpu_hlo_value at = tpu_hlo_scalar_i64(b, TPU_S64, w.offset);
  return tpu_hlo_dynamic_update_slice(b, x, f, &at);
}
