/* StableHLO text builder: value table, type inference, generic-form printing.
 * This file holds the builder's lifetime, its values, the generic op,
 * regions and the finished module; the op families are constants.c,
 * elementwise.c, shapes.c, dot.c and reduce.c (builder_impl.h).
 *
 * Text is written as ops are added: level 0 of |levels| is @main's body, each
 * open region pushes a level. Values are printed %vN (or %vN#i for the i-th
 * result of a multi-result op). */
#include "hlo/builder.h"

#include "hlo/builder_impl.h"

/* --- lifetime and errors ------------------------------------------------------ */

tpu_status_t tpu_hlo_builder_create(tpu_hlo_builder **out_b) {
  *out_b = calloc(1, sizeof **out_b);
  return *out_b ? NULL : tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
}

void tpu_hlo_builder_reset(tpu_hlo_builder *b) {
  b->num_values = 0;
  b->next_ssa = 0;
  b->num_params = 0;
  b->max_rank = 0;
  for (int i = 0; i < MAX_LEVELS; i++) tpu_strbuf_clear(&b->levels[i]);
  b->depth = 0;
  b->err_code = TPU_OK;
  free(b->err_message);
  b->err_message = NULL;
}

void tpu_hlo_builder_destroy(tpu_hlo_builder *b) {
  if (b == NULL) return;
  free(b->values);
  free(b->params);
  free(b->param_alias);
  for (int i = 0; i < MAX_LEVELS; i++) tpu_strbuf_release(&b->levels[i]);
  free(b->err_message);
  free(b);
}

bool tpu_hlo_failed(const tpu_hlo_builder *b) { return b->err_code != TPU_OK; }

tpu_status_t tpu_hlo_status(const tpu_hlo_builder *b) {
  if (b->err_code == TPU_OK) return NULL;
  return tpu_status_new(b->err_code, "%s", b->err_message ? b->err_message : "out of memory");
}

tpu_hlo_value tpu_hlo_fail(tpu_hlo_builder *b, tpu_code_t code, const char *fmt, ...) {
  if (b->err_code != TPU_OK) return TPU_HLO_NONE;
  b->err_code = code == TPU_OK ? TPU_ERR_RUNTIME : code;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  b->err_message = malloc((size_t)(n > 0 ? n : 0) + 1);
  if (b->err_message != NULL) {
    va_start(ap, fmt);
    vsnprintf(b->err_message, (size_t)(n > 0 ? n : 0) + 1, fmt, ap);
    va_end(ap);
  }
  return TPU_HLO_NONE;
}

/* --- types -------------------------------------------------------------------- */

tpu_hlo_type tpu_hlo_make_type(tpu_dtype_t dtype, int rank, const int64_t *dims) {
  tpu_hlo_type t;
  memset(&t, 0, sizeof t);
  t.dtype = dtype;
  t.rank = rank;
  for (int i = 0; i < rank && i < TPU_HLO_MAX_RANK; i++) t.dims[i] = dims[i];
  return t;
}

int64_t tpu_hlo_type_numel(const tpu_hlo_type *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i];
  return n;
}

