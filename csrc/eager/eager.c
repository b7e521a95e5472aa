/* Eager execution (see eager.h): the process's context and options, op
 * records, call keys, the modes, and running an entry on a call's storages
 * (tpu_eager_execute, with the table of runtime scalars). Programs are built
 * by program.c, entries compiled by entry.c and kept in memory by cache.c,
 * fused traces kept by trace.c. */
#include "eager/eager.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/stats.h"
#include "base/strbuf.h"
#include "base/profile.h"
#include "eager/internal.h"
#include "eager/program.h"

#define DEFAULT_FUSED_MAX_OPS 512
#define DEFAULT_MAX_CACHED_PROGRAMS 4096 /* see tpu_eager_cache_insert (cache.c) */

#define DEFAULT_OPTIONS \
  {.fused_max_ops = DEFAULT_FUSED_MAX_OPS, .fused_exact = true, .max_cached_programs = DEFAULT_MAX_CACHED_PROGRAMS}

static tpu_eager_context g_context = {.options = DEFAULT_OPTIONS};
static char *g_dump_dir; /* g_context.dump_dir, owned */
static _Atomic uint32_t g_next_op_id = 1;

void tpu_eager_options_init(tpu_eager_options *o) { *o = (tpu_eager_options)DEFAULT_OPTIONS; }

void tpu_eager_init(tpu_runtime *rt, const tpu_eager_options *opts) {
  tpu_eager_options o = *opts;
  if (o.fused_max_ops <= 0) o.fused_max_ops = DEFAULT_FUSED_MAX_OPS;
  if (o.max_cached_programs == 0) o.max_cached_programs = DEFAULT_MAX_CACHED_PROGRAMS;
  g_context.rt = rt;
  g_context.options = o;
}
const tpu_eager_context *tpu_eager_context_get(void) { return &g_context; }

tpu_status_t tpu_eager_set_dump_dir(const char *dir) {
  g_context.dump_dir = NULL;
  free(g_dump_dir);
  g_dump_dir = NULL;
  if (dir == NULL || *dir == '\0') return NULL;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return tpu_status_new(TPU_ERR_RUNTIME, "cannot create TORCHTPU_DUMP_DIR '%s': %s", dir, strerror(errno));
  TPU_RETURN_IF_ERROR(tpu_strdup(dir, &g_dump_dir));
  g_context.dump_dir = g_dump_dir;
  return NULL;
}

tpu_status_t tpu_eager_op_new(const char *name, const tpu_lower_rule *rule, int num_outputs, int num_returns,
                              const int *output_alias, int num_item_args, const tpu_eager_item_arg *item_args,
                              tpu_eager_op **out_op) {
  *out_op = NULL;
  if (num_outputs > TPU_EAGER_MAX_RETURNS || num_returns > num_outputs)
    return tpu_status_new(TPU_ERR_NOT_IMPLEMENTED, "%s has too many outputs", name);
  if (num_item_args > TPU_EAGER_MAX_ITEM_ARGS)
    return tpu_status_new(TPU_ERR_NOT_IMPLEMENTED, "%s has too many arguments", name);
  tpu_eager_op *op = NULL;
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(1, sizeof *op, (void **)&op));
  char *owned_name = NULL;
  tpu_status_t st = tpu_strdup(name, &owned_name);
  if (st != NULL) {
    free(op);
    return st;
  }
  op->name = owned_name;
  op->rule = rule;
  op->num_outputs = num_outputs;
  op->num_returns = num_returns;
  for (int i = 0; i < num_outputs; i++) op->output_alias[i] = output_alias[i];
  op->num_item_args = num_item_args;
  for (int i = 0; i < num_item_args; i++) op->item_args[i] = item_args[i];
  op->id = atomic_fetch_add(&g_next_op_id, 1);
  *out_op = op;
  return NULL;
}

/* --- keys ------------------------------------------------------------------------ */

tpu_hlo_type tpu_flat_slot_type(const flat_call *f, int slot) {
  const tpu_tensor_ref *first = f->refs[slot].ref;
  return tpu_storage_type(first->storage, first->view.dtype);
}

