/* Reductions, windows, gather/scatter, sort and rng: the ops that take a
 * region (a reduction or comparison body) or index maps. Part of the builder (builder.c). */
#include "hlo/builder_impl.h"

/* --- reductions, windows, gather/scatter, sort, rng ---------------------------------- */

void tpu_hlo_reduce(tpu_hlo_builder *b, const tpu_hlo_value *xs, const tpu_hlo_value *inits, int n,
                    const int64_t *dims, int num_dims, tpu_hlo_region *body, tpu_hlo_value *out) {
  tpu_hlo_value ops[2 * 8];
  tpu_hlo_type types[8];
  if (n > 8 || !check_operands(b, "stablehlo.reduce", xs, n) ||
      !check_operands(b, "stablehlo.reduce", inits, n)) {
    tpu_hlo_region_release(body);
    for (int i = 0; i < n; i++) out[i] = TPU_HLO_NONE;
    return;
  }
  for (int i = 0; i < n; i++) {
    ops[i] = xs[i];
    ops[n + i] = inits[i];
    const tpu_hlo_type *tx = &b->values[xs[i]].type;
    types[i] = tpu_hlo_make_type(tx->dtype, 0, NULL);
    for (int d = 0; d < tx->rank; d++)
      if (!contains(dims, num_dims, d)) types[i].dims[types[i].rank++] = tx->dims[d];
  }
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&attrs, "dimensions = ");
  put_i64_array(&attrs, dims, num_dims);
  tpu_hlo_op(b, "stablehlo.reduce", ops, 2 * n, body, 1, attr_text(b, &attrs), types, n, out);
  tpu_strbuf_release(&attrs);
}

tpu_hlo_value tpu_hlo_reduce_simple(tpu_hlo_builder *b, tpu_hlo_value x, tpu_hlo_value init,
                                    tpu_hlo_binary_t op, const int64_t *dims, int num_dims) {
  if (!check_operands(b, "stablehlo.reduce", &x, 1)) return TPU_HLO_NONE;
  if (num_dims == 0) return x;
  tpu_hlo_region body;
  tpu_hlo_region_binary(b, op, b->values[x].type.dtype, &body);
  tpu_hlo_value out;
  tpu_hlo_reduce(b, &x, &init, 1, dims, num_dims, &body, &out);
  return out;
}

void tpu_hlo_window_init(tpu_hlo_window *w, int rank) {
  memset(w, 0, sizeof *w);
  for (int i = 0; i < rank; i++) w->dims[i] = w->strides[i] = w->base_dilations[i] = w->window_dilations[i] = 1;
}

static void put_window_attrs(tpu_strbuf *sb, const tpu_hlo_window *w, int rank, bool dilations) {
  if (dilations) {
    tpu_strbuf_puts(sb, "base_dilations = ");
    put_i64_array(sb, w->base_dilations, rank);
    tpu_strbuf_puts(sb, ", ");
  }
  tpu_strbuf_puts(sb, "padding = dense<[");
  for (int i = 0; i < rank; i++)
    tpu_strbuf_printf(sb, "%s[%lld, %lld]", i ? ", " : "", (long long)w->pad_lo[i], (long long)w->pad_hi[i]);
  tpu_strbuf_printf(sb, "]> : tensor<%dx2xi64>", rank);
  if (dilations) {
    tpu_strbuf_puts(sb, ", window_dilations = ");
    put_i64_array(sb, w->window_dilations, rank);
  }
  tpu_strbuf_puts(sb, ", window_dimensions = ");
  put_i64_array(sb, w->dims, rank);
  tpu_strbuf_puts(sb, ", window_strides = ");
  put_i64_array(sb, w->strides, rank);
}

