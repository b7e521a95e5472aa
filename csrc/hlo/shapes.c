/* Shape ops: reshape, broadcast, transpose (remembered, so that a transpose
 * of a transpose folds), slices, pads, concatenation, iota, reverse. Part of the builder (builder.c). */
#include "hlo/builder_impl.h"

/* --- shapes ------------------------------------------------------------------------------ */

tpu_hlo_value tpu_hlo_reshape(tpu_hlo_builder *b, tpu_hlo_value x, int rank, const int64_t *dims) {
  if (!check_operands(b, "stablehlo.reshape", &x, 1)) return TPU_HLO_NONE;
  tpu_hlo_type t = tpu_hlo_make_type(b->values[x].type.dtype, rank, dims);
  if (rank > TPU_HLO_MAX_RANK) return tpu_hlo_fail(b, TPU_ERR_NOT_IMPLEMENTED, "tensors of more than %d dimensions are not supported", TPU_HLO_MAX_RANK);
  if (tpu_hlo_type_numel(&t) != tpu_hlo_type_numel(&b->values[x].type))
    return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: reshape changes the element count");
  if (tpu_hlo_type_equal(&t, &b->values[x].type)) return x;
  return op1(b, "stablehlo.reshape", &x, 1, NULL, &t);
}

tpu_hlo_value tpu_hlo_broadcast_in_dim(tpu_hlo_builder *b, tpu_hlo_value x, const tpu_hlo_type *to,
                                       const int64_t *bdims) {
  if (!check_operands(b, "stablehlo.broadcast_in_dim", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type;
  bool identity = tx->rank == to->rank;
  for (int i = 0; i < tx->rank; i++) {
    if (bdims[i] < 0 || bdims[i] >= to->rank ||
        (tx->dims[i] != 1 && tx->dims[i] != to->dims[bdims[i]]))
      return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: bad broadcast_in_dim");
    if (bdims[i] != i || tx->dims[i] != to->dims[i]) identity = false;
  }
  tpu_hlo_type t = *to;
  t.dtype = tx->dtype;
  if (identity) return x;
  return op1_array(b, "stablehlo.broadcast_in_dim", &x, 1, "broadcast_dimensions", bdims, tx->rank, &t);
}

tpu_hlo_value tpu_hlo_broadcast_to(tpu_hlo_builder *b, tpu_hlo_value x, const tpu_hlo_type *to) {
  if (!check_operands(b, "broadcast", &x, 1)) return TPU_HLO_NONE;
  x = tpu_hlo_convert(b, x, to->dtype);
  if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type;
  if (tx->rank > to->rank)
    return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: cannot broadcast rank %d to rank %d",
                        tx->rank, to->rank);
  int64_t bdims[TPU_HLO_MAX_RANK];
  for (int i = 0; i < tx->rank; i++) bdims[i] = to->rank - tx->rank + i;
  return tpu_hlo_broadcast_in_dim(b, x, to, bdims);
}

tpu_hlo_value tpu_hlo_transpose(tpu_hlo_builder *b, tpu_hlo_value x, const int64_t *perm) {
  if (!check_operands(b, "stablehlo.transpose", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type;
  tpu_hlo_type t = *tx;
  bool identity = true;
  for (int i = 0; i < tx->rank; i++) {
    if (perm[i] < 0 || perm[i] >= tx->rank) return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: bad permutation");
    t.dims[i] = tx->dims[perm[i]];
    if (perm[i] != i) identity = false;
  }
  if (identity) return x;
  const value_info *vx = &b->values[x];
  if (vx->transposed != TPU_HLO_NONE && vx->depth == b->depth) { /* a transpose of a transpose: one */
    int64_t both[TPU_HLO_MAX_RANK];
    for (int i = 0; i < tx->rank; i++) both[i] = vx->perm[perm[i]];
    return tpu_hlo_transpose(b, vx->transposed, both);
  }
  const int rank = tx->rank;
  tpu_hlo_value y = op1_array(b, "stablehlo.transpose", &x, 1, "permutation", perm, rank, &t); /* may move b->values */
  if (valid(b, y)) {
    value_info *vy = &b->values[y];
    vy->transposed = x;
    vy->depth = (int8_t)b->depth;
    for (int i = 0; i < rank; i++) vy->perm[i] = (int8_t)perm[i];
  }
  return y;
}

bool tpu_hlo_is_transpose(const tpu_hlo_builder *b, tpu_hlo_value v, const int64_t *perm) {
  if (!valid(b, v) || b->values[v].transposed == TPU_HLO_NONE || b->values[v].depth != b->depth) return false;
  for (int i = 0; i < b->values[v].type.rank; i++)
    if (b->values[v].perm[i] != perm[i]) return false;
  return true;
}

tpu_hlo_value tpu_hlo_slice(tpu_hlo_builder *b, tpu_hlo_value x, const int64_t *start,
                            const int64_t *limit, const int64_t *stride) {
  if (!check_operands(b, "stablehlo.slice", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type;
  tpu_hlo_type t = *tx;
  bool identity = true;
  for (int i = 0; i < tx->rank; i++) {
    int64_t st = stride ? stride[i] : 1;
    if (st < 1 || start[i] < 0 || limit[i] > tx->dims[i] || start[i] > limit[i])
      return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: bad slice of dim %d", i);
    t.dims[i] = (limit[i] - start[i] + st - 1) / st;
    if (t.dims[i] != tx->dims[i]) identity = false;
  }
  if (identity) return x;
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  int64_t ones[TPU_HLO_MAX_RANK];
  for (int i = 0; i < tx->rank; i++) ones[i] = 1;
  tpu_strbuf_puts(&attrs, "start_indices = ");
  put_i64_array(&attrs, start, tx->rank);
  tpu_strbuf_puts(&attrs, ", limit_indices = ");
  put_i64_array(&attrs, limit, tx->rank);
  tpu_strbuf_puts(&attrs, ", strides = ");
  put_i64_array(&attrs, stride ? stride : ones, tx->rank);
  tpu_hlo_value out = op1(b, "stablehlo.slice", &x, 1, attr_text(b, &attrs), &t);
  tpu_strbuf_release(&attrs);
  return out;
}

tpu_hlo_value tpu_hlo_slice_dim(tpu_hlo_builder *b, tpu_hlo_value x, int dim, int64_t start,
                                int64_t limit, int64_t stride) {
  if (!check_operands(b, "stablehlo.slice", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type;
  if (dim < 0 || dim >= tx->rank) return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: bad slice dim");
  int64_t s[TPU_HLO_MAX_RANK], l[TPU_HLO_MAX_RANK], st[TPU_HLO_MAX_RANK];
  for (int i = 0; i < tx->rank; i++) {
    s[i] = 0;
    l[i] = tx->dims[i];
    st[i] = 1;
  }
  s[dim] = start;
  l[dim] = limit;
  st[dim] = stride;
  return tpu_hlo_slice(b, x, s, l, st);
}

tpu_hlo_value tpu_hlo_dynamic_slice(tpu_hlo_builder *b, tpu_hlo_value x, const tpu_hlo_value *starts,
                                    const int64_t *sizes) {
  if (!check_operands(b, "stablehlo.dynamic_slice", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type;
  int r = tx->rank;
  tpu_hlo_value ops[TPU_HLO_MAX_RANK + 1];
  ops[0] = x;
  for (int i = 0; i < r; i++) ops[i + 1] = starts[i];
  tpu_hlo_type t = *tx;
  for (int i = 0; i < r; i++) t.dims[i] = sizes[i];
  return op1_array(b, "stablehlo.dynamic_slice", ops, r + 1, "slice_sizes", sizes, r, &t);
}

tpu_hlo_value tpu_hlo_dynamic_update_slice(tpu_hlo_builder *b, tpu_hlo_value x, tpu_hlo_value update,
                                           const tpu_hlo_value *starts) {
  if (!check_operands(b, "stablehlo.dynamic_update_slice", &x, 1)) return TPU_HLO_NONE;
  int r = b->values[x].type.rank;
  tpu_hlo_value ops[TPU_HLO_MAX_RANK + 2];
  ops[0] = x;
  ops[1] = update;
  for (int i = 0; i < r; i++) ops[i + 2] = starts[i];
  return op1(b, "stablehlo.dynamic_update_slice", ops, r + 2, NULL, &b->values[x].type);
}

tpu_hlo_value tpu_hlo_concatenate(tpu_hlo_builder *b, const tpu_hlo_value *xs, int n, int dim) {
  if (n <= 0 || !check_operands(b, "stablehlo.concatenate", xs, n)) {
    if (n <= 0) tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: concatenate of nothing");
    return TPU_HLO_NONE;
  }
  if (n == 1) return xs[0];
  tpu_hlo_type t = b->values[xs[0]].type;
  t.dims[dim] = 0;
  for (int i = 0; i < n; i++) t.dims[dim] += b->values[xs[i]].type.dims[dim];
  char attrs[64];
  snprintf(attrs, sizeof attrs, "dimension = %d : i64", dim);
  return op1(b, "stablehlo.concatenate", xs, n, attrs, &t);
}

tpu_hlo_value tpu_hlo_pad(tpu_hlo_builder *b, tpu_hlo_value x, tpu_hlo_value pad_value,
                          const int64_t *low, const int64_t *high, const int64_t *interior) {
  tpu_hlo_value ops[2] = {x, pad_value};
  if (!check_operands(b, "stablehlo.pad", ops, 2)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type;
  tpu_hlo_type t = *tx;
  int64_t zeros[TPU_HLO_MAX_RANK] = {0};
  bool identity = true;
  for (int i = 0; i < tx->rank; i++) {
    int64_t in = interior ? interior[i] : 0;
    int64_t base = tx->dims[i] == 0 ? 0 : tx->dims[i] + (tx->dims[i] - 1) * in;
    t.dims[i] = base + low[i] + high[i];
    if (t.dims[i] < 0) return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: pad gives a negative size");
    if (low[i] || high[i] || in) identity = false;
  }
  if (identity) return x;
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&attrs, "edge_padding_low = ");
  put_i64_array(&attrs, low, tx->rank);
  tpu_strbuf_puts(&attrs, ", edge_padding_high = ");
  put_i64_array(&attrs, high, tx->rank);
  tpu_strbuf_puts(&attrs, ", interior_padding = ");
  put_i64_array(&attrs, interior ? interior : zeros, tx->rank);
  tpu_hlo_value out = op1(b, "stablehlo.pad", ops, 2, attr_text(b, &attrs), &t);
  tpu_strbuf_release(&attrs);
  return out;
}

tpu_hlo_value tpu_hlo_iota(tpu_hlo_builder *b, const tpu_hlo_type *t, int dim) {
  if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
  if (dim < 0 || dim >= t->rank) return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: bad iota dim");
  char attrs[64];
  snprintf(attrs, sizeof attrs, "iota_dimension = %d : i64", dim);
  return op1(b, "stablehlo.iota", NULL, 0, attrs, t);
}

tpu_hlo_value tpu_hlo_reverse(tpu_hlo_builder *b, tpu_hlo_value x, const int64_t *dims, int n) {
  if (!check_operands(b, "stablehlo.reverse", &x, 1)) return TPU_HLO_NONE;
  if (n == 0) return x;
  return op1_array(b, "stablehlo.reverse", &x, 1, "dimensions", dims, n, &b->values[x].type);
}
