/* Linear algebra ops: dot_general and convolution, with their layouts and
 * precisions. Part of the builder (builder.c). */
#include "hlo/builder_impl.h"

/* --- linear algebra ------------------------------------------------------------------- */

static const char *precision_name(tpu_hlo_precision_t p) {
  return p == TPU_HLO_PRECISION_HIGHEST ? "HIGHEST" : p == TPU_HLO_PRECISION_HIGH ? "HIGH" : "DEFAULT";
}

tpu_hlo_value tpu_hlo_dot_general(tpu_hlo_builder *b, tpu_hlo_value lhs, tpu_hlo_value rhs,
                                  const tpu_hlo_dot_dims *d, tpu_dtype_t out,
                                  tpu_hlo_precision_t precision) {
  tpu_hlo_value ops[2] = {lhs, rhs};
  if (!check_operands(b, "stablehlo.dot_general", ops, 2)) return TPU_HLO_NONE;
  const tpu_hlo_type *tl = &b->values[lhs].type, *tr = &b->values[rhs].type;
  if (tl->rank + tr->rank - d->num_batch - 2 * d->num_contract > TPU_HLO_MAX_RANK)
    return tpu_hlo_fail(b, TPU_ERR_NOT_IMPLEMENTED, "a dot product of more than %d dimensions", TPU_HLO_MAX_RANK);
  tpu_hlo_type t = tpu_hlo_make_type(out, 0, NULL);
  for (int i = 0; i < d->num_batch; i++) {
    if (tl->dims[d->lhs_batch[i]] != tr->dims[d->rhs_batch[i]])
      return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: dot batch dims differ");
    t.dims[t.rank++] = tl->dims[d->lhs_batch[i]];
  }
  for (int i = 0; i < d->num_contract; i++)
    if (tl->dims[d->lhs_contract[i]] != tr->dims[d->rhs_contract[i]])
      return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: dot contracting dims differ");
  for (int i = 0; i < tl->rank; i++)
    if (!contains(d->lhs_batch, d->num_batch, i) && !contains(d->lhs_contract, d->num_contract, i))
      t.dims[t.rank++] = tl->dims[i];
  for (int i = 0; i < tr->rank; i++)
    if (!contains(d->rhs_batch, d->num_batch, i) && !contains(d->rhs_contract, d->num_contract, i))
      t.dims[t.rank++] = tr->dims[i];
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&attrs, "dot_dimension_numbers = #stablehlo.dot<");
  bool first = true;
  if (d->num_batch) {
    tpu_strbuf_puts(&attrs, "lhs_batching_dimensions = ");
    put_i64_list(&attrs, d->lhs_batch, d->num_batch);
    tpu_strbuf_puts(&attrs, ", rhs_batching_dimensions = ");
    put_i64_list(&attrs, d->rhs_batch, d->num_batch);
    first = false;
  }
  if (d->num_contract) {
    tpu_strbuf_puts(&attrs, first ? "lhs_contracting_dimensions = " : ", lhs_contracting_dimensions = ");
    put_i64_list(&attrs, d->lhs_contract, d->num_contract);
    tpu_strbuf_puts(&attrs, ", rhs_contracting_dimensions = ");
    put_i64_list(&attrs, d->rhs_contract, d->num_contract);
  }
  tpu_strbuf_printf(&attrs, ">, precision_config = [#stablehlo<precision %s>, #stablehlo<precision %s>]",
                    precision_name(precision), precision_name(precision));
  tpu_hlo_value r = op1(b, "stablehlo.dot_general", ops, 2, attr_text(b, &attrs), &t);
  tpu_strbuf_release(&attrs);
  return r;
}

void tpu_hlo_conv_init(tpu_hlo_conv *c, int spatial) {
  memset(c, 0, sizeof *c);
  c->spatial = spatial;
  c->feature_groups = c->batch_groups = 1;
  c->lhs_batch = 0;
  c->lhs_feature = 1;
  c->rhs_out = 0;
  c->rhs_in = 1;
  c->out_batch = 0;
  c->out_feature = 1;
  for (int i = 0; i < spatial; i++) {
    c->stride[i] = c->lhs_dilation[i] = c->rhs_dilation[i] = 1;
    c->lhs_spatial[i] = c->rhs_spatial[i] = c->out_spatial[i] = 2 + i;
  }
}

static void put_conv_layout(tpu_strbuf *sb, int rank, int64_t a, char ca, int64_t f, char cf,
                            const int64_t *spatial) {
  char letters[TPU_HLO_MAX_RANK][12];
  for (int i = 0; i < rank; i++) letters[i][0] = '\0';
  if (a < rank) snprintf(letters[a], sizeof letters[a], "%c", ca);
  if (f < rank) snprintf(letters[f], sizeof letters[f], "%c", cf);
  for (int i = 0; i < rank - 2; i++)
    if (spatial[i] < rank) snprintf(letters[spatial[i]], sizeof letters[0], "%d", i);
  tpu_strbuf_puts(sb, "[");
  for (int i = 0; i < rank; i++) tpu_strbuf_printf(sb, "%s%s", i ? ", " : "", letters[i]);
  tpu_strbuf_puts(sb, "]");
}

tpu_hlo_value tpu_hlo_convolution(tpu_hlo_builder *b, tpu_hlo_value lhs, tpu_hlo_value rhs,
                                  const tpu_hlo_conv *c, const tpu_hlo_type *out,
                                  tpu_hlo_precision_t precision) {
  tpu_hlo_value ops[2] = {lhs, rhs};
  if (!check_operands(b, "stablehlo.convolution", ops, 2)) return TPU_HLO_NONE;
  int rank = c->spatial + 2;
  tpu_strbuf attrs = TPU_STRBUF_INIT;
  tpu_strbuf_printf(&attrs, "batch_group_count = %lld : i64, dimension_numbers = #stablehlo.conv<",
                    (long long)c->batch_groups);
  put_conv_layout(&attrs, rank, c->lhs_batch, 'b', c->lhs_feature, 'f', c->lhs_spatial);
  tpu_strbuf_puts(&attrs, "x");
  put_conv_layout(&attrs, rank, c->rhs_out, 'o', c->rhs_in, 'i', c->rhs_spatial);
  tpu_strbuf_puts(&attrs, "->");
  put_conv_layout(&attrs, rank, c->out_batch, 'b', c->out_feature, 'f', c->out_spatial);
  tpu_strbuf_printf(&attrs, ">, feature_group_count = %lld : i64, lhs_dilation = ",
                    (long long)c->feature_groups);
  put_i64_array(&attrs, c->lhs_dilation, c->spatial);
  tpu_strbuf_puts(&attrs, ", padding = dense<[");
  for (int i = 0; i < c->spatial; i++)
    tpu_strbuf_printf(&attrs, "%s[%lld, %lld]", i ? ", " : "", (long long)c->pad_lo[i],
                      (long long)c->pad_hi[i]);
  tpu_strbuf_printf(&attrs, "]> : tensor<%dx2xi64>, precision_config = [#stablehlo<precision %s>, "
                            "#stablehlo<precision %s>], rhs_dilation = ",
                    c->spatial, precision_name(precision), precision_name(precision));
  put_i64_array(&attrs, c->rhs_dilation, c->spatial);
  tpu_strbuf_puts(&attrs, ", window_strides = ");
  put_i64_array(&attrs, c->stride, c->spatial);
  tpu_hlo_value r = op1(b, "stablehlo.convolution", ops, 2, attr_text(b, &attrs), out);
  tpu_strbuf_release(&attrs);
  return r;
}