void tpu_hlo_reduce_window(tpu_hlo_builder *b, const tpu_hlo_value *xs, const tpu_hlo_value *inits,
                           int n, const tpu_hlo_window *w, tpu_hlo_region *body,
                           tpu_hlo_value *out) {
  tpu_hlo_value ops[2 * 8];
  tpu_hlo_type types[8];
  if (n > 8 || !check_operands(b, "stablehlo.reduce_window", xs, n) ||
      !check_operands(b, "stablehlo.reduce_window", inits, n)) {
    tpu_hlo_region_release(body);
    for (int i = 0; i < n; i++) out[i] = TPU_HLO_NONE;
    return;
  }
  int rank = b->values[xs[0]].type.rank;
  for (int i = 0; i < n; i++) {
    ops[i] = xs[i];
    ops[n + i] = inits[i];
    types[i] = b->values[xs[i]].type;
    for (int d = 0; d < rank; d++) {
      int64_t in = types[i].dims[d];
      int64_t dilated_in = in == 0 ? 0 : (in - 1) * w->base_dilations[d] + 1;
      int64_t padded = dilated_in + w->pad_lo[d] + w->pad_hi[d];
      int64_t win = (w->dims[d] - 1) * w->window_dilations[d] + 1;
      types[i].dims[d] = padded < win ? 0 : (padded - win) / w->strides[d] + 1;
    }
  }
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  put_window_attrs(&attrs, w, rank, true);
  tpu_hlo_op(b, "stablehlo.reduce_window", ops, 2 * n, body, 1, attr_text(b, &attrs), types, n, out);
  tpu_strbuf_release(&attrs);
}

tpu_hlo_value tpu_hlo_select_and_scatter(tpu_hlo_builder *b, tpu_hlo_value operand,
                                         tpu_hlo_value source, tpu_hlo_value init,
                                         const tpu_hlo_window *w, tpu_hlo_region *select,
                                         tpu_hlo_region *scatter) {
  tpu_hlo_value ops[3] = {operand, source, init};
  tpu_hlo_region regions[2] = {*select, *scatter};
  select->text = scatter->text = NULL;
  if (!check_operands(b, "stablehlo.select_and_scatter", ops, 3)) {
    tpu_hlo_region_release(&regions[0]);
    tpu_hlo_region_release(&regions[1]);
    return TPU_HLO_NONE;
  }
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  put_window_attrs(&attrs, w, b->values[operand].type.rank, false);
  tpu_hlo_value out;
  tpu_hlo_op(b, "stablehlo.select_and_scatter", ops, 3, regions, 2, attr_text(b, &attrs),
             &b->values[operand].type, 1, &out);
  tpu_strbuf_release(&attrs);
  return out;
}

tpu_hlo_value tpu_hlo_gather(tpu_hlo_builder *b, tpu_hlo_value operand, tpu_hlo_value indices,
                             const tpu_hlo_gather_dims *d, const int64_t *slice_sizes,
                             const tpu_hlo_type *out) {
  tpu_hlo_value ops[2] = {operand, indices};
  if (!check_operands(b, "stablehlo.gather", ops, 2)) return TPU_HLO_NONE;
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&attrs, "dimension_numbers = #stablehlo.gather<offset_dims = ");
  put_i64_list(&attrs, d->offset_dims, d->num_offset);
  tpu_strbuf_puts(&attrs, ", collapsed_slice_dims = ");
  put_i64_list(&attrs, d->collapsed_slice_dims, d->num_collapsed);
  if (d->num_operand_batch) {
    tpu_strbuf_puts(&attrs, ", operand_batching_dims = ");
    put_i64_list(&attrs, d->operand_batching_dims, d->num_operand_batch);
    tpu_strbuf_puts(&attrs, ", start_indices_batching_dims = ");
    put_i64_list(&attrs, d->start_indices_batching_dims, d->num_indices_batch);
  }
  tpu_strbuf_puts(&attrs, ", start_index_map = ");
  put_i64_list(&attrs, d->start_index_map, d->num_start_map);
  tpu_strbuf_printf(&attrs, ", index_vector_dim = %lld>, indices_are_sorted = false, slice_sizes = ",
                    (long long)d->index_vector_dim);
  put_i64_array(&attrs, slice_sizes, b->values[operand].type.rank);
  tpu_hlo_value r = op1(b, "stablehlo.gather", ops, 2, attr_text(b, &attrs), out);
  tpu_strbuf_release(&attrs);
  return r;
}

