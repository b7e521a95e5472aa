/* Eager execution: keys, the executable cache, one-op program building and
 * execution on storage boxes (see eager.h). */
#include "eager/eager.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/stats.h"
#include "base/strbuf.h"

static tpu_runtime *g_rt;
static char *g_dump_dir;
static _Atomic uint32_t g_next_op_id = 1;

void tpu_eager_init(tpu_runtime *rt) { g_rt = rt; }
tpu_runtime *tpu_eager_runtime(void) { return g_rt; }

tpu_status_t tpu_eager_set_dump_dir(const char *dir) {
  free(g_dump_dir);
  g_dump_dir = NULL;
  if (dir == NULL || *dir == '\0') return NULL;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return tpu_status_new(TPU_ERR_RUNTIME, "cannot create TORCHTPU_DUMP_DIR '%s': %s", dir, strerror(errno));
  g_dump_dir = strdup(dir);
  return g_dump_dir ? NULL : tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
}

tpu_status_t tpu_eager_op_new(const char *name, const tpu_lower_rule *rule, int num_outputs,
                              int num_returns, const int *output_alias, tpu_eager_op **out_op) {
  *out_op = NULL;
  if (num_outputs > TPU_EAGER_MAX_RETURNS || num_returns > num_outputs)
    return tpu_status_new(TPU_ERR_NOT_IMPLEMENTED, "%s has too many outputs", name);
  tpu_eager_op *op = calloc(1, sizeof *op);
  if (op == NULL || (op->name = strdup(name)) == NULL) {
    free(op);
    return tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  op->rule = rule;
  op->num_outputs = num_outputs;
  op->num_returns = num_returns;
  for (int i = 0; i < num_outputs; i++) op->output_alias[i] = output_alias[i];
  op->id = atomic_fetch_add(&g_next_op_id, 1);
  *out_op = op;
  return NULL;
}

/* --- storages ----------------------------------------------------------------- */

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
  tpu_buffer_destroy(g_rt, s->buf);
  free(s);
}

void tpu_storage_set(tpu_storage *s, tpu_buffer *buf, tpu_dtype_t dtype) {
  tpu_buffer *old = s->buf;
  s->buf = buf;
  s->dtype = dtype;
  if (old != NULL && old != buf) tpu_buffer_destroy(g_rt, old);
}

tpu_status_t tpu_storage_materialize(tpu_storage *s, tpu_dtype_t dtype) {
  if (s->buf != NULL) return NULL;
  int64_t n = s->nbytes / (int64_t)tpu_dtype_size(dtype);
  tpu_buffer *buf = NULL;
  TPU_RETURN_IF_ERROR(tpu_buffer_uninitialized(g_rt, s->device, dtype, &n, 1, &buf));
  tpu_storage_set(s, buf, dtype);
  return NULL;
}

/* The element type a storage is read as: its buffer's, or (not yet
 * materialised) the first reader's. */
static tpu_dtype_t storage_dtype(const tpu_storage *s, tpu_dtype_t reader) {
  return s->buf != NULL ? s->dtype : reader;
}

/* --- flattening a call --------------------------------------------------------- */

typedef struct ref_slot {
  int arg, item; /* item -1: a plain tensor argument */
  const tpu_tensor_ref *ref;
  int slot; /* index of the first ref sharing the storage; -1 if none */
} ref_slot;

typedef struct flat_call {
  ref_slot *refs;
  int n;
  ref_slot small[32];
} flat_call;

static void flat_release(flat_call *f) {
  if (f->refs != f->small) free(f->refs);
}

static bool is_none_ref(const tpu_tensor_ref *r) {
  return r->storage == NULL && r->host_scalar == NULL && r->view.dtype == TPU_INVALID;
}