static void key_ref(tpu_strbuf *k, const ref_slot *r, const tpu_eager_arg *arg, const flat_call *f) {
  const tpu_tensor_ref *t = r->ref;
  if (tpu_ref_is_none(t)) {
    tpu_strbuf_put_i64(k, -3);
    return;
  }
  const tpu_view *v = &t->view;
  int64_t head[4] = {r->slot, v->dtype, v->rank,
                     (int64_t)t->wrapped_number | ((int64_t)arg->mutated << 1) | ((int64_t)t->conj << 2) |
                         ((int64_t)t->neg << 3)};
  if (t->host_scalar != NULL) head[0] = -2;
  tpu_strbuf_append(k, head, sizeof head);
  tpu_strbuf_append(k, v->sizes, (size_t)v->rank * sizeof(int64_t));
  /* Strides even without a storage: the outputs' layout (kept with the
   * program) may follow an empty input's. */
  tpu_strbuf_append(k, v->strides, (size_t)v->rank * sizeof(int64_t));
  if (t->storage == NULL) return;
  /* The storage's size and buffer type: a storage without a buffer yet,
   * the type the program gives it (tpu_flat_slot_type), so that it keys
   * as a storage that has a buffer of that type. */
  const tpu_storage *s = t->storage;
  const tpu_tensor_ref *first = f->refs[r->slot].ref; /* tpu_flat_slot_type's */
  tpu_hlo_type scratch;
  const tpu_hlo_type *st = tpu_storage_type_in(first->storage, first->view.dtype, &scratch);
  int64_t tail[4] = {v->offset, s->nbytes, st->dtype, st->rank};
  tpu_strbuf_append(k, tail, sizeof tail);
  tpu_strbuf_append(k, st->dims, (size_t)st->rank * sizeof(int64_t));
}

/* Everything a program depends on: op, precision, per argument its kind and
 * signature or constant value. Python numbers add only their type unless
 * the rule folds them into the program. A call without an op (a compiled
 * graph's inputs) keys its arguments alone. */
static void build_key(tpu_strbuf *k, const tpu_eager_call *call, const flat_call *f) {
  const unsigned flags = call->op != NULL ? call->op->rule->flags : 0;
  const int num_args = call->num_args;
  int64_t head[3] = {call->op != NULL ? (int64_t)call->op->id : 0, call->precision, num_args};
  tpu_strbuf_append(k, head, sizeof head);
  int fi = 0;
  for (int a = 0; a < num_args; a++) {
    const tpu_eager_arg *arg = &call->args[a];
    const tpu_lower_arg *l = &arg->lower;
    tpu_strbuf_put_i64(k, l->kind);
    switch (l->kind) {
      case TPU_ARG_TENSOR:
        key_ref(k, &f->refs[fi++], arg, f);
        break;
      case TPU_ARG_TENSOR_LIST:
        tpu_strbuf_put_i64(k, l->n);
        for (int i = 0; i < l->n; i++) key_ref(k, &f->refs[fi++], arg, f);
        break;
      case TPU_ARG_SCALAR:
        tpu_strbuf_put_i64(k, l->dtype);
        if (flags & TPU_RULE_CONST_SCALARS) {
          tpu_strbuf_put_i64(k, l->i);
          tpu_strbuf_append(k, &l->f, sizeof l->f);
          tpu_strbuf_append(k, &l->fi, sizeof l->fi);
        } else if (l->dtype == TPU_C128) { /* whether a real type can take it (tpu_lower_scalar) */
          tpu_strbuf_put_i64(k, l->fi != 0);
        }
        break;
      case TPU_ARG_INT:
      case TPU_ARG_DTYPE:
        tpu_strbuf_put_i64(k, l->kind == TPU_ARG_INT ? l->i : l->dtype);
        break;
      case TPU_ARG_BOOL:
        tpu_strbuf_put_i64(k, l->b);
        break;
      case TPU_ARG_FLOAT:
        tpu_strbuf_append(k, &l->f, sizeof l->f);
        break;
      case TPU_ARG_INT_LIST:
        tpu_strbuf_put_i64(k, l->n);
        tpu_strbuf_append(k, l->ints, (size_t)l->n * sizeof(int64_t));
        break;
      case TPU_ARG_FLOAT_LIST:
        tpu_strbuf_put_i64(k, l->n);
        tpu_strbuf_append(k, l->floats, (size_t)l->n * sizeof(double));
        break;
      case TPU_ARG_BOOL_LIST:
        tpu_strbuf_put_i64(k, l->n);
        tpu_strbuf_append(k, l->bools, (size_t)l->n * sizeof(bool));
        break;
      case TPU_ARG_SCALAR_LIST:
        tpu_strbuf_put_i64(k, l->n);
        tpu_strbuf_put_i64(k, l->dtype);
        tpu_strbuf_append(k, l->item_dtypes, (size_t)l->n * sizeof(tpu_dtype_t));
        if (flags & TPU_RULE_CONST_SCALARS)
          tpu_strbuf_append(k, tpu_scalar_list_values(l), tpu_scalar_list_bytes(l));
        else if (l->dtype == TPU_C128)
          for (int j = 0; j < l->n; j++) tpu_strbuf_put_i64(k, l->floats[2 * j + 1] != 0);
        break;
      case TPU_ARG_STRING:
        tpu_strbuf_puts(k, l->s);
        tpu_strbuf_put_i64(k, 0);
        break;
      default:
        break;
    }
  }
}