tpu_hlo_value tpu_hlo_scatter(tpu_hlo_builder *b, tpu_hlo_value operand, tpu_hlo_value indices,
                              tpu_hlo_value updates, const tpu_hlo_scatter_dims *d,
                              tpu_hlo_region *body, bool unique_indices) {
  tpu_hlo_value ops[3] = {operand, indices, updates};
  tpu_hlo_region region = {NULL};
  if (body != NULL) {
    region = *body;
    body->text = NULL;
  }
  if (!check_operands(b, "stablehlo.scatter", ops, 3)) {
    tpu_hlo_region_release(&region);
    return TPU_HLO_NONE;
  }
  if (region.text == NULL) { /* replace: the update wins */
    tpu_hlo_type s = tpu_hlo_make_type(b->values[operand].type.dtype, 0, NULL);
    tpu_hlo_type ts[2] = {s, s};
    tpu_hlo_value args[2];
    tpu_hlo_region_begin(b, 2, ts, args);
    tpu_hlo_region_end(b, &args[1], 1, &region);
  }
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&attrs, "indices_are_sorted = false, scatter_dimension_numbers = "
                          "#stablehlo.scatter<update_window_dims = ");
  put_i64_list(&attrs, d->update_window_dims, d->num_update_window);
  tpu_strbuf_puts(&attrs, ", inserted_window_dims = ");
  put_i64_list(&attrs, d->inserted_window_dims, d->num_inserted);
  if (d->num_input_batch) {
    tpu_strbuf_puts(&attrs, ", input_batching_dims = ");
    put_i64_list(&attrs, d->input_batching_dims, d->num_input_batch);
    tpu_strbuf_puts(&attrs, ", scatter_indices_batching_dims = ");
    put_i64_list(&attrs, d->scatter_indices_batching_dims, d->num_indices_batch);
  }
  tpu_strbuf_puts(&attrs, ", scatter_dims_to_operand_dims = ");
  put_i64_list(&attrs, d->scatter_dims_to_operand_dims, d->num_to_operand);
  tpu_strbuf_printf(&attrs, ", index_vector_dim = %lld>, unique_indices = %s",
                    (long long)d->index_vector_dim, unique_indices ? "true" : "false");
  tpu_hlo_value out;
  tpu_hlo_op(b, "stablehlo.scatter", ops, 3, &region, 1, attr_text(b, &attrs), &b->values[operand].type, 1,
             &out);
  tpu_strbuf_release(&attrs);
  return out;
}

void tpu_hlo_sort(tpu_hlo_builder *b, const tpu_hlo_value *xs, int n, int dim, bool stable,
                  tpu_hlo_region *cmp, tpu_hlo_value *out) {
  tpu_hlo_type types[8];
  if (n > 8 || !check_operands(b, "stablehlo.sort", xs, n)) {
    tpu_hlo_region_release(cmp);
    for (int i = 0; i < n; i++) out[i] = TPU_HLO_NONE;
    return;
  }
  for (int i = 0; i < n; i++) types[i] = b->values[xs[i]].type;
  char attrs[96];
  snprintf(attrs, sizeof attrs, "dimension = %d : i64, is_stable = %s", dim, stable ? "true" : "false");
  tpu_hlo_op(b, "stablehlo.sort", xs, n, cmp, 1, attrs, types, n, out);
}

void tpu_hlo_rng_bits(tpu_hlo_builder *b, tpu_hlo_value state, const tpu_hlo_type *bits_type,
                      tpu_hlo_value *out_state, tpu_hlo_value *out_bits) {
  tpu_hlo_value outs[2] = {TPU_HLO_NONE, TPU_HLO_NONE};
  if (check_operands(b, "stablehlo.rng_bit_generator", &state, 1)) {
    tpu_hlo_type types[2] = {b->values[state].type, *bits_type};
    tpu_hlo_op(b, "stablehlo.rng_bit_generator", &state, 1, NULL, 0,
               "rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>", types, 2, outs);
  }
  *out_state = outs[0];
  *out_bits = outs[1];
}
