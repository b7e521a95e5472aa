/* Programs over storages (see program.h): parameters per storage actually
 * read, view reads and writes, rule application, results, runtime checks;
 * finishing makes an entry (entry.c) that tpu_eager_execute (eager.c) runs. */
#include "eager/program.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiles.h"
#include "base/strbuf.h"
#include "eager/internal.h"

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
  const tpu_eager_context *ctx; /* NULL when exporting */
  const tpu_eager_call *call;
  char *name;
  flat_call flat;
  tpu_hlo_builder *b;
  tpu_hlo_value *fetched;    /* per flat ref */
  tpu_hlo_value *slot_param; /* per flat ref (used at slot indices) */
  int *slot_param_index;
  int *slot_param_call;      /* the call that made slot_param (arg_base + 1), in a fused program */
  int *slot_num_params;
  bool *slot_mutated;        /* some call of the program writes it (fused programs) */
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
  tpu_hlo_value *keep; /* scratch of tpu_program_begin_call/end_call, two per slot */
  int *ending;         /* scratch of tpu_program_begin_call/end_call, two per slot */
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
  free(p->slot_param_call);
  free(p->slot_num_params);
  free(p->slot_mutated);
  free(p->slot_value);
  free(p->slot_written);
  free(p->slot_kept);
  free(p->seq);
  free(p->keep);
  free(p->ending);
  free(p->written);
  free(p->scalar_value);
  free(p->params);
  free(p->out_values);
  free(p->out_meta);
  free(p);
}

tpu_status_t tpu_program_new(const tpu_eager_context *ctx, const tpu_eager_call *call, const char *name,
                             tpu_program **out_p) {
  *out_p = NULL;
  tpu_program *p = NULL;
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(1, sizeof *p, (void **)&p));
  p->ctx = ctx;
  p->call = call;
  p->rng_param = TPU_HLO_NONE;
  tpu_status_t st = tpu_flatten_call(call, &p->flat);
  if (st != NULL) {
    free(p);
    return st;
  }
  size_t n = p->flat.n > 0 ? (size_t)p->flat.n : 1;
  TPU_GOTO_IF_ERROR(st, tpu_strdup(name, &p->name), fail);
  TPU_GOTO_IF_ERROR(st, tpu_alloc(n * sizeof *p->fetched, (void **)&p->fetched), fail);
  TPU_GOTO_IF_ERROR(st, tpu_alloc(n * sizeof *p->slot_param, (void **)&p->slot_param), fail);
  TPU_GOTO_IF_ERROR(st, tpu_alloc(n * sizeof *p->slot_param_index, (void **)&p->slot_param_index), fail);
  TPU_GOTO_IF_ERROR(st, tpu_alloc_zeroed(n, sizeof *p->slot_param_call, (void **)&p->slot_param_call), fail);
  TPU_GOTO_IF_ERROR(st, tpu_alloc_zeroed(n, sizeof *p->slot_num_params, (void **)&p->slot_num_params), fail);
  TPU_GOTO_IF_ERROR(st, tpu_alloc_zeroed(n, sizeof *p->slot_mutated, (void **)&p->slot_mutated), fail);
  TPU_GOTO_IF_ERROR(st, tpu_alloc(n * sizeof *p->slot_value, (void **)&p->slot_value), fail);
  TPU_GOTO_IF_ERROR(st, tpu_alloc_zeroed(n, sizeof *p->slot_written, (void **)&p->slot_written), fail);
  TPU_GOTO_IF_ERROR(st, tpu_alloc_zeroed(n, sizeof *p->slot_kept, (void **)&p->slot_kept), fail);
  TPU_GOTO_IF_ERROR(st, tpu_alloc_zeroed(n, sizeof *p->seq, (void **)&p->seq), fail);
  TPU_GOTO_IF_ERROR(st, tpu_alloc(2 * n * sizeof *p->keep, (void **)&p->keep), fail);
  TPU_GOTO_IF_ERROR(st, tpu_alloc(2 * n * sizeof *p->ending, (void **)&p->ending), fail);
  TPU_GOTO_IF_ERROR(st, tpu_alloc(n * sizeof *p->written, (void **)&p->written), fail);
  TPU_GOTO_IF_ERROR(st, tpu_alloc((size_t)(call->num_args + 1) * sizeof *p->scalar_value, (void **)&p->scalar_value),
                    fail);
  for (size_t i = 0; i < n; i++) {
    p->fetched[i] = p->slot_param[i] = p->slot_value[i] = TPU_HLO_NONE;
    p->seq[i].read = p->seq[i].last_read = TPU_HLO_NONE;
  }
  for (int i = 0; i <= call->num_args; i++) p->scalar_value[i] = TPU_HLO_NONE;
  TPU_GOTO_IF_ERROR(st, tpu_hlo_builder_create(&p->b), fail);
  *out_p = p;
  return NULL;