/* --- keys of calls in the cache (cache.c) ---------------------------------------- */

static _Thread_local tpu_strbuf t_key;

/* The key of |call| in this thread's scratch buffer; false if out of memory. */
static bool key_of(const tpu_eager_call *call, uint64_t *out_hash) {
  flat_call f;
  tpu_status_t st = tpu_flatten_call(call, &f);
  if (st != NULL) {
    tpu_status_free(st);
    return false;
  }
  tpu_strbuf_clear(&t_key);
  build_key(&t_key, call, &f);
  tpu_flat_release(&f);
  *out_hash = tpu_hash64(t_key.data, t_key.len, 0);
  return !t_key.failed;
}

tpu_status_t tpu_eager_call_key(const tpu_eager_call *call, char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  uint64_t h;
  if (!key_of(call, &h)) return tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  *out = malloc(t_key.len ? t_key.len : 1);
  if (*out == NULL) return tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  memcpy(*out, t_key.data, t_key.len);
  *len = t_key.len;
  return NULL;
}

tpu_status_t tpu_eager_prepare(const tpu_eager_call *call) {
  if (__atomic_load_n(&tpu_trace_pending, __ATOMIC_ACQUIRE) == 0 || tpu_eager_current_mode() == TPU_EAGER_FUSED)
    return NULL;
  return tpu_trace_settle_call(call, TPU_CUT_STRICT);
}

tpu_eager_entry *tpu_eager_lookup(const tpu_eager_call *call) {
  uint64_t h;
  if (!key_of(call, &h)) return NULL;
  tpu_eager_entry *found = tpu_eager_cache_find(t_key.data, t_key.len, h);
  if (found != NULL) tpu_stats_add(TPU_STAT_CACHE_HITS, 1); /* misses count where programs compile */
  if (found != NULL && tpu_profile_enabled()) tpu_profile_mark(TPU_PROFILE_COMPILE, call->op->name, "hit");
  return found;
}

/* --- modes ------------------------------------------------------------------------- */

static int g_default_mode = TPU_EAGER_STRICT;
static _Thread_local int t_mode = -1;

void tpu_eager_set_default_mode(tpu_eager_mode mode) { __atomic_store_n(&g_default_mode, (int)mode, __ATOMIC_RELAXED); }

int tpu_eager_set_thread_mode(int mode) {
  int old = t_mode;
  t_mode = mode;
  return old;
}

tpu_eager_mode tpu_eager_current_mode(void) {
  return (tpu_eager_mode)(t_mode >= 0 ? t_mode : __atomic_load_n(&g_default_mode, __ATOMIC_RELAXED));
}

/* The poison of |s| (a value a failed fused trace never computed), unless
 * a recorded call uses it: one that writes it whole gives it a value, and
 * the launch raises what is still poisoned when it reads it. */
static tpu_status_t check_input(const tpu_storage *s) {
  if (s == NULL || __atomic_load_n(&s->trace.held, __ATOMIC_ACQUIRE)) return NULL;
  return tpu_storage_check_value(s);
}

/* A call that reads a tensor a failed fused trace never computed raises at
 * the call, in every mode (trace.c, poison_outputs). An argument the call
 * writes is left to the launch, which raises if the program reads it: a
 * write of the whole tensor gives it a value again. */
static tpu_status_t check_inputs(const tpu_eager_call *call) {
  if (__atomic_load_n(&tpu_poisoned_storages, __ATOMIC_ACQUIRE) == 0) return NULL;
  for (int a = 0; a < call->num_args; a++) {
    const tpu_eager_arg *arg = &call->args[a];
    if (arg->mutated) continue;
    if (arg->lower.kind == TPU_ARG_TENSOR) TPU_RETURN_IF_ERROR(check_input(arg->tensor.storage));
    if (arg->lower.kind == TPU_ARG_TENSOR_LIST)
      for (int i = 0; i < arg->lower.n; i++) TPU_RETURN_IF_ERROR(check_input(arg->items[i].storage));
  }
  return NULL;
}

