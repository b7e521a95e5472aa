/* View ops as value transforms, for compiled graphs.
 *
 * In eager mode view ops never reach a rule: PyTorch's own kernels change
 * sizes and strides, and the storage model reads views inside programs. In a
 * functional FX graph they are ordinary nodes on values, lowered here to
 * reshape/transpose/slice/broadcast. A value is logically contiguous, so
 * ops defined on strides (as_strided, diagonal, unfold) read it as a dense
 * 1-D storage with the view code eager uses; where an as_strided's input is
 * a view laid out otherwise, the compile path hands it the storage itself
 * (torchtpu/compile.py, _storage_of). The *_scatter ops, a view's functional
 * inverse (a write into part of a tensor, functionalized), write through the
 * same geometry with the view code eager's writes use. These rules are internal: they
 * are looked up by the compile path and never registered with the
 * dispatcher. */
#include "hlo/view.h"
#include "lower/rules.h"

/* view, _unsafe_view, reshape, squeeze, unsqueeze, flatten …: the output
 * type says everything. */
static tpu_status_t reshape_rule(tpu_lower_ctx *c) {
  return done(c, tpu_hlo_reshape(B, tpu_lower_tensor(c, 0), OUT->rank, OUT->dims));
}

/* expand(self, size): NumPy-style broadcast to the output shape. */
static tpu_status_t expand_rule(tpu_lower_ctx *c) {
  return done(c, tpu_hlo_broadcast_to(B, tpu_lower_tensor(c, 0), OUT));
}

/* permute(self, dims) */
static tpu_status_t permute_rule(tpu_lower_ctx *c) {
  int rank = c->args[0].rank;
  int64_t perm[TPU_HLO_MAX_RANK];
  for (int i = 0; i < rank; i++) perm[i] = tpu_lower_wrap_dim(c, c->args[1].ints[i], rank);
  return done(c, tpu_hlo_transpose(B, tpu_lower_tensor(c, 0), perm));
}

/* transpose.int(self, dim0, dim1) and t(self) */
static tpu_status_t transpose_rule(tpu_lower_ctx *c) {
  int rank = c->args[0].rank;
  int64_t perm[TPU_HLO_MAX_RANK];
  for (int i = 0; i < rank; i++) perm[i] = i;
  if (rank >= 2) {
    int d0 = c->num_args > 1 ? tpu_lower_wrap_dim(c, tpu_lower_int(c, 1, 0), rank) : 0;
    int d1 = c->num_args > 2 ? tpu_lower_wrap_dim(c, tpu_lower_int(c, 2, 1), rank) : 1;
    perm[d0] = d1;
    perm[d1] = d0;
  }
  return done(c, tpu_hlo_transpose(B, tpu_lower_tensor(c, 0), perm));
}

/* PyTorch's slice bounds: wrap negatives, clamp to [0, size], end >= start. */
static void slice_bounds(int64_t size, int64_t *start, int64_t *end) {
  if (*start < 0) *start += size;
  if (*end < 0) *end += size;
  if (*start < 0) *start = 0;
  if (*start > size) *start = size;
  if (*end > size) *end = size;
  if (*end < *start) *end = *start;
}

/* slice.Tensor(self, dim, start?, end?, step) */
static tpu_status_t slice_rule(tpu_lower_ctx *c) {
  int rank = c->args[0].rank;
  int dim = tpu_lower_wrap_dim(c, tpu_lower_int(c, 1, 0), rank);
  int64_t size = c->args[0].sizes[dim];
  int64_t start = tpu_lower_int(c, 2, 0), end = tpu_lower_int(c, 3, INT64_MAX), step = tpu_lower_int(c, 4, 1);
  slice_bounds(size, &start, &end);
  return done(c, tpu_hlo_slice_dim(B, tpu_lower_tensor(c, 0), dim, start, end, step));
}

