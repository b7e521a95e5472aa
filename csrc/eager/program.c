/* Programs over storages (see program.h) and running them: parameters per
 * storage actually read, view reads and writes, rule application, results,
 * runtime checks; execution swaps result buffers into storage boxes. */
#include "eager/program.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/stats.h"
#include "base/strbuf.h"
#include "eager/internal.h"
#include "runtime/compile_cache.h"

/* Distinct runtime checks one program may carry (checks raising the same
 * error share one). */
#define MAX_CHECKS_PER_PROGRAM 16

/* --- the flat view of a call ------------------------------------------------- */

bool tpu_ref_is_none(const tpu_tensor_ref *r) {
  return r->storage == NULL && r->host_scalar == NULL && r->view.dtype == TPU_INVALID;
}

void tpu_flat_release(flat_call *f) {
  if (f->refs != f->small) free(f->refs);
}

int tpu_flat_index(const flat_call *f, int arg, int item) {
  for (int i = 0; i < f->n; i++)
    if (f->refs[i].arg == arg && f->refs[i].item == item) return i;
  return -1;
}

tpu_status_t tpu_flatten_call(const tpu_eager_call *call, flat_call *f) {
  int total = 0;
  for (int a = 0; a < call->num_args; a++) {
    const tpu_eager_arg *arg = &call->args[a];
    if (arg->lower.kind == TPU_ARG_TENSOR) total++;
    else if (arg->lower.kind == TPU_ARG_TENSOR_LIST) total += arg->lower.n;
  }
  f->n = 0;
  f->refs = total <= 32 ? f->small : malloc((size_t)total * sizeof *f->refs);
  /* Long lists (an optimizer's hundreds of tensors) find shared storages
   * through a hash table of first refs instead of a scan. */
  size_t cap = 0;
  int *first = NULL;
  if (total > 32) {
    for (cap = 64; cap < (size_t)total * 2; cap *= 2) {
    }
    first = malloc(cap * sizeof *first);
    if (first != NULL) memset(first, 0xff, cap * sizeof *first);
  }
  if (f->refs == NULL || (total > 32 && first == NULL)) {
    free(first);
    tpu_flat_release(f);
    return tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  for (int a = 0; a < call->num_args; a++) {
    const tpu_eager_arg *arg = &call->args[a];
    int count = arg->lower.kind == TPU_ARG_TENSOR ? 1 : arg->lower.kind == TPU_ARG_TENSOR_LIST ? arg->lower.n : 0;
    for (int i = 0; i < count; i++) {
      ref_slot *r = &f->refs[f->n];
      r->arg = a;
      r->item = arg->lower.kind == TPU_ARG_TENSOR ? -1 : i;
      r->ref = arg->lower.kind == TPU_ARG_TENSOR ? &arg->tensor : &arg->items[i];
      r->slot = -1;
      if (r->ref->storage != NULL && first != NULL) {
        size_t h = (size_t)(((uintptr_t)r->ref->storage >> 4) * 0x9e3779b97f4a7c15ULL) & (cap - 1);
        while (first[h] >= 0 && f->refs[first[h]].ref->storage != r->ref->storage) h = (h + 1) & (cap - 1);
        if (first[h] < 0) first[h] = f->n;
        r->slot = first[h];
      } else if (r->ref->storage != NULL) {
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
  free(first);
  return NULL;
}

/* --- entries --------------------------------------------------------------------- */

typedef enum { SRC_STORAGE, SRC_HOST_SCALAR, SRC_SCALAR, SRC_SCALAR_LIST, SRC_RNG } src_kind;

typedef struct param_src {
  src_kind kind;
  int ref;       /* flat ref index (STORAGE: the slot; HOST_SCALAR) */
  int arg;       /* SCALAR, SCALAR_LIST */
  int rng_index; /* RNG: which random op of the program */
  tpu_dtype_t dtype;
  bool donate;
} param_src;

typedef struct result_dst {
  int ref;    /* >= 0: the storage of this flat ref gets the result */
  int output; /* >= 0: the new output's storage gets it */
  tpu_hlo_type type;
} result_dst;

struct tpu_eager_entry {
  struct tpu_eager_entry *next; /* the eager cache's chain (or its list of entries to free) */
  atomic_int refs;              /* the cache's and each caller's between lookup and release */
  uint64_t hash;
  uint64_t serial; /* unique to this entry in the process (fused eager's keys name entries by it) */
  char *key;
  size_t key_len;
  tpu_executable *exe;
  int num_params;
  param_src *params;
  bool *donate; /* per param, as execute wants it */
  bool any_donation;
  int num_results;
  result_dst *results;
  int num_meta;
  tpu_eager_out_meta *meta; /* per output index */
  bool track; /* ask for completion tracking (see tpu_executable_execute) */
  char *name;
  char *text; /* a lazy entry's program until it is compiled */
  /* a one-op entry's call's promoted dtypes (a lookup's call has none: they
   * are computed on a miss), for fused eager's programs */
  tpu_dtype_t common_dtype;
  tpu_dtype_t *item_common_dtypes;
  tpu_compile_options options;
  /* Runtime checks: the last |num_checks| results, each s64[1 +
   * TPU_LOWER_CHECK_VALUES]: the flag, then the values its message reports. */
  int num_checks;
  tpu_code_t check_codes[MAX_CHECKS_PER_PROGRAM];
  const char *check_messages[MAX_CHECKS_PER_PROGRAM];
  int check_num_values[MAX_CHECKS_PER_PROGRAM];
};

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

void tpu_eager_entry_free(tpu_eager_entry *e) {
  if (e == NULL) return;
  tpu_executable_destroy(tpu_eager_runtime(), e->exe);
  free(e->name);
  free(e->text);
  free(e->item_common_dtypes);
  free(e->key);
  free(e->params);
  free(e->donate);
  free(e->results);
  free(e->meta);
  free(e);
}

const tpu_eager_out_meta *tpu_eager_entry_meta(const tpu_eager_entry *e, int i) {
  static const tpu_eager_out_meta none = {.dtype = TPU_INVALID};
  return i < e->num_meta ? &e->meta[i] : &none;
}

const tpu_eager_out_meta *tpu_eager_entry_metas(const tpu_eager_entry *e) { return e->meta; }

bool tpu_eager_entry_set_dtypes(tpu_eager_entry *e, tpu_dtype_t common, const tpu_dtype_t *items, int n) {
  e->common_dtype = common;
  if (items == NULL) return true;
  e->item_common_dtypes = malloc((size_t)(n ? n : 1) * sizeof *items);
  if (e->item_common_dtypes == NULL) return false;
  memcpy(e->item_common_dtypes, items, (size_t)n * sizeof *items);
  return true;
}

tpu_dtype_t tpu_eager_entry_common_dtype(const tpu_eager_entry *e) { return e->common_dtype; }
const tpu_dtype_t *tpu_eager_entry_item_common_dtypes(const tpu_eager_entry *e) { return e->item_common_dtypes; }

tpu_eager_entry **tpu_eager_entry_chain(tpu_eager_entry *e) { return &e->next; }

void tpu_eager_entry_retain(tpu_eager_entry *e) { atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed); }

bool tpu_eager_entry_unref(tpu_eager_entry *e) {
  return atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1;
}

void tpu_eager_entry_set_key(tpu_eager_entry *e, char *key, size_t len, uint64_t hash) {
  free(e->key);
  e->key = key;
  e->key_len = len;
  e->hash = hash;
}

bool tpu_eager_entry_has_key(const tpu_eager_entry *e, const char *key, size_t len, uint64_t hash) {
  return e->hash == hash && e->key_len == len && memcmp(e->key, key, len) == 0;
}

uint64_t tpu_eager_entry_hash(const tpu_eager_entry *e) { return e->hash; }
uint64_t tpu_eager_entry_serial(const tpu_eager_entry *e) { return e->serial; }

bool tpu_eager_entry_uses_rng(const tpu_eager_entry *e) {
  for (int i = 0; i < e->num_params; i++)
    if (e->params[i].kind == SRC_RNG) return true;
  return false;
}

static void dump_program(const char *name, uint64_t hash, const char *text);

/* Compiles |text| into |e| (or loads it from the disk cache). */
static tpu_status_t compile_entry(tpu_eager_entry *e, const char *text) {
  dump_program(e->name, tpu_hash64(text, strlen(text), 0), text);
  bool loaded = false;
  tpu_status_t st = tpu_compile_cached(tpu_eager_runtime(), text, strlen(text), &e->options, &e->exe, &loaded);
  if (st != NULL) return tpu_status_annotate(st, "%s: compiling its program", e->name);
  tpu_stats_add(loaded ? TPU_STAT_CACHE_LOADS : TPU_STAT_CACHE_MISSES, 1);
  return NULL;
}

static pthread_mutex_t g_lazy_lock = PTHREAD_MUTEX_INITIALIZER;

/* A lazy entry's executable, compiled by the first caller. */
static tpu_status_t entry_executable(const tpu_eager_entry *ce, tpu_executable **out) {
  tpu_eager_entry *e = (tpu_eager_entry *)ce;
  *out = __atomic_load_n(&e->exe, __ATOMIC_ACQUIRE);
  if (*out != NULL || e->text == NULL) return NULL;
  pthread_mutex_lock(&g_lazy_lock);
  tpu_status_t st = NULL;
  if (e->exe == NULL) {
    tpu_eager_entry tmp = *e; /* compile_entry writes exe; publish it atomically */
    tmp.exe = NULL;
    st = compile_entry(&tmp, e->text);
    if (st == NULL) __atomic_store_n(&e->exe, tmp.exe, __ATOMIC_RELEASE);
  }
  *out = e->exe;
  pthread_mutex_unlock(&g_lazy_lock);
  return st;
}

bool tpu_eager_entry_has_checks(const tpu_eager_entry *e) { return e->num_checks > 0; }

/* --- building ---------------------------------------------------------------------- */

/* A storage in a program of several calls (sequential mode). Calls are named
 * by their arg_base + 1 (0: none). */
typedef struct seq_slot {
  tpu_hlo_value read;      /* its value as later calls read it (written_storage); NONE until one does */
  tpu_hlo_value last_read; /* the value call |reader| read */
  int writer, reader;      /* the calls that wrote it and read a written value of it last */
  bool donating;           /* the last write gave up the old buffer (strict eager donates it) */
  bool discard;            /* written, but not a result (a storage nobody holds) */
} seq_slot;

struct tpu_program {
  const tpu_eager_call *call;
  char *name;
  flat_call flat;
  tpu_hlo_builder *b;
  tpu_hlo_value *fetched;    /* per flat ref */
  tpu_hlo_value *slot_param; /* per flat ref (used at slot indices) */
  int *slot_param_index;
  tpu_hlo_value *slot_value; /* current storage value after writes */
  bool *slot_written;
  bool *slot_kept;           /* written, but the old buffer is not donated */
  int *written;              /* slots in order of first write */
  int num_written;
  tpu_hlo_value *scalar_value; /* per arg */
  param_src *params;
  int num_params, cap_params;
  int num_rng;
  tpu_hlo_value rng_param;
  /* new outputs */
  tpu_hlo_value *out_values;
  tpu_eager_out_meta *out_meta;
  int num_outputs; /* highest index + 1 */
  /* checks */
  int num_checks;
  tpu_lower_check checks[MAX_CHECKS_PER_PROGRAM];
  /* several calls in one program (fused eager, trace.c) */
  int arg_base;       /* added to every argument index the caller passes */
  bool sequential;    /* reads see earlier writes */
  bool rng_per_op;    /* each random op its own state parameter */
  bool lazy;          /* finish keeps the text; compiled at first execute */
  bool exact;         /* calls read earlier calls' results through the boundary */
  seq_slot *seq;      /* per slot */
  tpu_hlo_value *keep; /* scratch of tpu_program_end_call, per slot */
  /* exporting: no storages, no kernels, no random state */
  bool exporting;
};

tpu_hlo_builder *tpu_program_builder(tpu_program *p) { return p->b; }

void tpu_program_free(tpu_program *p) {
  if (p == NULL) return;
  tpu_hlo_builder_destroy(p->b);
  tpu_flat_release(&p->flat);
  free(p->name);
  free(p->fetched);
  free(p->slot_param);
  free(p->slot_param_index);
  free(p->slot_value);
  free(p->slot_written);
  free(p->slot_kept);
  free(p->seq);
  free(p->keep);
  free(p->written);
  free(p->scalar_value);
  free(p->params);
  free(p->out_values);
  free(p->out_meta);
  free(p);
}

tpu_status_t tpu_program_new(const tpu_eager_call *call, const char *name, tpu_program **out_p) {
  *out_p = NULL;
  tpu_program *p = calloc(1, sizeof *p);
  if (p == NULL) return tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  p->call = call;
  p->rng_param = TPU_HLO_NONE;
  tpu_status_t st = tpu_flatten_call(call, &p->flat);
  if (st != NULL) {
    free(p);
    return st;
  }
  int n = p->flat.n > 0 ? p->flat.n : 1;
  p->name = strdup(name);
  p->fetched = malloc((size_t)n * sizeof *p->fetched);
  p->slot_param = malloc((size_t)n * sizeof *p->slot_param);
  p->slot_param_index = malloc((size_t)n * sizeof *p->slot_param_index);
  p->slot_value = malloc((size_t)n * sizeof *p->slot_value);
  p->slot_written = calloc((size_t)n, sizeof *p->slot_written);
  p->slot_kept = calloc((size_t)n, sizeof *p->slot_kept);
  p->seq = calloc((size_t)n, sizeof *p->seq);
  p->keep = malloc((size_t)n * sizeof *p->keep);
  p->written = malloc((size_t)n * sizeof *p->written);
  p->scalar_value = malloc((size_t)(call->num_args + 1) * sizeof *p->scalar_value);
  if (!p->name || !p->fetched || !p->slot_param || !p->slot_param_index || !p->slot_value || !p->slot_written ||
      !p->slot_kept || !p->seq || !p->keep || !p->written || !p->scalar_value) {
    tpu_program_free(p);
    return tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  for (int i = 0; i < n; i++) {
    p->fetched[i] = p->slot_param[i] = p->slot_value[i] = TPU_HLO_NONE;
    p->seq[i].read = p->seq[i].last_read = TPU_HLO_NONE;
  }
  for (int i = 0; i <= call->num_args; i++) p->scalar_value[i] = TPU_HLO_NONE;
  st = tpu_hlo_builder_create(&p->b);
  if (st != NULL) {
    tpu_program_free(p);
    return st;
  }
  *out_p = p;
  return NULL;
}

static tpu_hlo_value add_param(tpu_program *p, const tpu_hlo_type *t, param_src src) {
  if (p->num_params == p->cap_params) {
    int cap = p->cap_params ? p->cap_params * 2 : 16;
    param_src *np = realloc(p->params, (size_t)cap * sizeof *np);
    if (np == NULL) return tpu_hlo_fail(p->b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    p->params = np;
    p->cap_params = cap;
  }
  p->params[p->num_params++] = src;
  return tpu_hlo_param(p->b, t, -1);
}

/* The storage param of |slot|, created on first use. */
static tpu_hlo_value written_storage(tpu_program *p, int slot);
static tpu_hlo_value boundary(tpu_program *p, tpu_hlo_value v);

static tpu_hlo_value slot_storage(tpu_program *p, int slot) {
  if (p->slot_param[slot] != TPU_HLO_NONE) return p->slot_param[slot];
  tpu_hlo_type t = tpu_flat_slot_type(&p->flat, slot); /* as the key says */
  p->slot_param_index[slot] = p->num_params;
  param_src src = {.kind = SRC_STORAGE, .ref = slot, .dtype = t.dtype};
  p->slot_param[slot] = add_param(p, &t, src);
  if (p->slot_value[slot] == TPU_HLO_NONE) p->slot_value[slot] = p->slot_param[slot];
  return p->slot_param[slot];
}

tpu_hlo_value tpu_program_scalar(tpu_program *p, int arg) {
  arg += p->arg_base;
  if (p->scalar_value[arg] == TPU_HLO_NONE) {
    tpu_dtype_t dt = p->call->args[arg].lower.dtype;
    tpu_hlo_type t = tpu_hlo_make_type(dt, 0, NULL);
    param_src src = {.kind = SRC_SCALAR, .arg = arg, .dtype = dt};
    p->scalar_value[arg] = add_param(p, &t, src);
  }
  return p->scalar_value[arg];
}

tpu_hlo_value tpu_program_scalar_item(tpu_program *p, int arg, int item) {
  arg += p->arg_base;
  const tpu_lower_arg *l = &p->call->args[arg].lower;
  if (l->kind != TPU_ARG_SCALAR_LIST || item < 0 || item >= l->n)
    return tpu_hlo_fail(p->b, TPU_ERR_RUNTIME, "%s: internal: no number %d in argument %d", p->name, item, arg);
  if (p->scalar_value[arg] == TPU_HLO_NONE) {
    int64_t n = l->n;
    tpu_hlo_type t = tpu_hlo_make_type(l->dtype, 1, &n);
    param_src src = {.kind = SRC_SCALAR_LIST, .arg = arg, .dtype = l->dtype};
    p->scalar_value[arg] = add_param(p, &t, src);
  }
  tpu_hlo_value v = tpu_hlo_slice_dim(p->b, p->scalar_value[arg], 0, item, item + 1, 1);
  return tpu_hlo_convert(p->b, tpu_hlo_reshape(p->b, v, 0, NULL), l->item_dtypes[item]);
}

/* PyTorch's lazy view bits: the stored values negated or conjugated.
 * Both are involutions, so reads and writes apply the same transform. */
static tpu_hlo_value apply_view_bits(tpu_hlo_builder *b, const tpu_tensor_ref *r, tpu_hlo_value v) {
  if (r->neg) v = tpu_hlo_unary(b, TPU_HLO_NEG, v);
  if (r->conj && tpu_dtype_is_complex(tpu_hlo_dtype(b, v)))
    v = tpu_hlo_binary(b, TPU_HLO_COMPLEX, tpu_hlo_unary(b, TPU_HLO_REAL, v),
                       tpu_hlo_unary(b, TPU_HLO_NEG, tpu_hlo_unary(b, TPU_HLO_IMAG, v)));
  return v;
}

tpu_hlo_value tpu_program_tensor(tpu_program *p, int arg, int item) {
  arg += p->arg_base;
  int fi = tpu_flat_index(&p->flat, arg, item);
  if (fi < 0) return tpu_hlo_fail(p->b, TPU_ERR_RUNTIME, "%s: internal: no tensor at argument %d", p->name, arg);
  if (p->fetched[fi] != TPU_HLO_NONE) return p->fetched[fi];
  const tpu_tensor_ref *r = p->flat.refs[fi].ref;
  tpu_hlo_value v;
  if (tpu_ref_is_none(r)) {
    return tpu_hlo_fail(p->b, TPU_ERR_RUNTIME, "%s: internal: argument %d is None", p->name, arg);
  } else if (r->host_scalar != NULL) {
    tpu_hlo_type t = tpu_hlo_make_type(r->view.dtype, 0, NULL);
    param_src src = {.kind = SRC_HOST_SCALAR, .ref = fi, .dtype = r->view.dtype};
    v = add_param(p, &t, src);
    if (r->view.rank != 0) v = tpu_hlo_reshape(p->b, v, r->view.rank, r->view.sizes);
  } else if (r->storage == NULL || tpu_view_numel(&r->view) == 0) {
    tpu_hlo_type t = tpu_hlo_make_type(r->view.dtype, r->view.rank, r->view.sizes);
    v = tpu_hlo_const_i64(p->b, &t, 0);
  } else {
    /* Reads see the storage as it was before the program's writes; in a
     * program of several calls, as the calls before this one left it. */
    int slot = p->flat.refs[fi].slot;
    tpu_hlo_value storage = p->sequential && p->slot_written[slot] ? written_storage(p, slot)
                                                                    : slot_storage(p, slot);
    v = tpu_hlo_view_read(p->b, storage, &r->view);
    v = apply_view_bits(p->b, r, v);
  }
  p->fetched[fi] = v;
  return v;
}

tpu_hlo_value tpu_program_fetch_call(tpu_lower_ctx *c, int arg, int item) {
  tpu_program *p = c->user;
  if (p->call->args[p->arg_base + arg].lower.kind == TPU_ARG_SCALAR) return tpu_program_scalar(p, arg);
  return tpu_program_tensor(p, arg, item);
}

/* A random state of its own for the next random op: the program's state
 * parameter mixed with the op's index. */
static tpu_hlo_value next_rng_state(tpu_program *p) {
  int64_t two = 2;
  if (p->rng_per_op) { /* the state strict eager gives the op, from its own seed and offset */
    tpu_hlo_type t = tpu_hlo_make_type(TPU_U64, 1, &two);
    param_src src = {.kind = SRC_RNG, .rng_index = p->num_rng++, .dtype = TPU_U64};
    return add_param(p, &t, src);
  }
  if (p->rng_param == TPU_HLO_NONE) {
    tpu_hlo_type t = tpu_hlo_make_type(TPU_U64, 1, &two);
    param_src src = {.kind = SRC_RNG, .dtype = TPU_U64};
    p->rng_param = add_param(p, &t, src);
  }
  int index = p->num_rng++;
  if (index == 0) return p->rng_param;
  int64_t mix[2] = {(int64_t)(0x9e3779b97f4a7c15ULL * (uint64_t)index), 0};
  tpu_hlo_type t = tpu_hlo_make_type(TPU_S64, 1, &two);
  tpu_hlo_value k = tpu_hlo_const_i64_list(p->b, mix, 2);
  tpu_hlo_type ut = tpu_hlo_make_type(TPU_U64, 1, &two);
  (void)t;
  return tpu_hlo_binary(p->b, TPU_HLO_XOR, p->rng_param, tpu_hlo_bitcast(p->b, k, &ut));
}

/* The storage value of |slot| that a later call of a fused program reads:
 * through the boundary custom call (kernels.h), so that XLA computes the
 * call as strict eager's program does, on a buffer. Fused with the call
 * that wrote it, a product and the next call's sum became one fused
 * multiply-add (XLA's CPU compiler always lets LLVM contract them; an
 * optimization barrier is gone before fusion), and a layer norm summed a
 * fused broadcast in another order: last bits differed. One boundary per
 * value of the storage. */
static tpu_hlo_value boundary(tpu_program *p, tpu_hlo_value v) {
  return p->exact ? tpu_lower_boundary(p->b, tpu_eager_kernels(), v) : v;
}

static tpu_hlo_value written_storage(tpu_program *p, int slot) {
  /* The boundary's result is the storage's value from now on (its result
   * too): the value it was given has no other use, and XLA aliases it
   * instead of copying. */
  seq_slot *q = &p->seq[slot];
  if (q->read == TPU_HLO_NONE) p->slot_value[slot] = q->read = boundary(p, p->slot_value[slot]);
  q->reader = p->arg_base + 1;
  q->last_read = q->read;
  return q->read;
}

/* Ends a call of a program of several (fused eager's): the values the call
 * wrote pass the boundary, as strict's program ends with its results.
 * Without, XLA laid a call's result out to suit the program's other work (a
 * transposed layout, then a copy) and computed a softplus in another order,
 * other last bits. The boundary also takes the values the call read from
 * earlier calls, so they stay alive until the results exist, unless strict
 * eager would have donated their buffers to the call: a parameter of
 * strict's program is never overwritten otherwise, but a value that died
 * inside the call was (XLA computed a logarithm in place, with LLVM's
 * vectorized log). A call that only writes in place over donated buffers
 * and read nothing else of earlier calls gets no boundary: XLA computes it
 * in place as strict's program does, and behind a boundary it did not (an
 * exp_ differed). In-place transcendentals over values of earlier calls
 * (x.exp_().sub_(1)) still differ in the last bit: the fuzzer finds them. */
void tpu_program_end_call(tpu_program *p) {
  if (!p->sequential || !p->exact) return;
  const int me = p->arg_base + 1;
  int n = 0;
  for (int s = 0; s < p->flat.n; s++) {
    const seq_slot *q = &p->seq[s];
    if (q->reader == me && q->last_read != TPU_HLO_NONE && !(q->writer == me && q->donating))
      p->keep[n++] = q->last_read;
  }
  for (int s = 0; s < p->flat.n; s++) {
    seq_slot *q = &p->seq[s];
    if (q->writer == me && (n > 0 || !q->donating) && p->slot_value[s] != TPU_HLO_NONE)
      p->slot_value[s] = q->read = tpu_lower_boundary_keep(p->b, tpu_eager_kernels(), p->slot_value[s], p->keep, n);
  }
}

tpu_status_t tpu_program_apply(tpu_program *p, const tpu_lower_rule *rule, const char *op, int num_args,
                               const tpu_lower_arg *args, tpu_lower_fetch_fn fetch, void *user,
                               tpu_dtype_t common_dtype, tpu_hlo_precision_t precision, int num_outputs,
                               const tpu_hlo_type *out_types, tpu_hlo_value *out_values, bool *out_writes_add) {
  tpu_lower_ctx c = {
      .b = p->b,
      .op = op,
      .num_args = num_args,
      .args = args,
      .num_outputs = num_outputs,
      .out_types = out_types,
      .outputs = out_values,
      .common_dtype = common_dtype,
      .precision = precision,
      .kernels = p->exporting ? 0u : tpu_eager_kernels(),
      .rng_state = TPU_HLO_NONE,
      .fetch = fetch,
      .user = user,
  };
  if (rule->flags & TPU_RULE_RNG) {
    if (p->exporting)
      return tpu_status_new(TPU_ERR_NOT_IMPLEMENTED,
                            "%s: %s is random: an exported module has no random state (export the model in eval() "
                            "mode, where dropout is off)",
                            p->name, op);
    c.rng_state = next_rng_state(p);
  }
  TPU_RETURN_IF_ERROR(tpu_lower_run(rule, &c));
  if (out_writes_add != NULL) *out_writes_add = c.writes_add;
  /* Checks that raise the same error share one flag: a graph of many
   * indexing ops waits for one result per kind of error. */
  for (int i = 0; i < c.num_checks; i++) {
    int j = 0;
    while (j < p->num_checks &&
           (p->checks[j].code != c.checks[i].code || p->checks[j].num_values != c.checks[i].num_values ||
            strcmp(p->checks[j].message, c.checks[i].message) != 0))
      j++;
    if (j < p->num_checks) {
      /* The values of the first check that fails. */
      tpu_lower_check *k = &p->checks[j];
      for (int v = 0; v < k->num_values; v++)
        k->values[v] = tpu_hlo_select(p->b, k->ok, c.checks[i].values[v], k->values[v]);
      k->ok = tpu_hlo_binary(p->b, TPU_HLO_AND, k->ok, c.checks[i].ok);
    } else if (p->num_checks == MAX_CHECKS_PER_PROGRAM) {
      return tpu_status_new(TPU_ERR_NOT_IMPLEMENTED, "%s: too many kinds of runtime checks in one program",
                            p->name);
    } else {
      p->checks[p->num_checks++] = c.checks[i];
    }
  }
  return NULL;
}

void tpu_program_write(tpu_program *p, int arg, int item, tpu_hlo_value value, bool donate, bool adds) {
  arg += p->arg_base;
  int fi = tpu_flat_index(&p->flat, arg, item);
  if (fi < 0) return;
  const tpu_tensor_ref *ref = p->flat.refs[fi].ref;
  if (ref->storage == NULL || tpu_view_numel(&ref->view) == 0 || value == TPU_HLO_NONE) return;
  int slot = p->flat.refs[fi].slot;
  value = apply_view_bits(p->b, ref, tpu_hlo_convert(p->b, value, ref->view.dtype));
  tpu_hlo_value cur = p->slot_value[slot];
  /* A write through a view keeps the rest of the storage as the earlier
   * calls left it: read as any call reads it. */
  if (cur != TPU_HLO_NONE && p->sequential && p->seq[slot].writer != p->arg_base + 1) cur = written_storage(p, slot);
  if (cur == TPU_HLO_NONE && !tpu_view_is_whole(&ref->view, ref->storage->nbytes))
    cur = slot_storage(p, slot);
  tpu_hlo_value nv;
  if (cur == TPU_HLO_NONE) { /* the whole storage, unread: the value is the storage */
    nv = value;
  } else {
    nv = tpu_hlo_view_write(p->b, cur, &ref->view, value, adds);
  }
  p->slot_value[slot] = nv;
  p->seq[slot].read = TPU_HLO_NONE;
  p->seq[slot].writer = p->arg_base + 1;
  p->seq[slot].donating = donate;
  if (!donate) p->slot_kept[slot] = true;
  if (!p->slot_written[slot]) {
    p->slot_written[slot] = true;
    p->written[p->num_written++] = slot;
  }
}

void tpu_program_output(tpu_program *p, int index, tpu_hlo_value value, const tpu_eager_out_meta *meta) {
  if (index >= p->num_outputs) {
    int n = index + 1;
    tpu_hlo_value *v = realloc(p->out_values, (size_t)n * sizeof *v);
    if (v != NULL) p->out_values = v;
    tpu_eager_out_meta *m = realloc(p->out_meta, (size_t)n * sizeof *m);
    if (m != NULL) p->out_meta = m;
    if (v == NULL || m == NULL) {
      tpu_hlo_fail(p->b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
      return;
    }
    for (int i = p->num_outputs; i < n; i++) {
      p->out_values[i] = TPU_HLO_NONE;
      p->out_meta[i] = (tpu_eager_out_meta){.dtype = TPU_INVALID};
    }
    p->num_outputs = n;
  }
  p->out_values[index] = value;
  p->out_meta[index] = *meta;
}

/* |v| as the buffer of a storage it covers densely (without size-1 dims). */
static tpu_hlo_value dense_storage(tpu_hlo_builder *b, tpu_hlo_value v) {
  const tpu_hlo_type *t = tpu_hlo_type_of(b, v);
  tpu_hlo_type d = tpu_storage_dense_type(t->dtype, t->rank, t->dims);
  return tpu_hlo_reshape(b, v, d.rank, d.dims);
}

/* The new output's value laid out as its storage: dims in memory order. */
static tpu_hlo_value output_storage(tpu_hlo_builder *b, tpu_hlo_value v, const tpu_eager_out_meta *m) {
  tpu_view view = {.dtype = m->dtype, .rank = m->rank};
  memcpy(view.sizes, m->sizes, sizeof m->sizes);
  memcpy(view.strides, m->strides, sizeof m->strides);
  v = tpu_hlo_convert(b, v, m->dtype);
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
  return dense_storage(b, v);
}

void tpu_program_set_base(tpu_program *p, int arg_base) { p->arg_base = arg_base; }

void tpu_program_set_fused(tpu_program *p, bool exact) {
  p->sequential = p->rng_per_op = p->lazy = true;
  p->exact = exact;
}

void tpu_program_set_lazy(tpu_program *p) { p->lazy = true; }

void tpu_program_output_to(tpu_program *p, int arg, tpu_hlo_value value, const tpu_eager_out_meta *meta) {
  arg += p->arg_base;
  int fi = tpu_flat_index(&p->flat, arg, -1);
  if (fi < 0 || value == TPU_HLO_NONE) return;
  const tpu_tensor_ref *ref = p->flat.refs[fi].ref;
  if (ref->storage == NULL || tpu_view_numel(&ref->view) == 0) return;
  int slot = p->flat.refs[fi].slot;
  p->slot_value[slot] = output_storage(p->b, value, meta);
  p->seq[slot].read = TPU_HLO_NONE;
  p->seq[slot].writer = p->arg_base + 1;
  p->seq[slot].donating = false;
  if (!p->slot_written[slot]) {
    p->slot_written[slot] = true;
    p->written[p->num_written++] = slot;
  }
}

void tpu_program_discard(tpu_program *p, int arg, int item) {
  int fi = tpu_flat_index(&p->flat, arg + p->arg_base, item);
  if (fi >= 0 && p->flat.refs[fi].slot >= 0) p->seq[p->flat.refs[fi].slot].discard = true;
}

static void dump_program(const char *name, uint64_t hash, const char *text) {
  const char *dir = tpu_eager_dump_dir();
  if (dir == NULL) return;
  char path[4096];
  char safe[128];
  size_t j = 0;
  for (const char *c = name; *c && j + 1 < sizeof safe; c++) safe[j++] = (*c == ':' || *c == '/') ? '_' : *c;
  safe[j] = '\0';
  snprintf(path, sizeof path, "%s/%s-%016llx.mlir", dir, safe, (unsigned long long)hash);
  FILE *fp = fopen(path, "w");
  if (fp != NULL) {
    fputs(text, fp);
    fclose(fp);
  }
}

tpu_status_t tpu_program_finish(tpu_program *p, tpu_eager_entry **out_entry) {
  *out_entry = NULL;
  tpu_hlo_builder *b = p->b;
  static _Atomic uint64_t next_serial = 1;
  tpu_eager_entry *e = calloc(1, sizeof *e);
  if (e != NULL) {
    atomic_init(&e->refs, 1);
    e->serial = atomic_fetch_add(&next_serial, 1);
  }
  int max_results = p->num_written + p->num_outputs + p->num_checks;
  result_dst *results = malloc((size_t)(max_results ? max_results : 1) * sizeof *results);
  tpu_hlo_value *values = malloc((size_t)(max_results ? max_results : 1) * sizeof *values);
  char *text = NULL;
  tpu_status_t st = NULL;
  if (e == NULL || results == NULL || values == NULL) {
    st = tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  /* A failed check keeps every written storage as it was. */
  tpu_hlo_value all_ok = TPU_HLO_NONE;
  for (int i = 0; i < p->num_checks; i++)
    all_ok = all_ok == TPU_HLO_NONE ? p->checks[i].ok : tpu_hlo_binary(b, TPU_HLO_AND, all_ok, p->checks[i].ok);
  int n = 0;
  for (int i = 0; i < p->num_written; i++) {
    int slot = p->written[i];
    if (p->seq[slot].discard) continue;
    tpu_hlo_value nv = dense_storage(b, p->slot_value[slot]);
    if (all_ok != TPU_HLO_NONE) {
      const tpu_hlo_type *t = tpu_hlo_type_of(b, nv);
      tpu_hlo_value old = tpu_hlo_storage_as(b, slot_storage(p, slot), t->dtype);
      nv = tpu_hlo_select(b, all_ok, nv, tpu_hlo_reshape(b, old, t->rank, t->dims));
    }
    results[n] = (result_dst){.ref = slot, .output = -1, .type = *tpu_hlo_type_of(b, nv)};
    values[n] = nv;
    /* Donate the old buffer into its replacement when the types agree. */
    if (!p->slot_kept[slot] && p->slot_param[slot] != TPU_HLO_NONE &&
        tpu_hlo_type_equal(tpu_hlo_type_of(b, p->slot_param[slot]), tpu_hlo_type_of(b, nv))) {
      tpu_hlo_param_set_alias(b, p->slot_param_index[slot], n);
      p->params[p->slot_param_index[slot]].donate = true;
    }
    n++;
  }
  for (int i = 0; i < p->num_outputs; i++) {
    const tpu_eager_out_meta *m = &p->out_meta[i];
    if (m->dtype == TPU_INVALID || p->out_values[i] == TPU_HLO_NONE) continue;
    int64_t numel = 1;
    for (int d = 0; d < m->rank; d++) numel *= m->sizes[d];
    if (numel == 0) continue;
    values[n] = output_storage(b, p->out_values[i], m);
    results[n] = (result_dst){.ref = -1, .output = i, .type = *tpu_hlo_type_of(b, values[n])};
    n++;
  }
  for (int i = 0; i < p->num_checks; i++) {
    const tpu_lower_check *k = &p->checks[i];
    int64_t one = 1;
    tpu_hlo_value parts[1 + TPU_LOWER_CHECK_VALUES];
    parts[0] = tpu_hlo_reshape(b, tpu_hlo_convert(b, k->ok, TPU_S64), 1, &one);
    for (int v = 0; v < TPU_LOWER_CHECK_VALUES; v++)
      parts[1 + v] = v < k->num_values ? tpu_hlo_reshape(b, k->values[v], 1, &one)
                                       : tpu_hlo_const_i64_list(b, (const int64_t[]){0}, 1);
    values[n] = tpu_hlo_concatenate(b, parts, 1 + TPU_LOWER_CHECK_VALUES, 0);
    results[n] = (result_dst){.ref = -1, .output = -1, .type = *tpu_hlo_type_of(b, values[n])};
    n++;
    e->check_codes[i] = k->code;
    e->check_messages[i] = k->message;
    e->check_num_values[i] = k->num_values;
  }
  e->num_checks = p->num_checks;
  e->num_results = n;
  e->results = results;
  results = NULL;
  e->num_params = p->num_params;
  e->params = p->params;
  p->params = NULL;
  p->num_params = p->cap_params = 0;
  e->donate = calloc((size_t)(e->num_params ? e->num_params : 1), sizeof *e->donate);
  e->num_meta = p->num_outputs;
  e->meta = malloc((size_t)(p->num_outputs ? p->num_outputs : 1) * sizeof *e->meta);
  if (e->donate == NULL || e->meta == NULL) {
    st = tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  if (p->num_outputs) memcpy(e->meta, p->out_meta, (size_t)p->num_outputs * sizeof *e->meta);
  for (int i = 0; i < e->num_params; i++) {
    e->donate[i] = e->params[i].donate;
    e->any_donation |= e->params[i].donate;
  }
  /* A program small enough for the CPU plugin to run inline (well under its
   * ~1000-flop threshold) is done when launched; anything bigger is tracked
   * for torch.tpu.synchronize(). */
  int64_t elements = 0;
  for (int i = 0; i < n; i++) elements += tpu_hlo_type_numel(tpu_hlo_type_of(b, values[i]));
  for (int i = 0; i < tpu_hlo_num_params(b); i++) elements += tpu_hlo_type_numel(tpu_hlo_param_type(b, i));
  e->track = !tpu_runtime_runs_small_programs_inline(tpu_eager_runtime()) || elements > 256;
  if (n > 0) {
    TPU_GOTO_IF_ERROR(st, tpu_hlo_finish(b, values, n, &text), fail);
    tpu_compile_options_init(&e->options);
    e->options.max_rank = tpu_hlo_max_rank(b);
    e->name = strdup(p->name);
    if (e->name == NULL) {
      st = tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
      goto fail;
    }
    e->options.name = e->name; /* names the program in profiler traces */
    if (p->lazy) {
      e->text = text; /* compiled when first run (fused eager records calls without running them) */
      text = NULL;
    } else {
      TPU_GOTO_IF_ERROR(st, compile_entry(e, text), fail);
    }
  } else {
    TPU_GOTO_IF_ERROR(st, tpu_hlo_status(b), fail);
  }
  *out_entry = e;
  e = NULL;
fail:
  tpu_eager_entry_free(e);
  free(results);
  free(values);
  free(text);
  return st;
}

/* --- exporting -------------------------------------------------------------------- */

tpu_status_t tpu_program_new_export(const char *name, tpu_program **out_p) {
  *out_p = NULL;
  /* The call must outlive the program: the program holds its own (empty). */
  static const tpu_eager_call empty = {.op = NULL, .num_args = 0, .args = NULL, .device = 0};
  TPU_RETURN_IF_ERROR(tpu_program_new(&empty, name, out_p));
  (*out_p)->exporting = true;
  return NULL;
}

tpu_hlo_value tpu_program_export_param(tpu_program *p, const tpu_hlo_type *t) { return tpu_hlo_param(p->b, t, -1); }

tpu_status_t tpu_program_export_finish(tpu_program *p, const tpu_hlo_value *results, int num_results,
                                       char **out_text, int *out_num_checks) {
  *out_text = NULL;
  *out_num_checks = p->num_checks;
  if (!p->exporting) return tpu_status_new(TPU_ERR_RUNTIME, "%s: internal: not an exported program", p->name);
  return tpu_hlo_finish(p->b, results, num_results, out_text);
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
  tpu_buffer_destroy(tpu_eager_runtime(), sb->buf);
  free(sb);
}

/* |*out| holds one reference, released with scalar_release. */
static tpu_status_t scalar_buffer(int device, tpu_dtype_t dtype, const void *bytes, scalar_buf **out) {
  *out = NULL;
  size_t size = tpu_dtype_size(dtype);
  unsigned char key[16] = {0};
  memcpy(key, bytes, size);
  uint64_t h = tpu_hash64(key, sizeof key, (uint64_t)dtype * 31 + (uint64_t)device);
  scalar_slot *slot = &g_scalars[h % SCALAR_CACHE];
  pthread_mutex_lock(&g_scalar_lock);
  if (slot->held != NULL && slot->dtype == dtype && slot->device == device && memcmp(slot->bytes, key, 16) == 0) {
    atomic_fetch_add_explicit(&slot->held->refs, 1, memory_order_relaxed);
    *out = slot->held;
    pthread_mutex_unlock(&g_scalar_lock);
    return NULL;
  }
  pthread_mutex_unlock(&g_scalar_lock);
  scalar_buf *sb = malloc(sizeof *sb);
  if (sb == NULL) return tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  atomic_init(&sb->refs, 2); /* the slot's and the caller's */
  tpu_status_t st = tpu_buffer_from_host(tpu_eager_runtime(), device, key, dtype, NULL, 0, &sb->buf);
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

/* --- running ------------------------------------------------------------------------ */

tpu_status_t tpu_eager_execute(const tpu_eager_entry *e, const tpu_eager_call *call,
                               tpu_storage *const *new_outputs) {
  if (__atomic_load_n(&tpu_trace_pending, __ATOMIC_ACQUIRE) > 0)
    TPU_RETURN_IF_ERROR(tpu_trace_settle_call(call, TPU_CUT_GRAPH));
  tpu_stats_add(TPU_STAT_OPS, 1);
  return tpu_eager_execute_raw(e, call, new_outputs);
}

tpu_status_t tpu_eager_execute_raw(const tpu_eager_entry *e, const tpu_eager_call *call,
                                   tpu_storage *const *new_outputs) {
  TPU_RETURN_IF_ERROR(tpu_runtime_check_fork()); /* before the scalar cache's lock */
  if (e->num_results == 0) return NULL;
  tpu_runtime *rt = tpu_eager_runtime();
  flat_call f;
  TPU_RETURN_IF_ERROR(tpu_flatten_call(call, &f));
  tpu_buffer *args_small[32], *outs_small[32];
  scalar_buf *held_small[32]; /* table scalars this call reads, held until the launch */
  tpu_buffer **args = e->num_params <= 32 ? args_small : malloc((size_t)e->num_params * sizeof *args);
  tpu_buffer **outs = e->num_results <= 32 ? outs_small : malloc((size_t)e->num_results * sizeof *outs);
  scalar_buf **held = e->num_params <= 32 ? held_small : malloc((size_t)e->num_params * sizeof *held);
  int num_held = 0;
  tpu_buffer *rng_small[8], **rngs = rng_small; /* one per random op of a fused program */
  int num_rngs = 0;
  tpu_executable *exe = NULL;
  tpu_buffer *lists_small[64], **lists = lists_small; /* Scalar[] operands */
  int num_lists = 0;
  tpu_status_t st = NULL;
  if (e->num_params > 64) lists = malloc((size_t)e->num_params * sizeof *lists);
  if (args == NULL || outs == NULL || held == NULL || lists == NULL) {
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
      case SRC_SCALAR: {
        unsigned char bytes[16] = {0};
        const void *value = bytes;
        if (p->kind == SRC_HOST_SCALAR) value = f.refs[p->ref].ref->host_scalar;
        else scalar_bytes(&call->args[p->arg].lower, bytes);
        TPU_GOTO_IF_ERROR(st, scalar_buffer(call->device, p->dtype, value, &held[num_held]), done);
        args[i] = held[num_held++]->buf;
        break;
      }
      case SRC_SCALAR_LIST: { /* one upload per call: the numbers change (a step size) */
        const tpu_lower_arg *l = &call->args[p->arg].lower;
        int64_t n = l->n;
        const void *data = l->dtype == TPU_F64 ? (const void *)l->floats : (const void *)l->ints;
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
          rngs = malloc((size_t)e->num_params * sizeof *rngs);
          if (rngs == NULL) {
            rngs = rng_small;
            st = tpu_status_new(TPU_ERR_OUT_OF_MEMORY, "out of host memory");
            goto done;
          }
          memcpy(rngs, rng_small, sizeof rng_small);
        }
        TPU_GOTO_IF_ERROR(st, tpu_buffer_from_host(rt, call->device, state, TPU_U64, &two, 1, &rngs[num_rngs]), done);
        args[i] = rngs[num_rngs++];
        break;
      }
    }
  }
  TPU_GOTO_IF_ERROR(st, entry_executable(e, &exe), done);
  TPU_GOTO_IF_ERROR(st, tpu_executable_execute(rt, exe, call->device, args, (size_t)e->num_params,
                                                e->any_donation ? e->donate : NULL, e->track, outs),
                    done);
  int first_check = e->num_results - e->num_checks;
  for (int i = 0; i < first_check; i++) {
    const result_dst *r = &e->results[i];
    tpu_storage *s = r->ref >= 0 ? f.refs[r->ref].ref->storage : new_outputs[r->output];
    if (s == NULL) tpu_buffer_destroy(rt, outs[i]);
    else tpu_storage_put(s, outs[i], &r->type);
  }
  /* Data-dependent checks wait for their flags (a sync, like PyTorch's CPU
   * kernels that raise before returning). */
  for (int i = 0; i < e->num_checks; i++) {
    int64_t flag[1 + TPU_LOWER_CHECK_VALUES] = {1};
    tpu_status_t cst = tpu_buffer_to_host(rt, outs[first_check + i], flag, sizeof flag);
    tpu_buffer_destroy(rt, outs[first_check + i]);
    if (st == NULL && cst != NULL) st = cst;
    else tpu_status_free(cst);
    if (st == NULL && !flag[0]) st = check_failure(e, i, flag + 1);
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