tpu_status_t tpu_eager_run(tpu_eager_entry *e, const tpu_eager_call *call, tpu_storage *const *new_outputs) {
  TPU_RETURN_IF_ERROR(check_inputs(call));
  tpu_eager_mode mode = tpu_eager_current_mode();
  if (mode == TPU_EAGER_FUSED) return tpu_trace_record(e, call, new_outputs);
  tpu_status_t st = tpu_eager_execute(e, call, new_outputs);
  if (st == NULL && mode == TPU_EAGER_BLOCKING) st = tpu_runtime_synchronize(tpu_eager_entry_context(e)->rt, call->device);
  return st;
}

/* --- programs of one op ---------------------------------------------------------------- */

int tpu_eager_call_items(const tpu_eager_call *call) {
  if (call->op->num_item_args == 0) return 1;
  for (int a = 0; a < call->num_args; a++)
    if (call->args[a].lower.kind == TPU_ARG_TENSOR_LIST) return call->args[a].lower.n;
  return 0;
}

/* The elements [*lo, *hi) a non-empty view can touch. */
static void view_extent(const tpu_view *v, int64_t *lo, int64_t *hi) {
  *lo = *hi = v->offset;
  for (int d = 0; d < v->rank; d++) {
    int64_t span = (v->sizes[d] - 1) * v->strides[d];
    if (span < 0) *lo += span;
    else *hi += span;
  }
  (*hi)++;
}

/* Whether refs |i| and |j| of one storage may touch a common byte. */
static bool refs_touch(const flat_call *f, int i, int j) {
  const tpu_view *a = &f->refs[i].ref->view, *b = &f->refs[j].ref->view;
  if (tpu_view_numel(a) == 0 || tpu_view_numel(b) == 0) return false;
  int64_t alo, ahi, blo, bhi;
  view_extent(a, &alo, &ahi);
  view_extent(b, &blo, &bhi);
  int64_t as = (int64_t)tpu_dtype_size(a->dtype), bs = (int64_t)tpu_dtype_size(b->dtype);
  return alo * as < bhi * bs && blo * bs < ahi * as;
}

bool tpu_eager_items_overlap(const tpu_eager_call *call) {
  flat_call f;
  tpu_status_t st = tpu_flatten_call(call, &f);
  if (st != NULL) {
    tpu_status_free(st);
    return true; /* out of memory: the caller's slow path is the safe one */
  }
  /* Per slot (indexed by its first ref): written at all, and seen at more
   * than one item index. */
  bool *written = NULL, *mixed = NULL;
  tpu_status_t st_w = tpu_alloc_zeroed((size_t)f.n, sizeof *written, (void **)&written);
  tpu_status_t st_m = tpu_alloc_zeroed((size_t)f.n, sizeof *mixed, (void **)&mixed);
  bool overlap = written == NULL || mixed == NULL; /* out of memory: the safe path */
  tpu_status_free(tpu_status_join(st_w, st_m));
  for (int i = 0; i < f.n && !overlap; i++) {
    int s = f.refs[i].slot;
    if (s < 0) continue;
    written[s] |= call->args[f.refs[i].arg].mutated;
    mixed[s] |= f.refs[i].item != f.refs[s].item || f.refs[i].item < 0;
  }
  /* Such a storage (FSDP2's gradients, views into one reduce-scatter
   * output) is still one program's when the items' parts of it are apart:
   * each item reads only its own part, which no other item writes, and the
   * writes compose (tpu_program_write). A written part that may touch
   * another item's (or a plain tensor argument's) takes the slow path. */
  for (int i = 0; i < f.n && !overlap; i++) {
    int s = f.refs[i].slot;
    if (s < 0 || !written[s] || !mixed[s]) continue;
    for (int j = i + 1; j < f.n && !overlap; j++) {
      if (f.refs[j].slot != s || (f.refs[i].item == f.refs[j].item && f.refs[i].item >= 0)) continue;
      if (!call->args[f.refs[i].arg].mutated && !call->args[f.refs[j].arg].mutated) continue;
      overlap = refs_touch(&f, i, j);
    }
  }
  free(written);
  free(mixed);
  tpu_flat_release(&f);
  return overlap;
}

/* A per-item rule's view of item |k|: where each of its arguments comes from. */
typedef struct item_view {
  tpu_program *p;
  const tpu_eager_call *call;
  int k;
} item_view;

static tpu_hlo_value fetch_item(tpu_lower_ctx *c, int arg, int item) {
  const item_view *iv = c->user;
  int src = iv->call->op->item_args[arg].arg;
  switch (iv->call->args[src].lower.kind) {
    case TPU_ARG_TENSOR_LIST: return tpu_program_tensor(iv->p, src, iv->k);
    case TPU_ARG_SCALAR_LIST: return tpu_program_scalar_item(iv->p, src, iv->k);
    case TPU_ARG_SCALAR: return tpu_program_scalar(iv->p, src);
    default: return tpu_program_tensor(iv->p, src, item);
  }
}