/* select.int(self, dim, index) */
static tpu_status_t select_rule(tpu_lower_ctx *c) {
  int rank = c->args[0].rank;
  int dim = tpu_lower_wrap_dim(c, tpu_lower_int(c, 1, 0), rank);
  int64_t i = tpu_lower_int(c, 2, 0);
  if (i < 0) i += c->args[0].sizes[dim];
  tpu_hlo_value x = tpu_hlo_slice_dim(B, tpu_lower_tensor(c, 0), dim, i, i + 1, 1);
  return done(c, tpu_hlo_reshape(B, x, OUT->rank, OUT->dims));
}

/* split.Tensor / split_with_sizes / unbind / chunk: consecutive slices along
 * a dim whose sizes the outputs carry. data: the index of the dim argument. */
static tpu_status_t split_rule(tpu_lower_ctx *c) {
  int rank = c->args[0].rank;
  int dim = tpu_lower_wrap_dim(c, tpu_lower_int(c, (int)c->data, 0), rank);
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  bool unbind = rank > 0 && c->num_outputs > 0 && c->out_types[0].rank == rank - 1;
  int64_t at = 0;
  for (int i = 0; i < c->num_outputs; i++) {
    int64_t len = unbind ? 1 : c->out_types[i].dims[dim];
    tpu_hlo_value piece = tpu_hlo_slice_dim(B, x, dim, at, at + len, 1);
    tpu_lower_set_output(c, i, tpu_hlo_reshape(B, piece, c->out_types[i].rank, c->out_types[i].dims));
    at += len;
  }
  return NULL;
}

/* A dense value read with a stride geometry (as if it were its storage). */
static tpu_hlo_value strided(tpu_lower_ctx *c, tpu_hlo_value x, const int64_t *sizes, const int64_t *strides,
                             int rank, int64_t offset) {
  int64_t n = tpu_hlo_type_numel(tpu_hlo_type_of(B, x));
  tpu_view v = {.dtype = tpu_hlo_dtype(B, x), .rank = rank, .offset = offset};
  for (int i = 0; i < rank; i++) {
    v.sizes[i] = sizes[i];
    v.strides[i] = strides[i];
  }
  return tpu_hlo_view_read(B, tpu_hlo_reshape(B, x, 1, &n), &v);
}

/* A *_scatter op's result: self (argument 0) with the elements a stride
 * geometry reads of it (as if it were its storage) replaced by src
 * (argument 1, shaped |sizes|): the inverse of strided(). */
static tpu_status_t scatter_done(tpu_lower_ctx *c, const int64_t *sizes, const int64_t *strides, int rank,
                                 int64_t offset) {
  tpu_view v = {.dtype = OUT->dtype, .rank = rank, .offset = offset};
  tpu_hlo_type src_type = {.dtype = OUT->dtype, .rank = rank};
  for (int i = 0; i < rank; i++) {
    v.sizes[i] = src_type.dims[i] = sizes[i];
    v.strides[i] = strides[i];
  }
  int64_t n = tpu_hlo_type_numel(OUT);
  tpu_hlo_value self = tpu_hlo_reshape(B, tpu_lower_operand(c, 0, OUT->dtype, OUT), 1, &n);
  tpu_hlo_value written = tpu_hlo_view_write(B, self, &v, tpu_lower_operand(c, 1, OUT->dtype, &src_type), false);
  return done(c, tpu_hlo_reshape(B, written, OUT->rank, OUT->dims));
}

static void contiguous_strides(const int64_t *sizes, int rank, int64_t *strides) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= sizes[i] > 1 ? sizes[i] : 1;
  }
}

/* as_strided(self, size, stride, storage_offset?) on a value */
static tpu_status_t as_strided_rule(tpu_lower_ctx *c) {
  return done(c, strided(c, tpu_lower_tensor(c, 0), c->args[1].ints, c->args[2].ints, c->args[1].n,
                         tpu_lower_int(c, 3, 0)));
}

/* The view of self (sizes |in|, dense) that slice(dim, start, end, step)
 * reads: into |sizes|, |strides|; returns its offset. */