static tpu_status_t flatten(const tpu_eager_call *call, flat_call *f) {
  int total = 0;
  for (int a = 0; a < call->num_args; a++) {
    const tpu_eager_arg *arg = &call->args[a];
    if (arg->lower.kind == TPU_ARG_TENSOR) total++;
    else if (arg->lower.kind == TPU_ARG_TENSOR_LIST) total += arg->lower.n;
  }
  f->n = 0;
  f->refs = total <= 32 ? f->small : malloc((size_t)total * sizeof *f->refs);
  if (f->refs == NULL) return tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  for (int a = 0; a < call->num_args; a++) {
    const tpu_eager_arg *arg = &call->args[a];
    int count = arg->lower.kind == TPU_ARG_TENSOR ? 1 : arg->lower.kind == TPU_ARG_TENSOR_LIST ? arg->lower.n : 0;
    for (int i = 0; i < count; i++) {
      ref_slot *r = &f->refs[f->n];
      r->arg = a;
      r->item = arg->lower.kind == TPU_ARG_TENSOR ? -1 : i;
      r->ref = arg->lower.kind == TPU_ARG_TENSOR ? &arg->tensor : &arg->items[i];
      r->slot = -1;
      if (r->ref->storage != NULL) {
        for (int j = 0; j < f->n; j++)
          if (f->refs[j].ref->storage == r->ref->storage) {
            r->slot = f->refs[j].slot;
            break;
          }
        if (r->slot < 0) r->slot = f->n;
      }
      f->n++;
    }
  }
  return NULL;
}

/* --- keys ------------------------------------------------------------------------ */

static void key_ref(tpu_strbuf *k, const ref_slot *r, const tpu_eager_arg *arg, const flat_call *f) {
  const tpu_tensor_ref *t = r->ref;
  if (is_none_ref(t)) {
    tpu_strbuf_put_i64(k, -3);
    return;
  }
  const tpu_view *v = &t->view;
  int64_t head[4] = {r->slot, v->dtype, v->rank, (int64_t)t->wrapped_number | ((int64_t)arg->mutated << 1)};
  if (t->host_scalar != NULL) head[0] = -2;
  tpu_strbuf_append(k, head, sizeof head);
  tpu_strbuf_append(k, v->sizes, (size_t)v->rank * sizeof(int64_t));
  if (t->storage == NULL) return;
  tpu_strbuf_append(k, v->strides, (size_t)v->rank * sizeof(int64_t));
  /* The storage's element type and length, as the first reader fixes them. */
  const tpu_storage *s = t->storage;
  tpu_dtype_t sd = storage_dtype(s, f->refs[r->slot].ref->view.dtype);
  int64_t tail[3] = {v->offset, sd, s->nbytes};
  tpu_strbuf_append(k, tail, sizeof tail);
}

static void build_key(tpu_strbuf *k, const tpu_eager_call *call, const flat_call *f) {
  const unsigned flags = call->op->rule->flags;
  int64_t head[3] = {call->op->id, call->precision, call->num_args};
  tpu_strbuf_append(k, head, sizeof head);
  int fi = 0;
  for (int a = 0; a < call->num_args; a++) {
    const tpu_eager_arg *arg = &call->args[a];
    const tpu_lower_arg *l = &arg->lower;
    int64_t kind = l->kind;
    tpu_strbuf_put_i64(k, kind);
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
      case TPU_ARG_STRING:
        tpu_strbuf_puts(k, l->s);
        tpu_strbuf_put_i64(k, 0);
        break;
      default:
        break;
    }
  }
}

/* --- the cache ---------------------------------------------------------------------- */

typedef enum { SRC_STORAGE, SRC_HOST_SCALAR, SRC_SCALAR, SRC_RNG } src_kind;

typedef struct param_src {
  src_kind kind;
  int ref;         /* flat ref index (STORAGE: any ref of the slot; HOST_SCALAR) */
  int arg;         /* SCALAR */
  tpu_dtype_t dtype;
  int64_t elems;   /* STORAGE: buffer length */
  bool donate;
} param_src;

typedef struct result_dst {
  int ref;    /* >= 0: the storage of this flat ref gets the result */
  int output; /* >= 0: the new output's storage gets it */
  tpu_dtype_t dtype;
} result_dst;

struct tpu_eager_entry {
  struct tpu_eager_entry *next;
  uint64_t hash;
  char *key;
  size_t key_len;
  tpu_executable *exe;
  int num_params;
  param_src *params;
  bool *donate; /* per param, as execute wants it */
  bool any_donation;
  int num_results;
  result_dst *results;
  tpu_eager_out_meta meta[TPU_EAGER_MAX_RETURNS];
  /* Runtime checks: the last |num_checks| results are i1 flags. */
  int num_checks;
  tpu_code_t check_codes[TPU_LOWER_MAX_CHECKS];
  const char *check_messages[TPU_LOWER_MAX_CHECKS];
};

static pthread_mutex_t g_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_eager_entry **g_buckets;
static size_t g_num_buckets, g_num_entries;
static _Thread_local tpu_strbuf t_key;