/* The rule's arguments for item |k| of a per-item call. */
static void item_args(const tpu_eager_call *call, int k, tpu_lower_arg *out) {
  const tpu_eager_op *op = call->op;
  for (int j = 0; j < op->num_item_args; j++) {
    const tpu_eager_item_arg *ia = &op->item_args[j];
    if (ia->arg < 0) {
      out[j] = ia->fixed;
      continue;
    }
    const tpu_eager_arg *a = &call->args[ia->arg];
    const tpu_lower_arg *l = &a->lower;
    tpu_lower_arg *o = &out[j];
    if (l->kind == TPU_ARG_TENSOR_LIST) {
      *o = (tpu_lower_arg){.kind = TPU_ARG_NONE};
      const tpu_tensor_ref *r = k < l->n ? &a->items[k] : NULL;
      if (r == NULL || tpu_ref_is_none(r)) continue;
      o->kind = TPU_ARG_TENSOR;
      o->dtype = r->view.dtype;
      o->wrapped_number = r->wrapped_number;
      o->rank = r->view.rank;
      o->sizes = r->view.sizes;
      o->strides = r->view.strides;
    } else if (l->kind == TPU_ARG_SCALAR_LIST) {
      *o = (tpu_lower_arg){.kind = TPU_ARG_SCALAR, .dtype = l->item_dtypes[k]};
      o->is_const = (op->rule->flags & TPU_RULE_CONST_SCALARS) != 0;
      if (l->dtype == TPU_S64) {
        o->i = l->ints[k];
        o->f = (double)o->i;
      } else {
        const int step = l->dtype == TPU_C128 ? 2 : 1;
        o->f = l->floats[step * k];
        o->fi = step == 2 ? l->floats[2 * k + 1] : 0.0;
        o->i = (int64_t)o->f;
      }
    } else {
      *o = *l;
    }
  }
}

tpu_status_t tpu_eager_apply(tpu_program *p, const tpu_eager_call *call, int k, const tpu_eager_out_meta *meta,
                             int out_arg) {
  const tpu_eager_op *op = call->op;
  tpu_lower_arg args[64];
  int num_args = k < 0 ? call->num_args : op->num_item_args;
  item_view iv = {p, call, k};
  if (num_args > 64) return tpu_status_new(TPU_ERR_NOT_IMPLEMENTED, "%s: too many arguments", op->name);
  if (k < 0)
    for (int i = 0; i < call->num_args; i++) args[i] = call->args[i].lower;
  else
    item_args(call, k, args);
  const int base = k < 0 ? 0 : k * op->num_outputs;
  tpu_hlo_type out_types[TPU_EAGER_MAX_RETURNS];
  tpu_hlo_value outputs[TPU_EAGER_MAX_RETURNS];
  for (int r = 0; r < op->num_outputs; r++) {
    int a = op->output_alias[r];
    if (a < 0) {
      out_types[r] = tpu_hlo_make_type(meta[base + r].dtype, meta[base + r].rank, meta[base + r].sizes);
      continue;
    }
    /* Writes an argument: its type (INVALID when the argument is None). */
    const tpu_eager_arg *arg = &call->args[a];
    const tpu_tensor_ref *ref = k < 0 ? &arg->tensor : k < arg->lower.n ? &arg->items[k] : NULL;
    bool present = k < 0 ? arg->lower.kind == TPU_ARG_TENSOR : ref != NULL && !tpu_ref_is_none(ref);
    out_types[r] = present ? tpu_hlo_make_type(ref->view.dtype, ref->view.rank, ref->view.sizes)
                           : tpu_hlo_make_type(TPU_INVALID, 0, NULL);
  }
  tpu_dtype_t common = k >= 0 && call->item_common_dtypes != NULL ? call->item_common_dtypes[k] : call->common_dtype;
  bool adds = false;
  tpu_program_apply_args apply = {
      .rule = op->rule,
      .op = op->name,
      .num_args = num_args,
      .args = args,
      .fetch = k < 0 ? tpu_program_fetch_call : fetch_item,
      .user = k < 0 ? (void *)p : &iv,
      .common_dtype = common,
      .precision = call->precision,
      .num_outputs = op->num_outputs,
      .out_types = out_types,
  };
  TPU_RETURN_IF_ERROR(tpu_program_apply(p, &apply, outputs, &adds));
  for (int r = 0; r < op->num_outputs; r++) {
    if (op->output_alias[r] >= 0) tpu_program_write(p, op->output_alias[r], k, outputs[r], true, adds);
    else if (out_arg < 0) tpu_program_output(p, base + r, outputs[r], &meta[base + r]);
    else tpu_program_output_to(p, out_arg + base + r, outputs[r], &meta[base + r]);
  }
  return NULL;
}