static int64_t slice_view(const int64_t *in, int rank, int dim, int64_t start, int64_t end, int64_t step,
                          int64_t *sizes, int64_t *strides) {
  contiguous_strides(in, rank, strides);
  for (int i = 0; i < rank; i++) sizes[i] = in[i];
  sizes[dim] = end > start ? (end - start + step - 1) / step : 0;
  int64_t offset = start * strides[dim];
  strides[dim] *= step;
  return offset;
}

/* The view diagonal(offset, d1, d2) reads of self (|in|, dense): its rank
 * (the diagonal's length |len| last) into |sizes|, |strides|, |*out_offset|. */
static int diagonal_view(const int64_t *in, int rank, int64_t off, int d1, int d2, int64_t len, int64_t *sizes,
                         int64_t *strides, int64_t *out_offset) {
  int64_t in_strides[TPU_HLO_MAX_RANK] = {0};
  contiguous_strides(in, rank, in_strides);
  int64_t offset = off >= 0 ? off * in_strides[d2] : -off * in_strides[d1];
  int k = 0;
  for (int i = 0; i < rank; i++)
    if (i != d1 && i != d2) {
      sizes[k] = in[i];
      strides[k++] = in_strides[i];
    }
  sizes[k] = len;
  strides[k++] = in_strides[d1] + in_strides[d2];
  *out_offset = len == 0 ? 0 : offset;
  return k;
}

/* diagonal(self, offset, dim1, dim2) */
static tpu_status_t diagonal_rule(tpu_lower_ctx *c) {
  int rank = c->args[0].rank;
  int d1 = tpu_lower_wrap_dim(c, tpu_lower_int(c, 2, 0), rank), d2 = tpu_lower_wrap_dim(c, tpu_lower_int(c, 3, 1), rank);
  int64_t sizes[TPU_HLO_MAX_RANK], strides[TPU_HLO_MAX_RANK], offset;
  int k = diagonal_view(c->args[0].sizes, rank, tpu_lower_int(c, 1, 0), d1, d2, OUT->dims[OUT->rank - 1], sizes,
                        strides, &offset);
  return done(c, strided(c, tpu_lower_tensor(c, 0), sizes, strides, k, offset));
}

/* diagonal_scatter(self, src, offset, dim1, dim2): self with its diagonal
 * replaced by src. */
static tpu_status_t diagonal_scatter_rule(tpu_lower_ctx *c) {
  int rank = c->args[0].rank;
  int d1 = tpu_lower_wrap_dim(c, tpu_lower_int(c, 3, 0), rank), d2 = tpu_lower_wrap_dim(c, tpu_lower_int(c, 4, 1), rank);
  const tpu_lower_arg *src_arg = &c->args[1];
  int64_t sizes[TPU_HLO_MAX_RANK], strides[TPU_HLO_MAX_RANK], offset;
  int k = diagonal_view(c->args[0].sizes, rank, tpu_lower_int(c, 2, 0), d1, d2,
                        src_arg->rank > 0 ? src_arg->sizes[src_arg->rank - 1] : 1, sizes, strides, &offset);
  return scatter_done(c, sizes, strides, k, offset);
}

/* slice_scatter(self, src, dim, start?, end?, step): self with the slice's
 * elements replaced by src. */
static tpu_status_t slice_scatter_rule(tpu_lower_ctx *c) {
  int rank = c->args[0].rank;
  int dim = tpu_lower_wrap_dim(c, tpu_lower_int(c, 2, 0), rank);
  int64_t start = tpu_lower_int(c, 3, 0), end = tpu_lower_int(c, 4, INT64_MAX), step = tpu_lower_int(c, 5, 1);
  slice_bounds(c->args[0].sizes[dim], &start, &end);
  int64_t sizes[TPU_HLO_MAX_RANK], strides[TPU_HLO_MAX_RANK];
  int64_t offset = slice_view(c->args[0].sizes, rank, dim, start, end, step, sizes, strides);
  return scatter_done(c, sizes, strides, rank, offset);
}

/* select_scatter(self, src, dim, index): self with the selected elements
 * replaced by src (self's shape without dim). */