static void entry_free(tpu_eager_entry *e) {
  if (e == NULL) return;
  tpu_executable_destroy(g_rt, e->exe);
  free(e->key);
  free(e->params);
  free(e->donate);
  free(e->results);
  free(e);
}

tpu_eager_entry *tpu_eager_lookup(const tpu_eager_call *call) {
  flat_call f;
  tpu_status_t st = flatten(call, &f);
  if (st != NULL) {
    tpu_status_free(st);
    return NULL;
  }
  tpu_strbuf_clear(&t_key);
  build_key(&t_key, call, &f);
  flat_release(&f);
  if (t_key.failed) return NULL;
  uint64_t h = tpu_hash64(t_key.data, t_key.len, 0);
  tpu_eager_entry *found = NULL;
  pthread_mutex_lock(&g_cache_lock);
  if (g_num_buckets != 0) {
    for (tpu_eager_entry *e = g_buckets[h & (g_num_buckets - 1)]; e != NULL; e = e->next)
      if (e->hash == h && e->key_len == t_key.len && memcmp(e->key, t_key.data, t_key.len) == 0) {
        found = e;
        break;
      }
  }
  pthread_mutex_unlock(&g_cache_lock);
  tpu_stats_add(found ? TPU_STAT_CACHE_HITS : TPU_STAT_CACHE_MISSES, 1);
  return found;
}

/* Inserts |e| unless an equal key is present (a racing compile); returns the
 * entry that stays cached. Lock held by the caller. */
static tpu_eager_entry *insert_locked(tpu_eager_entry *e) {
  if (g_num_entries + 1 > g_num_buckets) {
    size_t nb = g_num_buckets ? g_num_buckets * 2 : 256;
    tpu_eager_entry **b = calloc(nb, sizeof *b);
    if (b != NULL) {
      for (size_t i = 0; i < g_num_buckets; i++)
        for (tpu_eager_entry *x = g_buckets[i], *next; x != NULL; x = next) {
          next = x->next;
          x->next = b[x->hash & (nb - 1)];
          b[x->hash & (nb - 1)] = x;
        }
      free(g_buckets);
      g_buckets = b;
      g_num_buckets = nb;
    }
  }
  if (g_num_buckets == 0) return NULL;
  tpu_eager_entry **head = &g_buckets[e->hash & (g_num_buckets - 1)];
  for (tpu_eager_entry *x = *head; x != NULL; x = x->next)
    if (x->hash == e->hash && x->key_len == e->key_len && memcmp(x->key, e->key, e->key_len) == 0)
      return x;
  e->next = *head;
  *head = e;
  g_num_entries++;
  return e;
}

size_t tpu_eager_cache_size(void) {
  pthread_mutex_lock(&g_cache_lock);
  size_t n = g_num_entries;
  pthread_mutex_unlock(&g_cache_lock);
  return n;
}

void tpu_eager_cache_clear(void) {
  pthread_mutex_lock(&g_cache_lock);
  for (size_t i = 0; i < g_num_buckets; i++) {
    for (tpu_eager_entry *e = g_buckets[i], *next; e != NULL; e = next) {
      next = e->next;
      entry_free(e);
    }
    g_buckets[i] = NULL;
  }
  g_num_entries = 0;
  pthread_mutex_unlock(&g_cache_lock);
}

const tpu_eager_out_meta *tpu_eager_entry_meta(const tpu_eager_entry *e, int i) { return &e->meta[i]; }

/* --- building the program ----------------------------------------------------------- */

typedef struct build_state {
  const tpu_eager_call *call;
  flat_call flat;
  tpu_hlo_builder *b;
  tpu_hlo_value *fetched;   /* per flat ref */
  tpu_hlo_value *slot_param;/* per flat ref (used at slot indices): the storage param */
  int *slot_param_index;
  tpu_hlo_value *slot_value;/* current storage value after writes */
  bool *slot_written;
  tpu_hlo_value *scalar_value; /* per arg: the runtime scalar's param */
  param_src *params;
  int num_params, cap_params;
} build_state;

static int flat_index(const build_state *s, int arg, int item) {
  for (int i = 0; i < s->flat.n; i++)
    if (s->flat.refs[i].arg == arg && s->flat.refs[i].item == item) return i;
  return -1;
}