bool tpu_hlo_type_equal(const tpu_hlo_type *a, const tpu_hlo_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

static const tpu_hlo_type invalid_type = {TPU_INVALID, 0, {0}};

const tpu_hlo_type *tpu_hlo_type_of(const tpu_hlo_builder *b, tpu_hlo_value v) {
  return valid(b, v) ? &b->values[v].type : &invalid_type;
}

tpu_dtype_t tpu_hlo_dtype(const tpu_hlo_builder *b, tpu_hlo_value v) {
  return tpu_hlo_type_of(b, v)->dtype;
}

int tpu_hlo_rank(const tpu_hlo_builder *b, tpu_hlo_value v) { return tpu_hlo_type_of(b, v)->rank; }

int tpu_hlo_max_rank(const tpu_hlo_builder *b) { return b->max_rank; }

static void put_value(tpu_strbuf *sb, const tpu_hlo_builder *b, tpu_hlo_value v) {
  const value_info *vi = &b->values[v];
  if (vi->index < 0) tpu_strbuf_printf(sb, "%%v%d", vi->ssa);
  else tpu_strbuf_printf(sb, "%%v%d#%d", vi->ssa, vi->index);
}

void tpu_hlo_format_i64_array(char *buf, size_t cap, const int64_t *v, int n) {
  size_t used = (size_t)snprintf(buf, cap, "array<i64");
  for (int i = 0; i < n && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : ": ", (long long)v[i]);
  if (used < cap) snprintf(buf + used, cap - used, ">");
}

/* --- value allocation ------------------------------------------------------------ */

static tpu_hlo_value new_value(tpu_hlo_builder *b, const tpu_hlo_type *t, int ssa, int index) {
  tpu_hlo_type type = *t; /* |t| may point into b->values, which the realloc moves */
  if (b->num_values == b->cap_values) {
    int cap = b->cap_values ? b->cap_values * 2 : 64;
    value_info *v = realloc(b->values, (size_t)cap * sizeof *v);
    if (v == NULL) return tpu_hlo_fail(b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    b->values = v;
    b->cap_values = cap;
  }
  value_info *vi = &b->values[b->num_values];
  vi->type = type;
  if (type.rank > b->max_rank) b->max_rank = type.rank;
  vi->ssa = ssa;
  vi->index = index;
  vi->transposed = TPU_HLO_NONE;
  return b->num_values++;
}

tpu_hlo_value tpu_hlo_param(tpu_hlo_builder *b, const tpu_hlo_type *t, int alias_output) {
  if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
  if (b->num_params == b->cap_params) {
    int cap = b->cap_params ? b->cap_params * 2 : 16;
    tpu_hlo_value *p = realloc(b->params, (size_t)cap * sizeof *p);
    if (p != NULL) b->params = p;
    int *a = realloc(b->param_alias, (size_t)cap * sizeof *a);
    if (a != NULL) b->param_alias = a;
    if (p == NULL || a == NULL) return tpu_hlo_fail(b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    b->cap_params = cap;
  }
  tpu_hlo_value v = new_value(b, t, b->next_ssa++, -1);
  if (v == TPU_HLO_NONE) return v;
  b->params[b->num_params] = v;
  b->param_alias[b->num_params] = alias_output;
  b->num_params++;
  return v;
}

int tpu_hlo_num_params(const tpu_hlo_builder *b) { return b->num_params; }

const tpu_hlo_type *tpu_hlo_param_type(const tpu_hlo_builder *b, int param_index) {
  return param_index < b->num_params ? tpu_hlo_type_of(b, b->params[param_index]) : &invalid_type;
}

void tpu_hlo_param_set_alias(tpu_hlo_builder *b, int param_index, int alias_output) {
  if (param_index >= 0 && param_index < b->num_params) b->param_alias[param_index] = alias_output;
}

/* --- the generic op ----------------------------------------------------------------- */

static tpu_strbuf *cur(tpu_hlo_builder *b) { return &b->levels[b->depth]; }

static void indent(tpu_hlo_builder *b) {
  for (int i = 0; i <= b->depth + 1; i++) tpu_strbuf_puts(cur(b), "  ");
}

void tpu_hlo_op(tpu_hlo_builder *b, const char *name, const tpu_hlo_value *operands, int n,
                tpu_hlo_region *regions, int num_regions, const char *attrs,
                const tpu_hlo_type *result_types, int num_results, tpu_hlo_value *out) {
  for (int i = 0; i < num_results; i++) out[i] = TPU_HLO_NONE;
  bool ok = check_operands(b, name, operands, n);
  for (int i = 0; i < num_results && ok; i++)
    if (result_types[i].rank > TPU_HLO_MAX_RANK) {
      for (int r = 0; r < num_regions; r++) tpu_hlo_region_release(&regions[r]);
      tpu_hlo_fail(b, TPU_ERR_NOT_IMPLEMENTED, "%s: a value of %d dimensions, more than tpu supports (%d)", name,
                   result_types[i].rank, TPU_HLO_MAX_RANK);
      return;
    }
  for (int i = 0; i < num_regions; i++)
    if (regions[i].text == NULL) ok = false;
  if (!ok) {
    for (int i = 0; i < num_regions; i++) tpu_hlo_region_release(&regions[i]);
    if (!tpu_hlo_failed(b)) tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: %s got a bad region", name);
    return;
  }
  int ssa = b->next_ssa++;
  tpu_strbuf *sb = cur(b);
  indent(b);
  if (num_results == 1) tpu_strbuf_printf(sb, "%%v%d = ", ssa);
  else if (num_results > 1) tpu_strbuf_printf(sb, "%%v%d:%d = ", ssa, num_results);
  tpu_strbuf_printf(sb, "\"%s\"(", name);
  for (int i = 0; i < n; i++) {
    if (i) tpu_strbuf_puts(sb, ", ");
    put_value(sb, b, operands[i]);
  }
  tpu_strbuf_puts(sb, ")");
  if (num_regions > 0) {
    tpu_strbuf_puts(sb, " (");
    for (int i = 0; i < num_regions; i++) {
      tpu_strbuf_puts(sb, i ? ", {\n" : "{\n");
      tpu_strbuf_puts(sb, regions[i].text);
      indent(b);
      tpu_strbuf_puts(sb, "}");
      tpu_hlo_region_release(&regions[i]);
    }
    tpu_strbuf_puts(sb, ")");
  }
  if (attrs != NULL && attrs[0] != '\0') tpu_strbuf_printf(sb, " {%s}", attrs);
  tpu_strbuf_puts(sb, " : (");
  for (int i = 0; i < n; i++) {
    if (i) tpu_strbuf_puts(sb, ", ");
    put_type(sb, &b->values[operands[i]].type);
  }
  tpu_strbuf_puts(sb, ") -> ");
  if (num_results != 1) tpu_strbuf_puts(sb, "(");
  for (int i = 0; i < num_results; i++) {
    if (i) tpu_strbuf_puts(sb, ", ");
    put_type(sb, &result_types[i]);
  }
  if (num_results != 1) tpu_strbuf_puts(sb, ")");
  tpu_strbuf_puts(sb, "\n");
  if (sb->failed) {
    tpu_hlo_fail(b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    return;
  }
  for (int i = 0; i < num_results; i++)
    out[i] = new_value(b, &result_types[i], ssa, num_results == 1 ? -1 : i);
}

/* --- regions ---------------------------------------------------------------------- */

void tpu_hlo_region_begin(tpu_hlo_builder *b, int n, const tpu_hlo_type *arg_types,
                          tpu_hlo_value *out_args) {
  for (int i = 0; i < n; i++) out_args[i] = TPU_HLO_NONE;
  if (tpu_hlo_failed(b)) return;
  if (b->depth + 1 >= MAX_LEVELS) {
    tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: regions nested too deeply");
    return;
  }
  b->depth++;
  tpu_strbuf *sb = cur(b);
  tpu_strbuf_clear(sb);
  if (n == 0) return;
  for (int i = 0; i <= b->depth; i++) tpu_strbuf_puts(sb, "  ");
  tpu_strbuf_puts(sb, "^bb0(");
  for (int i = 0; i < n; i++) {
    int ssa = b->next_ssa++;
    out_args[i] = new_value(b, &arg_types[i], ssa, -1);
    tpu_strbuf_printf(sb, "%s%%v%d: ", i ? ", " : "", ssa);
    put_type(sb, &arg_types[i]);
  }
  tpu_strbuf_puts(sb, "):\n");
}

void tpu_hlo_region_end(tpu_hlo_builder *b, const tpu_hlo_value *results, int n,
                        tpu_hlo_region *out_region) {
  out_region->text = NULL;
  if (b->depth == 0) {
    tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: region_end without region_begin");
    return;
  }
  if (!tpu_hlo_failed(b)) tpu_hlo_op(b, "stablehlo.return", results, n, NULL, 0, NULL, NULL, 0, NULL);
  tpu_strbuf *sb = cur(b);
  if (!tpu_hlo_failed(b)) {
    out_region->text = strdup(sb->data ? sb->data : "");
    if (out_region->text == NULL) tpu_hlo_fail(b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  tpu_strbuf_clear(sb);
  b->depth--;
}

void tpu_hlo_region_release(tpu_hlo_region *r) {
  free(r->text);
  r->text = NULL;
}

void tpu_hlo_region_binary(tpu_hlo_builder *b, tpu_hlo_binary_t op, tpu_dtype_t dtype,
                           tpu_hlo_region *out_region) {
  tpu_hlo_type s = tpu_hlo_make_type(dtype, 0, NULL);
  tpu_hlo_type ts[2] = {s, s};
  tpu_hlo_value args[2];
  tpu_hlo_region_begin(b, 2, ts, args);
  tpu_hlo_value r = tpu_hlo_binary(b, op, args[0], args[1]);
  tpu_hlo_region_end(b, &r, 1, out_region);
}

/* --- finishing ---------------------------------------------------------------------- */

tpu_status_t tpu_hlo_finish(tpu_hlo_builder *b, const tpu_hlo_value *results, int num_results,
                            char **out_text) {
  *out_text = NULL;
  if (b->depth != 0) tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: unclosed region");
  check_operands(b, "func.return", results, num_results);
  if (tpu_hlo_failed(b)) return tpu_hlo_status(b);
  tpu_strbuf text = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&text, "module @torchtpu attributes {mhlo.num_partitions = 1 : i32, "
                         "mhlo.num_replicas = 1 : i32} {\n  func.func public @main(");
  for (int i = 0; i < b->num_params; i++) {
    if (i) tpu_strbuf_puts(&text, ", ");
    put_value(&text, b, b->params[i]);
    tpu_strbuf_puts(&text, ": ");
    put_type(&text, &b->values[b->params[i]].type);
    if (b->param_alias[i] >= 0)
      tpu_strbuf_printf(&text, " {tf.aliasing_output = %d : i32}", b->param_alias[i]);
  }
  tpu_strbuf_puts(&text, ") -> (");
  for (int i = 0; i < num_results; i++) {
    if (i) tpu_strbuf_puts(&text, ", ");
    put_type(&text, &b->values[results[i]].type);
  }
  tpu_strbuf_puts(&text, ") {\n");
  tpu_strbuf *body = &b->levels[0];
  if (body->len) tpu_strbuf_append(&text, body->data, body->len);
  tpu_strbuf_puts(&text, "    \"func.return\"(");
  for (int i = 0; i < num_results; i++) {
    if (i) tpu_strbuf_puts(&text, ", ");
    put_value(&text, b, results[i]);
  }
  tpu_strbuf_puts(&text, ") : (");
  for (int i = 0; i < num_results; i++) {
    if (i) tpu_strbuf_puts(&text, ", ");
    put_type(&text, &b->values[results[i]].type);
  }
  tpu_strbuf_puts(&text, ") -> ()\n  }\n}\n");
  tpu_status_t st = tpu_strbuf_status(&text);
  if (st != NULL) {
    tpu_strbuf_release(&text);
    return st;
  }
  *out_text = tpu_strbuf_take(&text);
  return NULL;
}