static tpu_status_t select_scatter_rule(tpu_lower_ctx *c) {
  int rank = c->args[0].rank;
  int dim = tpu_lower_wrap_dim(c, tpu_lower_int(c, 2, 0), rank);
  int64_t i = tpu_lower_int(c, 3, 0);
  if (i < 0) i += c->args[0].sizes[dim];
  int64_t sizes[TPU_HLO_MAX_RANK], strides[TPU_HLO_MAX_RANK];
  int64_t offset = slice_view(c->args[0].sizes, rank, dim, i, i + 1, 1, sizes, strides);
  for (int d = dim; d + 1 < rank; d++) { /* drop dim */
    sizes[d] = sizes[d + 1];
    strides[d] = strides[d + 1];
  }
  return scatter_done(c, sizes, strides, rank - 1, offset);
}

/* unfold(self, dimension, size, step) */
static tpu_status_t unfold_rule(tpu_lower_ctx *c) {
  int rank = c->args[0].rank;
  int d = tpu_lower_wrap_dim(c, tpu_lower_int(c, 1, 0), rank);
  int64_t size = tpu_lower_int(c, 2, 1), step = tpu_lower_int(c, 3, 1);
  int64_t in_strides[TPU_HLO_MAX_RANK], strides[TPU_HLO_MAX_RANK];
  contiguous_strides(c->args[0].sizes, rank, in_strides);
  for (int i = 0; i < rank; i++) strides[i] = in_strides[i];
  if (rank > 0) strides[d] = in_strides[d] * step;
  strides[OUT->rank - 1] = rank > 0 ? in_strides[d] : 1;
  (void)size; /* the output's last dim */
  return done(c, strided(c, tpu_lower_tensor(c, 0), OUT->dims, strides, OUT->rank, 0));
}

/* view.dtype(self, dtype): the same bytes, another element type. */
static tpu_status_t view_dtype_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  int64_t n = tpu_hlo_type_numel(tpu_hlo_type_of(B, x));
  tpu_hlo_value bytes = tpu_hlo_storage_as(B, tpu_hlo_reshape(B, x, 1, &n), OUT->dtype);
  return done(c, tpu_hlo_reshape(B, bytes, OUT->rank, OUT->dims));
}

/* alias, detach, clone, lift_fresh_copy, _to_copy, contiguous: the value,
 * converted to the output's dtype. */
static tpu_status_t identity_rule(tpu_lower_ctx *c) { return done(c, tpu_lower_tensor(c, 0)); }

/* copy(self, src, non_blocking): src broadcast and converted to self's type. */
static tpu_status_t functional_copy_rule(tpu_lower_ctx *c) {
  return done(c, tpu_lower_operand(c, 1, OUT->dtype, OUT));
}

static tpu_status_t view_as_real_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  tpu_hlo_type part = *OUT;
  part.dims[part.rank - 1] = 1;
  tpu_hlo_value parts[2] = {tpu_hlo_reshape(B, tpu_hlo_unary(B, TPU_HLO_REAL, x), part.rank, part.dims),
                            tpu_hlo_reshape(B, tpu_hlo_unary(B, TPU_HLO_IMAG, x), part.rank, part.dims)};
  return done(c, tpu_hlo_concatenate(B, parts, 2, OUT->rank - 1));
}

static tpu_status_t view_as_complex_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  int r = c->args[0].rank;
  tpu_hlo_value re = tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, x, r - 1, 0, 1, 1), OUT->rank, OUT->dims);
  tpu_hlo_value im = tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, x, r - 1, 1, 2, 1), OUT->rank, OUT->dims);
  return done(c, tpu_hlo_binary(B, TPU_HLO_COMPLEX, re, im));
}

/* Factories in graphs: a fill value (data: the argument holding it) or, for
 * the empty ones, zeros (their contents are unspecified). */
static tpu_status_t fill_factory_rule(tpu_lower_ctx *c) {
  if (c->data < 0) return done(c, tpu_hlo_const_f64(B, OUT, (double)(-1 - c->data)));
  return done(c, tpu_lower_operand(c, (int)c->data, OUT->dtype, OUT));
}