static tpu_hlo_value add_param(build_state *s, const tpu_hlo_type *t, param_src src) {
  if (s->num_params == s->cap_params) {
    int cap = s->cap_params ? s->cap_params * 2 : 16;
    param_src *p = realloc(s->params, (size_t)cap * sizeof *p);
    if (p == NULL) return tpu_hlo_fail(s->b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    s->params = p;
    s->cap_params = cap;
  }
  s->params[s->num_params++] = src;
  return tpu_hlo_param(s->b, t, -1);
}

/* The storage param of |slot|, created on first use. */
static tpu_hlo_value slot_storage(build_state *s, int slot, tpu_dtype_t reader) {
  if (s->slot_param[slot] != TPU_HLO_NONE) return s->slot_param[slot];
  const tpu_storage *st = s->flat.refs[slot].ref->storage;
  tpu_dtype_t dt = storage_dtype(st, reader);
  int64_t elems = st->nbytes / (int64_t)tpu_dtype_size(dt);
  tpu_hlo_type t = tpu_hlo_make_type(dt, 1, &elems);
  s->slot_param_index[slot] = s->num_params;
  param_src src = {.kind = SRC_STORAGE, .ref = slot, .dtype = dt, .elems = elems};
  s->slot_param[slot] = add_param(s, &t, src);
  s->slot_value[slot] = s->slot_param[slot];
  return s->slot_param[slot];
}

static tpu_hlo_value fetch(tpu_lower_ctx *c, int arg, int item) {
  build_state *s = c->user;
  const tpu_eager_arg *a = &s->call->args[arg];
  if (a->lower.kind == TPU_ARG_SCALAR) {
    if (s->scalar_value[arg] == TPU_HLO_NONE) {
      tpu_hlo_type t = tpu_hlo_make_type(a->lower.dtype, 0, NULL);
      param_src src = {.kind = SRC_SCALAR, .arg = arg, .dtype = a->lower.dtype};
      s->scalar_value[arg] = add_param(s, &t, src);
    }
    return s->scalar_value[arg];
  }
  int fi = flat_index(s, arg, item);
  if (fi < 0) return tpu_hlo_fail(s->b, TPU_ERR_RUNTIME, "%s: internal: no tensor at argument %d", c->op, arg);
  if (s->fetched[fi] != TPU_HLO_NONE) return s->fetched[fi];
  const tpu_tensor_ref *r = s->flat.refs[fi].ref;
  tpu_hlo_value v;
  if (is_none_ref(r)) {
    return tpu_hlo_fail(s->b, TPU_ERR_RUNTIME, "%s: internal: argument %d is None", c->op, arg);
  } else if (r->host_scalar != NULL) {
    tpu_hlo_type t = tpu_hlo_make_type(r->view.dtype, 0, NULL);
    param_src src = {.kind = SRC_HOST_SCALAR, .ref = fi, .dtype = r->view.dtype};
    v = add_param(s, &t, src);
    if (r->view.rank != 0) v = tpu_hlo_reshape(s->b, v, r->view.rank, r->view.sizes);
  } else if (r->storage == NULL || tpu_view_numel(&r->view) == 0) {
    tpu_hlo_type t = tpu_hlo_make_type(r->view.dtype, r->view.rank, r->view.sizes);
    v = tpu_hlo_const_i64(s->b, &t, 0);
  } else {
    int slot = s->flat.refs[fi].slot;
    tpu_hlo_value storage = slot_storage(s, slot, r->view.dtype);
    /* Reads see the storage as it was before this op's writes. */
    v = tpu_hlo_view_read(s->b, storage, &r->view);
  }
  s->fetched[fi] = v;
  return v;
}

/* The new output's value laid out as its storage: memory order, 1-D. */
static tpu_hlo_value output_storage(tpu_hlo_builder *b, tpu_hlo_value v, const tpu_eager_out_meta *m) {
  tpu_view view = {.dtype = m->dtype, .rank = m->rank};
  memcpy(view.sizes, m->sizes, sizeof m->sizes);
  memcpy(view.strides, m->strides, sizeof m->strides);
  int64_t n = tpu_view_numel(&view);
  if (!tpu_view_is_contiguous(&view)) {
    int64_t perm[TPU_HLO_MAX_RANK];
    for (int i = 0; i < m->rank; i++) perm[i] = i;
    for (int i = 1; i < m->rank; i++) /* by decreasing stride, stable */
      for (int j = i; j > 0 && m->strides[perm[j - 1]] < m->strides[perm[j]]; j--) {
        int64_t t = perm[j];
        perm[j] = perm[j - 1];
        perm[j - 1] = t;
      }
    v = tpu_hlo_transpose(b, v, perm);
  }
  return tpu_hlo_reshape(b, v, 1, &n);
}

static void dump_program(const char *op, uint64_t hash, const char *text) {
  if (g_dump_dir == NULL) return;
  char path[4096];
  char safe[128];
  size_t j = 0;
  for (const char *p = op; *p && j + 1 < sizeof safe; p++) safe[j++] = (*p == ':' || *p == '/') ? '_' : *p;
  safe[j] = '\0';
  snprintf(path, sizeof path, "%s/%s-%016llx.mlir", g_dump_dir, safe, (unsigned long long)hash);
  FILE *fp = fopen(path, "w");
  if (fp != NULL) {
    fputs(text, fp);
    fclose(fp);
  }
}

tpu_status_t tpu_eager_compile(const tpu_eager_call *call, const tpu_eager_out_meta *meta,
                               tpu_eager_entry **out_entry) {
  *out_entry = NULL;
  const tpu_eager_op *op = call->op;
  build_state s;
  memset(&s, 0, sizeof s);
  s.call = call;
  tpu_status_t st = flatten(call, &s.flat);
  if (st != NULL) return st;
  tpu_eager_entry *e = calloc(1, sizeof *e);
  int n = s.flat.n > 0 ? s.flat.n : 1;
  s.fetched = malloc((size_t)n * sizeof *s.fetched);
  s.slot_param = malloc((size_t)n * sizeof *s.slot_param);
  s.slot_param_index = malloc((size_t)n * sizeof *s.slot_param_index);
  s.slot_value = malloc((size_t)n * sizeof *s.slot_value);
  s.slot_written = calloc((size_t)n, sizeof *s.slot_written);
  s.scalar_value = malloc((size_t)(call->num_args + 1) * sizeof *s.scalar_value);
  tpu_lower_arg *largs = calloc((size_t)(call->num_args + 1), sizeof *largs);
  char *text = NULL;
  if (e == NULL || !s.fetched || !s.slot_param || !s.slot_param_index || !s.slot_value ||
      !s.slot_written || !s.scalar_value || !largs) {
    st = tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  for (int i = 0; i < n; i++) s.fetched[i] = s.slot_param[i] = s.slot_value[i] = TPU_HLO_NONE;
  for (int i = 0; i < call->num_args; i++) {
    s.scalar_value[i] = TPU_HLO_NONE;
    largs[i] = call->args[i].lower;
  }
  TPU_GOTO_IF_ERROR(st, tpu_hlo_builder_create(&s.b), fail);

  tpu_hlo_type out_types[TPU_EAGER_MAX_RETURNS];
  tpu_hlo_value outputs[TPU_EAGER_MAX_RETURNS];
  for (int r = 0; r < op->num_outputs; r++) {
    int a = op->output_alias[r];
    if (a >= 0) {
      /* Writes an argument: its type (INVALID when the argument is None). */
      const tpu_eager_arg *arg = &call->args[a];
      const tpu_view *v = &arg->tensor.view;
      out_types[r] = arg->lower.kind == TPU_ARG_TENSOR ? tpu_hlo_make_type(v->dtype, v->rank, v->sizes)
                                                       : tpu_hlo_make_type(TPU_INVALID, 0, NULL);
    } else {
      out_types[r] = tpu_hlo_make_type(meta[r].dtype, meta[r].rank, meta[r].sizes);
      e->meta[r] = meta[r];
    }
  }

  tpu_lower_ctx c = {
      .b = s.b,
      .op = op->name,
      .num_args = call->num_args,
      .args = largs,
      .num_outputs = op->num_outputs,
      .out_types = out_types,
      .outputs = outputs,
      .common_dtype = call->common_dtype,
      .precision = call->precision,
      .rng_state = TPU_HLO_NONE,
      .fetch = fetch,
      .user = &s,
  };
  if (op->rule->flags & TPU_RULE_RNG) {
    int64_t two = 2;
    tpu_hlo_type t = tpu_hlo_make_type(TPU_U64, 1, &two);
    param_src src = {.kind = SRC_RNG, .dtype = TPU_U64};
    c.rng_state = add_param(&s, &t, src);
  }
  TPU_GOTO_IF_ERROR(st, tpu_lower_run(op->rule, &c), fail);

  /* A failed check keeps every written storage as it was. */
  tpu_hlo_value all_ok = TPU_HLO_NONE;
  for (int i = 0; i < c.num_checks; i++)
    all_ok = all_ok == TPU_HLO_NONE ? c.checks[i].ok : tpu_hlo_binary(s.b, TPU_HLO_AND, all_ok, c.checks[i].ok);

  /* Results: writes through mutated arguments, new outputs, check flags. */
  result_dst results[2 * TPU_EAGER_MAX_RETURNS + TPU_LOWER_MAX_CHECKS];
  tpu_hlo_value result_values[2 * TPU_EAGER_MAX_RETURNS + TPU_LOWER_MAX_CHECKS];
  int num_results = 0;
  int written_slots[TPU_EAGER_MAX_RETURNS];
  int num_written = 0;
  for (int r = 0; r < op->num_outputs; r++) {
    int a = op->output_alias[r];
    if (a < 0) continue;
    int fi = flat_index(&s, a, -1);
    const tpu_tensor_ref *ref = &call->args[a].tensor;
    if (fi < 0 || ref->storage == NULL || tpu_view_numel(&ref->view) == 0 || outputs[r] == TPU_HLO_NONE) continue;
    int slot = s.flat.refs[fi].slot;
    tpu_hlo_value cur = s.slot_value[slot];
    if (cur == TPU_HLO_NONE && (all_ok != TPU_HLO_NONE || !tpu_view_is_whole(&ref->view, ref->storage->nbytes)))
      cur = slot_storage(&s, slot, ref->view.dtype);
    tpu_hlo_value nv;
    if (cur == TPU_HLO_NONE) { /* whole storage, unread: the value is the storage */
      int64_t elems = tpu_view_numel(&ref->view);
      nv = tpu_hlo_reshape(s.b, tpu_hlo_convert(s.b, outputs[r], ref->view.dtype), 1, &elems);
    } else {
      nv = tpu_hlo_view_write(s.b, cur, &ref->view, outputs[r]);
    }
    s.slot_value[slot] = nv;
    if (!s.slot_written[slot]) {
      s.slot_written[slot] = true;
      written_slots[num_written++] = slot;
    }
  }
  for (int i = 0; i < num_written; i++) {
    int slot = written_slots[i];
    if (all_ok != TPU_HLO_NONE) {
      tpu_hlo_value old = tpu_hlo_storage_as(s.b, s.slot_param[slot], tpu_hlo_dtype(s.b, s.slot_value[slot]));
      s.slot_value[slot] = tpu_hlo_select(s.b, all_ok, s.slot_value[slot], old);
    }
    results[num_results] = (result_dst){.ref = slot, .output = -1, .dtype = tpu_hlo_dtype(s.b, s.slot_value[slot])};
    result_values[num_results] = s.slot_value[slot];
    /* Donate the old buffer into its replacement when the types agree. */
    int pi = s.slot_param[slot] != TPU_HLO_NONE ? s.slot_param_index[slot] : -1;
    if (pi >= 0 && tpu_hlo_type_equal(tpu_hlo_type_of(s.b, s.slot_param[slot]),
                                      tpu_hlo_type_of(s.b, s.slot_value[slot]))) {
      tpu_hlo_param_set_alias(s.b, pi, num_results);
      s.params[pi].donate = true;
    }
    num_results++;
  }
  for (int r = 0; r < op->num_outputs; r++) {
    if (op->output_alias[r] >= 0 || meta[r].dtype == TPU_INVALID) continue;
    int64_t numel = 1;
    for (int d = 0; d < meta[r].rank; d++) numel *= meta[r].sizes[d];
    if (numel == 0) continue;
    results[num_results] = (result_dst){.ref = -1, .output = r, .dtype = meta[r].dtype};
    result_values[num_results] = output_storage(s.b, outputs[r], &meta[r]);
    num_results++;
  }

  for (int i = 0; i < c.num_checks; i++) {
    results[num_results] = (result_dst){.ref = -1, .output = -1, .dtype = TPU_BOOL};
    result_values[num_results++] = c.checks[i].ok;
    e->check_codes[i] = c.checks[i].code;
    e->check_messages[i] = c.checks[i].message;
  }
  e->num_checks = c.num_checks;

  e->num_results = num_results;
  e->results = malloc((size_t)(num_results ? num_results : 1) * sizeof *e->results);
  e->num_params = s.num_params;
  e->params = s.params;
  s.params = NULL;
  e->donate = calloc((size_t)(e->num_params ? e->num_params : 1), sizeof *e->donate);
  if (e->results == NULL || e->donate == NULL) {
    st = tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  memcpy(e->results, results, (size_t)num_results * sizeof *results);
  for (int i = 0; i < e->num_params; i++) {
    e->donate[i] = e->params[i].donate;
    e->any_donation |= e->params[i].donate;
  }

  if (num_results > 0) {
    TPU_GOTO_IF_ERROR(st, tpu_hlo_finish(s.b, result_values, num_results, &text), fail);
    uint64_t h = tpu_hash64(text, strlen(text), 0);
    dump_program(op->name, h, text);
    st = tpu_executable_compile(g_rt, text, strlen(text), &e->exe);
    if (st != NULL) {
      st = tpu_status_annotate(st, "%s: compiling its program", op->name);
      goto fail;
    }
  } else {
    TPU_GOTO_IF_ERROR(st, tpu_hlo_status(s.b), fail);
  }

  /* Key it (the same key tpu_eager_lookup built) and cache it. */
  tpu_strbuf key = TPU_STRBUF_INIT;
  build_key(&key, call, &s.flat);
  TPU_GOTO_IF_ERROR(st, tpu_strbuf_status(&key), fail_key);
  e->key_len = key.len;
  e->hash = tpu_hash64(key.data, key.len, 0);
  e->key = tpu_strbuf_take(&key);
  pthread_mutex_lock(&g_cache_lock);
  tpu_eager_entry *kept = insert_locked(e);
  pthread_mutex_unlock(&g_cache_lock);
  if (kept == NULL) {
    st = tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  if (kept != e) entry_free(e);
  *out_entry = kept;
  e = NULL;
  goto cleanup;

fail_key:
  tpu_strbuf_release(&key);
fail:
  entry_free(e);
cleanup:
  free(text);
  tpu_hlo_builder_destroy(s.b);
  flat_release(&s.flat);
  free(s.fetched);
  free(s.slot_param);
  free(s.slot_param_index);
  free(s.slot_value);
  free(s.slot_written);
  free(s.scalar_value);
  free(s.params);
  free(largs);
  return st;
}

tpu_status_t tpu_storage_copy_prefix(tpu_storage *dst, const tpu_storage *src) {
  if (src->buf == NULL || dst->nbytes == 0) return NULL;
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
  if (st == NULL) st = tpu_executable_compile(g_rt, text, strlen(text), &exe);
  tpu_buffer *arg = src->buf;
  if (st == NULL) st = tpu_executable_execute(g_rt, exe, src->device, &arg, 1, NULL, &out);
  if (st == NULL) tpu_storage_set(dst, out, dt);
  tpu_executable_destroy(g_rt, exe);
  free(text);
  tpu_hlo_builder_destroy(b);
  return st;
}

/* --- runtime scalars ------------------------------------------------------------------ */

/* Python numbers repeat (alpha=1, x * 0.5): keep their device buffers. A small
 * direct-mapped table; buffers are immutable and never donated. */
#define SCALAR_CACHE 256
typedef struct scalar_slot {
  tpu_dtype_t dtype;
  int device;
  unsigned char bytes[16];
  tpu_buffer *buf;
} scalar_slot;
static scalar_slot g_scalars[SCALAR_CACHE];
static pthread_mutex_t g_scalar_lock = PTHREAD_MUTEX_INITIALIZER;

/* |*out_buf| is borrowed from the cache when |*out_owned| is false. */
static tpu_status_t scalar_buffer(int device, tpu_dtype_t dtype, const void *bytes, tpu_buffer **out_buf) {
  size_t size = tpu_dtype_size(dtype);
  unsigned char key[16] = {0};
  memcpy(key, bytes, size);
  uint64_t h = tpu_hash64(key, sizeof key, (uint64_t)dtype * 31 + (uint64_t)device);
  scalar_slot *slot = &g_scalars[h % SCALAR_CACHE];
  pthread_mutex_lock(&g_scalar_lock);
  if (slot->buf != NULL && slot->dtype == dtype && slot->device == device && memcmp(slot->bytes, key, 16) == 0) {
    *out_buf = slot->buf;
    pthread_mutex_unlock(&g_scalar_lock);
    return NULL;
  }
  tpu_buffer *buf = NULL;
  tpu_status_t st = tpu_buffer_from_host(g_rt, device, key, dtype, NULL, 0, &buf);
  if (st == NULL) {
    tpu_buffer_destroy(g_rt, slot->buf); /* pending launches keep their own reference */
    slot->buf = buf;
    slot->dtype = dtype;
    slot->device = device;
    memcpy(slot->bytes, key, 16);
    *out_buf = buf;
  }
  pthread_mutex_unlock(&g_scalar_lock);
  return st;
}

static void scalar_bytes(const tpu_lower_arg *l, unsigned char out[16]) {
  memset(out, 0, 16);
  switch (l->dtype) {
    case TPU_F64: memcpy(out, &l->f, 8); break;
    case TPU_C128: memcpy(out, &l->f, 8); break; /* real part; imaginary in f of the arg below */
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

tpu_status_t tpu_eager_execute(const tpu_eager_entry *e, const tpu_eager_call *call,
                               tpu_storage *const *new_outputs) {
  tpu_stats_add(TPU_STAT_OPS, 1);
  if (e->num_results == 0) return NULL;
  flat_call f;
  TPU_RETURN_IF_ERROR(flatten(call, &f));
  tpu_buffer *args_small[32], *outs_small[32];
  tpu_buffer **args = e->num_params <= 32 ? args_small : malloc((size_t)e->num_params * sizeof *args);
  tpu_buffer **outs = e->num_results <= 32 ? outs_small : malloc((size_t)e->num_results * sizeof *outs);
  tpu_buffer *rng = NULL;
  tpu_status_t st = NULL;
  if (args == NULL || outs == NULL) {
    st = tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  for (int i = 0; i < e->num_params; i++) {
    const param_src *p = &e->params[i];
    switch (p->kind) {
      case SRC_STORAGE: {
        tpu_storage *s = f.refs[p->ref].ref->storage;
        if (s->buf == NULL) TPU_GOTO_IF_ERROR(st, tpu_storage_materialize(s, p->dtype), done);
        args[i] = s->buf;
        break;
      }
      case SRC_HOST_SCALAR:
        TPU_GOTO_IF_ERROR(st, scalar_buffer(call->device, p->dtype, f.refs[p->ref].ref->host_scalar, &args[i]), done);
        break;
      case SRC_SCALAR: {
        unsigned char bytes[16];
        scalar_bytes(&call->args[p->arg].lower, bytes);
        TPU_GOTO_IF_ERROR(st, scalar_buffer(call->device, p->dtype, bytes, &args[i]), done);
        break;
      }
      case SRC_RNG: {
        uint64_t state[2] = {splitmix64(call->rng_seed ^ splitmix64(call->rng_offset)), 0};
        int64_t two = 2;
        TPU_GOTO_IF_ERROR(st, tpu_buffer_from_host(g_rt, call->device, state, TPU_U64, &two, 1, &rng), done);
        args[i] = rng;
        break;
      }
    }
  }
  TPU_GOTO_IF_ERROR(st, tpu_executable_execute(g_rt, e->exe, call->device, args, (size_t)e->num_params,
                                                e->any_donation ? e->donate : NULL, outs),
                    done);
  int first_check = e->num_results - e->num_checks;
  for (int i = 0; i < first_check; i++) {
    const result_dst *r = &e->results[i];
    tpu_storage *s = r->ref >= 0 ? f.refs[r->ref].ref->storage : new_outputs[r->output];
    if (s == NULL) tpu_buffer_destroy(g_rt, outs[i]);
    else tpu_storage_set(s, outs[i], r->dtype);
  }
  /* Data-dependent checks wait for their flags (a sync, like PyTorch's CPU
   * kernels that raise before returning). */
  for (int i = 0; i < e->num_checks; i++) {
    unsigned char ok = 1;
    tpu_status_t cst = tpu_buffer_to_host(g_rt, outs[first_check + i], &ok, 1);
    tpu_buffer_destroy(g_rt, outs[first_check + i]);
    if (st == NULL && cst != NULL) st = cst;
    else tpu_status_free(cst);
    if (st == NULL && !ok) st = tpu_status_new(e->check_codes[i], "%s", e->check_messages[i]);
  }
done:
  tpu_buffer_destroy(g_rt, rng);
  if (args != args_small) free(args);
  if (outs != outs_small) free(outs);
  flat_release(&f);
  return st;
}