tpu_status_t tpu_eager_compile(const tpu_eager_call *call, const tpu_eager_out_meta *meta,
                               tpu_eager_entry **out_entry) {
  *out_entry = NULL;
  TPU_RETURN_IF_ERROR(tpu_runtime_check_fork()); /* before building, and before the caches' locks */
  const tpu_eager_op *op = call->op;
  tpu_program *p = NULL;
  TPU_RETURN_IF_ERROR(tpu_program_new(&g_context, call, op->name, &p));
  /* Fused eager records calls and runs them inside larger programs: their
   * own is compiled only if it runs alone. */
  if (tpu_eager_current_mode() == TPU_EAGER_FUSED) tpu_program_set_lazy(p);
  tpu_status_t st = NULL;
  tpu_eager_entry *e = NULL;
  const bool per_item = op->num_item_args > 0;
  for (int k = per_item ? 0 : -1, end = per_item ? tpu_eager_call_items(call) : 0; k < end; k++)
    TPU_GOTO_IF_ERROR(st, tpu_eager_apply(p, call, k, meta, -1), done);
  TPU_GOTO_IF_ERROR(st, tpu_program_finish(p, &e), done);
  if (!tpu_eager_entry_set_dtypes(e, call->common_dtype, call->item_common_dtypes, tpu_eager_call_items(call))) {
    st = tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  uint64_t h;
  if (!key_of(call, &h)) {
    st = tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  *out_entry = tpu_eager_cache_insert(e, t_key.data, t_key.len, h);
  e = NULL;
  if (*out_entry == NULL) st = tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
done:
  tpu_eager_entry_free(e);
  tpu_program_free(p);
  return st;
}

/* --- runtime scalars ------------------------------------------------------------- */

/* Python numbers repeat (alpha=1, x * 0.5): keep their device buffers in a
 * small direct-mapped table. A slot's buffer is replaced when another number
 * maps to it, possibly by another thread or by a second number of the same
 * call before the launch that reads the first: so a table buffer is counted,
 * held by its slot and by every call between its lookup and its launch, and
 * destroyed by whichever lets go last (a launch, once enqueued, keeps its
 * own reference). Buffers are immutable and never donated. */
#define SCALAR_CACHE 256
typedef struct scalar_buf {
  tpu_runtime *rt;
  tpu_buffer *buf;
  atomic_int refs;
} scalar_buf;
typedef struct scalar_slot {
  tpu_dtype_t dtype;
  int device;
  unsigned char bytes[16];
  scalar_buf *held;
} scalar_slot;
static scalar_slot g_scalars[SCALAR_CACHE];
static pthread_mutex_t g_scalar_lock = PTHREAD_MUTEX_INITIALIZER;

static void scalar_release(scalar_buf *sb) {
  if (sb == NULL || atomic_fetch_sub_explicit(&sb->refs, 1, memory_order_acq_rel) != 1) return;
  tpu_buffer_destroy(sb->rt, sb->buf);
  free(sb);
}

/* |*out| holds one reference, released with scalar_release. */
static tpu_status_t scalar_buffer(tpu_runtime *rt, int device, tpu_dtype_t dtype, const void *bytes,
                                  scalar_buf **out) {
  *out = NULL;
  size_t size = tpu_dtype_size(dtype);
  unsigned char key[16] = {0};
  memcpy(key, bytes, size);
  uint64_t h = tpu_hash64(key, sizeof key, (uint64_t)dtype * 31 + (uint64_t)device);
  scalar_slot *slot = &g_scalars[h % SCALAR_CACHE];
  pthread_mutex_lock(&g_scalar_lock);
  if (slot->held != NULL && slot->held->rt == rt && slot->dtype == dtype && slot->device == device &&
      memcmp(slot->bytes, key, 16) == 0) {
    atomic_fetch_add_explicit(&slot->held->refs, 1, memory_order_relaxed);
    *out = slot->held;
    pthread_mutex_unlock(&g_scalar_lock);
    return NULL;
  }
  pthread_mutex_unlock(&g_scalar_lock);
  scalar_buf *sb = NULL;
  TPU_RETURN_IF_ERROR(tpu_alloc(sizeof *sb, (void **)&sb));
  atomic_init(&sb->refs, 2); /* the slot's and the caller's */
  sb->rt = rt;
  tpu_status_t st = tpu_buffer_from_host(rt, device, key, dtype, NULL, 0, &sb->buf);
  if (st != NULL) {
    free(sb);
    return st;
  }
  pthread_mutex_lock(&g_scalar_lock);
  scalar_buf *old = slot->held;
  slot->held = sb;
  slot->dtype = dtype;
  slot->device = device;
  memcpy(slot->bytes, key, 16);
  pthread_mutex_unlock(&g_scalar_lock);
  scalar_release(old);
  *out = sb;
  return NULL;
}

static void scalar_bytes(const tpu_lower_arg *l, unsigned char out[16]) {
  memset(out, 0, 16);
  switch (l->dtype) {
    case TPU_F64: memcpy(out, &l->f, 8); break;
    case TPU_C128:
      memcpy(out, &l->f, 8);
      memcpy(out + 8, &l->fi, 8);
      break;
    case TPU_BOOL: out[0] = l->i != 0; break;
    default: memcpy(out, &l->i, 8); break;
  }
}

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* The error of check |i| of |e|, its message filled with |values|. */
static tpu_status_t check_failure(const tpu_eager_entry *e, int i, const int64_t *values) {
  if (e->check_num_values[i] == 0) return tpu_status_new(e->check_codes[i], "%s", e->check_messages[i]);
  char text[512];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  /* the rules' static formats, of check_num_values[i] %lld */
  snprintf(text, sizeof text, e->check_messages[i], (long long)values[0], (long long)values[1], (long long)values[2]);
#pragma GCC diagnostic pop
  return tpu_status_new(e->check_codes[i], "%s", text);
}

/* --- running ------------------------------------------------------------------------ */

/* Gives each storage |e| writes its result buffer (|outs| before the checks'). */
static void put_results(const tpu_eager_entry *e, const flat_call *f, tpu_storage *const *new_outputs,
                        tpu_buffer **outs) {
  for (int i = 0; i < e->num_results - e->num_checks; i++) {
    const result_dst *r = &e->results[i];
    tpu_storage *s = r->ref >= 0 ? f->refs[r->ref].ref->storage : new_outputs[r->output];
    if (s == NULL) {
      tpu_buffer_destroy(e->ctx->rt, outs[i]);
    } else {
      tpu_storage_put(s, outs[i], &r->type);
      s->writer = e->writer;
    }
  }
}

tpu_status_t tpu_eager_execute(const tpu_eager_entry *e, const tpu_eager_call *call,
                               tpu_storage *const *new_outputs) {
  if (__atomic_load_n(&tpu_trace_pending, __ATOMIC_ACQUIRE) > 0)
    TPU_RETURN_IF_ERROR(tpu_trace_settle_call(call, TPU_CUT_GRAPH));
  tpu_stats_add(TPU_STAT_OPS, 1);
  return tpu_eager_execute_raw(e, call, new_outputs);
}

tpu_status_t tpu_eager_execute_raw(const tpu_eager_entry *e, const tpu_eager_call *call,
                                   tpu_storage *const *new_outputs) {
  bool check_failed;
  return tpu_eager_execute_checked(e, call, new_outputs, &check_failed);
}

tpu_status_t tpu_eager_execute_checked(const tpu_eager_entry *e, const tpu_eager_call *call,
                                       tpu_storage *const *new_outputs, bool *out_check_failed) {
  *out_check_failed = false;
  TPU_RETURN_IF_ERROR(tpu_runtime_check_fork()); /* before the scalar cache's lock */
  if (e->num_results == 0) return NULL;
  tpu_runtime *rt = e->ctx->rt;
  flat_call f;
  TPU_RETURN_IF_ERROR(tpu_flatten_call(call, &f));
  tpu_buffer *args_small[32], *outs_small[32];
  scalar_buf *held_small[32]; /* table scalars this call reads, held until the launch */
  tpu_buffer **args = e->num_params <= 32 ? args_small : tpu_alloc_or_null((size_t)e->num_params * sizeof *args);
  tpu_buffer **outs = e->num_results <= 32 ? outs_small : tpu_alloc_or_null((size_t)e->num_results * sizeof *outs);
  scalar_buf **held = e->num_params <= 32 ? held_small : tpu_alloc_or_null((size_t)e->num_params * sizeof *held);
  int num_held = 0;
  tpu_buffer *rng_small[8], **rngs = rng_small; /* one per random op of a fused program */
  int num_rngs = 0;
  tpu_executable *exe = NULL;
  tpu_buffer *lists_small[64], **lists = lists_small; /* Scalar[] operands */
  int num_lists = 0;
  tpu_status_t st = NULL;
  if (e->num_params > 64) lists = tpu_alloc_or_null((size_t)e->num_params * sizeof *lists);
  if (args == NULL || outs == NULL || held == NULL || lists == NULL) {
    st = tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  for (int i = 0; i < e->num_params; i++) {
    const param_src *p = &e->params[i];
    switch (p->kind) {
      case SRC_STORAGE: {
        tpu_storage *s = f.refs[p->ref].ref->storage;
        if ((st = tpu_storage_check_value(s)) != NULL) { /* the data's failure (no value), as a failed check's */
          *out_check_failed = true;
          goto done;
        }
        if (s->buf == NULL) TPU_GOTO_IF_ERROR(st, tpu_storage_materialize(s, p->dtype), done);
        args[i] = s->buf;
        break;
      }
      case SRC_HOST_SCALAR:
      case SRC_SCALAR: {
        unsigned char bytes[16] = {0};
        const void *value = bytes;
        if (p->kind == SRC_HOST_SCALAR) value = f.refs[p->ref].ref->host_scalar;
        else scalar_bytes(&call->args[p->arg].lower, bytes);
        TPU_GOTO_IF_ERROR(st, scalar_buffer(rt, call->device, p->dtype, value, &held[num_held]), done);
        args[i] = held[num_held++]->buf;
        break;
      }
      case SRC_SCALAR_LIST: { /* one upload per call: the numbers change (a step size) */
        const tpu_lower_arg *l = &call->args[p->arg].lower;
        int64_t n = l->n;
        const void *data = tpu_scalar_list_values(l);
        TPU_GOTO_IF_ERROR(st, tpu_buffer_from_host(rt, call->device, data, l->dtype, &n, 1, &lists[num_lists]), done);
        args[i] = lists[num_lists++];
        break;
      }
      case SRC_RNG: {
        uint64_t seed = call->rng_seed, offset = call->rng_offset;
        if (call->rng_states != NULL) {
          seed = call->rng_states[2 * p->rng_index];
          offset = call->rng_states[2 * p->rng_index + 1];
        }
        uint64_t state[2] = {splitmix64(seed ^ splitmix64(offset)), 0};
        int64_t two = 2;
        if (num_rngs == 8 && rngs == rng_small) {
          tpu_buffer **grown = NULL;
          TPU_GOTO_IF_ERROR(st, tpu_alloc((size_t)e->num_params * sizeof *rngs, (void **)&grown), done);
          rngs = memcpy(grown, rng_small, sizeof rng_small);
        }
        TPU_GOTO_IF_ERROR(st, tpu_buffer_from_host(rt, call->device, state, TPU_U64, &two, 1, &rngs[num_rngs]), done);
        args[i] = rngs[num_rngs++];
        break;
      }
    }
  }
  TPU_GOTO_IF_ERROR(st, tpu_eager_entry_executable(e, &exe), done);
  TPU_GOTO_IF_ERROR(st,
                    tpu_status_annotate(tpu_executable_execute(rt, exe, call->device, args, (size_t)e->num_params,
                                                               e->any_donation ? e->donate : NULL, e->track, outs),
                                        "%s", e->name),
                    done);
  int first_check = e->num_results - e->num_checks;
  if (!e->checks_first) put_results(e, &f, new_outputs, outs);
  /* Data-dependent checks wait for their flags (a sync, like PyTorch's CPU
   * kernels that raise before returning). */
  for (int i = 0; i < e->num_checks; i++) {
    int64_t flag[1 + TPU_LOWER_CHECK_VALUES] = {1};
    tpu_status_t cst = tpu_buffer_to_host(rt, outs[first_check + i], flag, sizeof flag);
    tpu_buffer_destroy(rt, outs[first_check + i]);
    if (st == NULL && cst != NULL) st = cst;
    else tpu_status_free(cst);
    if (st == NULL && !flag[0]) {
      st = check_failure(e, i, flag + 1);
      *out_check_failed = true;
    }
  }
  if (e->checks_first) { /* kept only if every check passed */
    if (st == NULL) put_results(e, &f, new_outputs, outs);
    else
      for (int i = 0; i < first_check; i++) tpu_buffer_destroy(rt, outs[i]);
  }
done:
  for (int i = 0; i < num_rngs; i++) tpu_buffer_destroy(rt, rngs[i]);
  if (rngs != rng_small) free(rngs);
  for (int i = 0; i < num_lists; i++) tpu_buffer_destroy(rt, lists[i]);
  if (lists != lists_small) free(lists);
  for (int i = 0; i < num_held; i++) scalar_release(held[i]);
  if (held != held_small) free(held);
  if (args != args_small) free(args);
  if (outs != outs_small) free(outs);
  tpu_flat_release(&f);
  return st;
}