static tpu_status_t real_imag_rule(tpu_lower_ctx *c) {
  return done(c, tpu_hlo_unary(B, (tpu_hlo_unary_t)c->data, tpu_lower_tensor(c, 0)));
}

const tpu_lower_rule tpu_rules_view[] = {
    {{"view", "_unsafe_view", "view_copy", "reshape"}, reshape_rule, TPU_RULE_INTERNAL, 0},
    {{"squeeze", "squeeze.dim", "squeeze.dims", "unsqueeze"}, reshape_rule, TPU_RULE_INTERNAL, 0},
    {{"_reshape_alias", "flatten.using_ints", "squeeze_copy.dim", "unsqueeze_copy"}, reshape_rule, TPU_RULE_INTERNAL, 0},
    {{"expand", "expand_copy"}, expand_rule, TPU_RULE_INTERNAL, 0},
    {{"permute", "permute_copy"}, permute_rule, TPU_RULE_INTERNAL, 0},
    {{"transpose.int", "t", "transpose_copy.int", "t_copy"}, transpose_rule, TPU_RULE_INTERNAL, 0},
    {{"slice.Tensor", "slice_copy.Tensor"}, slice_rule, TPU_RULE_INTERNAL, 0},
    {{"select.int", "select_copy.int"}, select_rule, TPU_RULE_INTERNAL, 0},
    {{"split.Tensor", "split_with_sizes", "split_copy.Tensor", "split_with_sizes_copy"}, split_rule, TPU_RULE_INTERNAL, 2},
    {{"unbind.int", "unbind_copy.int"}, split_rule, TPU_RULE_INTERNAL, 1},
    {{"as_strided", "as_strided_copy"}, as_strided_rule, TPU_RULE_INTERNAL, 0},
    {{"diagonal", "diagonal_copy"}, diagonal_rule, TPU_RULE_INTERNAL, 0},
    {{"slice_scatter"}, slice_scatter_rule, TPU_RULE_INTERNAL, 0},
    {{"select_scatter"}, select_scatter_rule, TPU_RULE_INTERNAL, 0},
    {{"diagonal_scatter"}, diagonal_scatter_rule, TPU_RULE_INTERNAL, 0},
    {{"unfold", "unfold_copy"}, unfold_rule, TPU_RULE_INTERNAL, 0},
    {{"view.dtype", "view_copy.dtype"}, view_dtype_rule, TPU_RULE_INTERNAL, 0},
    {{"alias", "detach", "clone", "lift_fresh_copy"}, identity_rule, TPU_RULE_INTERNAL, 0},
    {{"_to_copy", "contiguous", "alias_copy", "detach_copy"}, identity_rule, TPU_RULE_INTERNAL, 0},
    {{"copy"}, functional_copy_rule, TPU_RULE_INTERNAL, 0},
    {{"view_as_real", "view_as_real_copy"}, view_as_real_rule, TPU_RULE_INTERNAL, 0},
    {{"view_as_complex", "view_as_complex_copy"}, view_as_complex_rule, TPU_RULE_INTERNAL, 0},
    {{"full", "full_like"}, fill_factory_rule, TPU_RULE_INTERNAL, 1},
    {{"scalar_tensor"}, fill_factory_rule, TPU_RULE_INTERNAL, 0},
    {{"new_full"}, fill_factory_rule, TPU_RULE_INTERNAL, 2},
    {{"zeros", "zeros_like", "new_zeros", "empty.memory_format"}, fill_factory_rule, TPU_RULE_INTERNAL, -1},
    {{"empty_like", "empty_strided", "new_empty", "new_empty_strided"}, fill_factory_rule, TPU_RULE_INTERNAL, -1},
    {{"ones", "ones_like", "new_ones"}, fill_factory_rule, TPU_RULE_INTERNAL, -2},
    {{"real"}, real_imag_rule, TPU_RULE_INTERNAL, TPU_HLO_REAL},
    {{"imag"}, real_imag_rule, TPU_RULE_INTERNAL, TPU_HLO_IMAG},
};
TPU_COUNT_RULES(view);