fail:
  tpu_program_free(p);
  return st;
}

static tpu_hlo_value add_param(tpu_program *p, const tpu_hlo_type *t, param_src src) {
  if (p->num_params == p->cap_params) {
    int cap = p->cap_params ? p->cap_params * 2 : 16;
    param_src *np = tpu_realloc_or_null(p->params, (size_t)cap * sizeof *np);
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
static tpu_hlo_value dense_storage(tpu_hlo_builder *b, tpu_hlo_value v);

static tpu_hlo_value new_storage_param(tpu_program *p, int slot) {
  tpu_hlo_type t = tpu_flat_slot_type(&p->flat, slot); /* as the key says */
  p->slot_param_index[slot] = p->num_params;
  p->slot_param_call[slot] = p->arg_base + 1;
  p->slot_num_params[slot]++;
  param_src src = {.kind = SRC_STORAGE, .ref = slot, .dtype = t.dtype};
  p->slot_param[slot] = add_param(p, &t, src);
  if (p->slot_value[slot] == TPU_HLO_NONE) p->slot_value[slot] = p->slot_param[slot];
  return p->slot_param[slot];
}

static tpu_hlo_value slot_storage(tpu_program *p, int slot) {
  if (p->slot_param[slot] != TPU_HLO_NONE) return p->slot_param[slot];
  return new_storage_param(p, slot);
}

/* The storage of |slot| as a call of a fused program reads it before any
 * call wrote it: in an exact fused program, a storage no call of the
 * program writes is a parameter of its own per call that reads it, bound
 * to the same buffer, as each call's strict program has its own. XLA
 * cannot tell them equal, so it neither merges one call's work on the
 * storage with another's (common subexpressions: three losses' gather
 * indices from one target, computed once outside their fusions, after which
 * LLVM vectorized each loss's sum in another order) nor fuses their
 * reductions of it into one. A storage the program writes keeps one
 * parameter, whose buffer a write may donate (a donated buffer cannot be a
 * second argument of the same launch). */
static tpu_hlo_value read_storage(tpu_program *p, int slot) {
  if (p->sequential && p->exact && !p->slot_mutated[slot] && p->slot_param[slot] != TPU_HLO_NONE &&
      p->slot_param_call[slot] != p->arg_base + 1)
    return new_storage_param(p, slot);
  return slot_storage(p, slot);
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
  tpu_hlo_value v = tpu_hlo_reshape(p->b, tpu_hlo_slice_dim(p->b, p->scalar_value[arg], 0, item, item + 1, 1), 0, NULL);
  if (l->dtype == TPU_C128 && !tpu_dtype_is_complex(l->item_dtypes[item])) /* a real number of a complex list */
    v = tpu_hlo_unary(p->b, TPU_HLO_REAL, v);
  return tpu_hlo_convert(p->b, v, l->item_dtypes[item]);
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

/* The storage of |slot| as the current call reads it: as it was before the
 * program's writes; in a program of several calls, as the calls before this
 * one left it. */
static tpu_hlo_value call_storage(tpu_program *p, int slot) {
  return p->sequential && p->slot_written[slot] ? written_storage(p, slot) : read_storage(p, slot);
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
    v = tpu_hlo_view_read(p->b, call_storage(p, p->flat.refs[fi].slot), &r->view);
    v = apply_view_bits(p->b, r, v);
  }
  p->fetched[fi] = v;
  return v;
}

tpu_hlo_value tpu_program_tensor_storage(tpu_program *p, int arg) {
  arg += p->arg_base;
  int fi = tpu_flat_index(&p->flat, arg, -1);
  if (fi < 0) return TPU_HLO_NONE;
  const tpu_tensor_ref *r = p->flat.refs[fi].ref;
  const size_t elem = tpu_dtype_size(r->view.dtype);
  if (tpu_ref_is_none(r) || r->host_scalar != NULL || r->storage == NULL || elem == 0) return TPU_HLO_NONE;
  tpu_view whole = {.dtype = r->view.dtype, .rank = 1, .sizes = {r->storage->nbytes / (int64_t)elem}, .strides = {1}};
  return apply_view_bits(p->b, r, tpu_hlo_view_read(p->b, call_storage(p, p->flat.refs[fi].slot), &whole));
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
  return p->exact ? tpu_lower_boundary(p->b, p->ctx->options.kernels, v) : v;
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
 * other last bits. The values the call read from earlier calls pass it too
 * (results again, aliasing their operands), unless strict eager would have
 * donated their buffers to the call, and later calls read them from there:
 * they stay alive until the call's results exist (a parameter of strict's
 * program is never overwritten otherwise, but a value that died inside the
 * call was: XLA computed a logarithm in place, with LLVM's vectorized log),
 * and a later call that writes one of them in place runs after the call,
 * over its buffer, as strict's does (XLA ran an exp_ of a value a softplus
 * read before the softplus, into a new buffer: other code, other last
 * bits). A call that only writes in place over donated buffers and read
 * nothing else of earlier calls gets no boundary: XLA computes it in place
 * as strict's program does, and behind a boundary it did not (an exp_
 * differed). */
void tpu_program_end_call(tpu_program *p) {
  if (!p->sequential || !p->exact) return;
  const int me = p->arg_base + 1;
  tpu_hlo_value *values = p->keep;
  int n = 0;
  for (int s = 0; s < p->flat.n; s++) { /* the values read, then those written */
    const seq_slot *q = &p->seq[s];
    if (q->reader == me && q->last_read != TPU_HLO_NONE && !(q->writer == me && q->donating)) {
      p->ending[n] = s;
      values[n++] = q->last_read;
    }
  }
  const int num_reads = n;
  for (int s = 0; s < p->flat.n; s++) {
    const seq_slot *q = &p->seq[s];
    if (q->writer == me && (num_reads > 0 || !q->donating) && p->slot_value[s] != TPU_HLO_NONE) {
      p->ending[n] = s;
      values[n++] = p->slot_value[s];
    }
  }
  /* One boundary for all of them: XLA's cost is per custom call and per
   * operand (a _foreach_ call writes a hundred tensors). */
  tpu_lower_boundary_many(p->b, p->ctx->options.kernels, values, n, NULL, 0);
  for (int i = 0; i < n; i++) {
    seq_slot *q = &p->seq[p->ending[i]];
    tpu_hlo_value *slot_value = &p->slot_value[p->ending[i]];
    if (i >= num_reads)
      *slot_value = q->read = values[i];
    else if (*slot_value == q->last_read) /* a read value this call did not overwrite */
      *slot_value = q->read = q->last_read = values[i];
  }
}

tpu_status_t tpu_program_apply(tpu_program *p, const tpu_program_apply_args *a, tpu_hlo_value *out_values,
                               bool *out_writes_add) {
  const char *op = a->op;
  tpu_lower_ctx c = {
      .b = p->b,
      .op = op,
      .num_args = a->num_args,
      .args = a->args,
      .num_outputs = a->num_outputs,
      .out_types = a->out_types,
      .outputs = out_values,
      .common_dtype = a->common_dtype,
      .precision = a->precision,
      .kernels = p->exporting ? 0u : p->ctx->options.kernels,
      .rng_state = TPU_HLO_NONE,
      .fetch = a->fetch,
      .user = a->user,
  };
  if (a->rule->flags & TPU_RULE_RNG) {
    if (p->exporting)
      return tpu_status_new(TPU_ERR_NOT_IMPLEMENTED,
                            "%s: %s is random: an exported module has no random state (export the model in eval() "
                            "mode, where dropout is off)",
                            p->name, op);
    c.rng_state = next_rng_state(p);
  }
  TPU_RETURN_IF_ERROR(tpu_lower_run(a->rule, &c));
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
   * calls left it: read as any call reads it. A write of all of it reads
   * nothing. */
  const bool whole = tpu_view_is_whole(&ref->view, ref->storage->nbytes);
  if (cur != TPU_HLO_NONE && p->sequential && p->seq[slot].writer != p->arg_base + 1 && !(whole && !adds))
    cur = written_storage(p, slot);
  if (cur == TPU_HLO_NONE && !whole) cur = slot_storage(p, slot);
  tpu_hlo_value nv;
  if (cur == TPU_HLO_NONE) { /* the whole storage, unread: the value is the storage */
    nv = value;
  } else {
    nv = tpu_hlo_view_write(p->b, cur, &ref->view, value, adds);
  }
  /* A fused program's calls hand each other storages as strict's programs
   * do, in the storage's dense type: written as the call's shape ([2, 1, 7]
   * over a [2, 7] storage), XLA gave the value a layout of its own and
   * computed an exp_ inside the copy back, in other code (other last
   * bits). */
  p->slot_value[slot] = p->sequential ? dense_storage(p->b, nv) : nv;
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
    tpu_hlo_value *v = tpu_realloc_or_null(p->out_values, (size_t)n * sizeof *v);
    if (v != NULL) p->out_values = v;
    tpu_eager_out_meta *m = tpu_realloc_or_null(p->out_meta, (size_t)n * sizeof *m);
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

/* The values of earlier calls that the call may read pass the boundary
 * together, before its lowering reads them one by one (written_storage):
 * XLA's cost is per custom call and per operand, and a _foreach_ call reads
 * a hundred tensors. A value the call only overwrites has no other use of
 * its boundary's result. */
void tpu_program_begin_call(tpu_program *p, int arg_base, int num_args) {
  p->arg_base = arg_base;
  if (!p->sequential || !p->exact) return;
  tpu_hlo_value *values = p->keep + p->flat.n;
  int n = 0;
  for (int i = 0; i < p->flat.n; i++) {
    const ref_slot *r = &p->flat.refs[i];
    if (r->arg < arg_base || r->arg >= arg_base + num_args || r->slot < 0) continue;
    const int s = r->slot;
    if (!p->slot_written[s] || p->seq[s].read != TPU_HLO_NONE || p->slot_value[s] == TPU_HLO_NONE) continue;
    bool seen = false;
    for (int k = 0; k < n && !seen; k++) seen = p->ending[k] == s;
    if (seen) continue;
    p->ending[n] = s;
    values[n++] = p->slot_value[s];
  }
  tpu_lower_boundary_many(p->b, p->ctx->options.kernels, values, n, NULL, 0);
  for (int k = 0; k < n; k++) p->slot_value[p->ending[k]] = p->seq[p->ending[k]].read = values[k];
}

void tpu_program_set_fused(tpu_program *p, bool exact) {
  p->sequential = p->rng_per_op = p->lazy = true;
  p->exact = exact;
  for (int i = 0; i < p->flat.n; i++)
    if (p->flat.refs[i].slot >= 0 && p->call->args[p->flat.refs[i].arg].mutated)
      p->slot_mutated[p->flat.refs[i].slot] = true;
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

/* A tensor as a signature shows it: "float32[4,8]", then "{8,1}" strides that
 * are not row-major and "+2" a storage offset. */
static void describe_view(tpu_strbuf *sb, const tpu_view *v) {
  tpu_strbuf_printf(sb, "%s[", tpu_dtype_name(v->dtype));
  for (int d = 0; d < v->rank; d++) tpu_strbuf_printf(sb, "%s%lld", d ? "," : "", (long long)v->sizes[d]);
  tpu_strbuf_puts(sb, "]");
  bool dense = true;
  int64_t expect = 1;
  for (int d = v->rank - 1; d >= 0; expect *= v->sizes[d], d--)
    dense = dense && (v->sizes[d] == 1 || v->strides[d] == expect);
  if (!dense) {
    tpu_strbuf_puts(sb, "{");
    for (int d = 0; d < v->rank; d++) tpu_strbuf_printf(sb, "%s%lld", d ? "," : "", (long long)v->strides[d]);
    tpu_strbuf_puts(sb, "}");
  }
  if (v->offset != 0) tpu_strbuf_printf(sb, "+%lld", (long long)v->offset);
}

/* The call's arguments as the compile log shows them, "; " between them
 * (compiles.h): what the program was built for. Numbers show where they
 * are baked into the program; a runtime operand is "number". */
static char *describe_call(const tpu_eager_call *call) {
  enum { MAX_TEXT = 600 };
  tpu_strbuf sb = TPU_STRBUF_INIT;
  for (int i = 0; i < call->num_args && sb.len < MAX_TEXT; i++) {
    const tpu_eager_arg *a = &call->args[i];
    if (i > 0) tpu_strbuf_puts(&sb, "; ");
    switch (a->lower.kind) {
      case TPU_ARG_TENSOR:
        if (a->tensor.storage == NULL && a->tensor.host_scalar != NULL) tpu_strbuf_printf(&sb, "cpu %s", tpu_dtype_name(a->tensor.view.dtype));
        else describe_view(&sb, &a->tensor.view);
        break;
      case TPU_ARG_TENSOR_LIST:
        tpu_strbuf_puts(&sb, "(");
        for (int k = 0; k < a->lower.n && a->items != NULL && sb.len < MAX_TEXT; k++) {
          if (k > 0) tpu_strbuf_puts(&sb, ", ");
          if (a->items[k].view.dtype == TPU_INVALID) tpu_strbuf_puts(&sb, "None");
          else describe_view(&sb, &a->items[k].view);
        }
        tpu_strbuf_puts(&sb, ")");
        break;
      case TPU_ARG_SCALAR:
        if (!a->lower.is_const) tpu_strbuf_puts(&sb, "number");
        else if (tpu_dtype_is_float(a->lower.dtype) || tpu_dtype_is_complex(a->lower.dtype)) tpu_strbuf_printf(&sb, "%g", a->lower.f);
        else tpu_strbuf_printf(&sb, "%lld", (long long)a->lower.i);
        break;
      case TPU_ARG_INT: tpu_strbuf_printf(&sb, "%lld", (long long)a->lower.i); break;
      case TPU_ARG_FLOAT: tpu_strbuf_printf(&sb, "%g", a->lower.f); break;
      case TPU_ARG_BOOL: tpu_strbuf_puts(&sb, a->lower.b ? "True" : "False"); break;
      case TPU_ARG_INT_LIST:
        tpu_strbuf_puts(&sb, "[");
        for (int k = 0; k < a->lower.n; k++) tpu_strbuf_printf(&sb, "%s%lld", k ? "," : "", (long long)a->lower.ints[k]);
        tpu_strbuf_puts(&sb, "]");
        break;
      case TPU_ARG_STRING: tpu_strbuf_printf(&sb, "'%s'", a->lower.s != NULL ? a->lower.s : ""); break;
      case TPU_ARG_DTYPE: tpu_strbuf_puts(&sb, tpu_dtype_name(a->lower.dtype)); break;
      case TPU_ARG_NONE: tpu_strbuf_puts(&sb, "None"); break;
      default: tpu_strbuf_puts(&sb, "-"); break;
    }
  }
  if (sb.len >= MAX_TEXT) tpu_strbuf_puts(&sb, "...");
  if (sb.failed) {
    tpu_strbuf_release(&sb);
    return NULL;
  }
  return sb.len > 0 ? tpu_strbuf_take(&sb) : NULL;
}

tpu_status_t tpu_program_finish(tpu_program *p, tpu_eager_entry **out_entry) {
  *out_entry = NULL;
  if (p->ctx == NULL) return tpu_status_new(TPU_ERR_RUNTIME, "%s: internal: an exported program is finished by tpu_program_export_finish", p->name);
  tpu_hlo_builder *b = p->b;
  static _Atomic uint64_t next_serial = 1;
  tpu_eager_entry *e = NULL;
  size_t max_results = (size_t)(p->num_written + p->num_outputs + p->num_checks);
  result_dst *results = NULL;
  tpu_hlo_value *values = NULL;
  char *text = NULL;
  tpu_status_t st = NULL;
  TPU_GOTO_IF_ERROR(st, tpu_alloc_zeroed(1, sizeof *e, (void **)&e), fail);
  e->ctx = p->ctx;
  atomic_init(&e->refs, 1);
  e->serial = atomic_fetch_add(&next_serial, 1);
  TPU_GOTO_IF_ERROR(st, tpu_alloc(max_results * sizeof *results, (void **)&results), fail);
  TPU_GOTO_IF_ERROR(st, tpu_alloc(max_results * sizeof *values, (void **)&values), fail);
  /* A failed check keeps every written storage as it was: in a program of
   * one call, through its results; in a fused program, by dropping them
   * (checks_first). */
  tpu_hlo_value all_ok = TPU_HLO_NONE;
  for (int i = 0; i < p->num_checks && !p->sequential; i++)
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
    /* Donate the old buffer into its replacement when the types agree (and
     * it is one argument of the launch: see read_storage). */
    if (!p->slot_kept[slot] && p->slot_param[slot] != TPU_HLO_NONE && p->slot_num_params[slot] == 1 &&
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
  e->checks_first = p->sequential && p->num_checks > 0;
  e->num_results = n;
  e->results = results;
  results = NULL;
  e->num_params = p->num_params;
  e->params = p->params;
  p->params = NULL;
  p->num_params = p->cap_params = 0;
  TPU_GOTO_IF_ERROR(st, tpu_alloc_zeroed((size_t)e->num_params, sizeof *e->donate, (void **)&e->donate), fail);
  e->num_meta = p->num_outputs;
  TPU_GOTO_IF_ERROR(st, tpu_alloc((size_t)p->num_outputs * sizeof *e->meta, (void **)&e->meta), fail);
  if (p->num_outputs) memcpy(e->meta, p->out_meta, (size_t)p->num_outputs * sizeof *e->meta);
  for (int i = 0; i < e->num_params; i++) {
    e->donate[i] = e->params[i].donate && !e->checks_first;
    e->any_donation |= e->params[i].donate;
  }
  /* A program small enough for the CPU plugin to run inline (well under its
   * ~1000-flop threshold) is done when launched; anything bigger is tracked
   * for torch.tpu.synchronize(). */
  int64_t elements = 0;
  for (int i = 0; i < n; i++) elements += tpu_hlo_type_numel(tpu_hlo_type_of(b, values[i]));
  for (int i = 0; i < tpu_hlo_num_params(b); i++) elements += tpu_hlo_type_numel(tpu_hlo_param_type(b, i));
  e->track = !tpu_runtime_runs_small_programs_inline(p->ctx->rt) || elements > 256;
  if (n > 0) {
    TPU_GOTO_IF_ERROR(st, tpu_hlo_finish(b, values, n, &text), fail);
    tpu_compile_options_init(&e->options);
    e->options.max_rank = tpu_hlo_max_rank(b);
    TPU_GOTO_IF_ERROR(st, tpu_strdup(p->name, &e->name), fail);
    e->options.name = e->name; /* names the program in profiler traces */
    e->signature = describe_call(p->call);
    e->writer = tpu_str_intern(e->name);
    if (p->lazy) {
      e->text = text; /* compiled when first run (fused eager records calls without running them) */
      text = NULL;
      tpu_compiles_note(e->name, e->signature, TPU_COMPILE_BUILT, 0);
    } else {
      TPU_GOTO_IF_ERROR(st, tpu_eager_entry_compile(e, text), fail);
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
  TPU_RETURN_IF_ERROR(tpu_program_new(NULL, &empty, name, out_p));
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
