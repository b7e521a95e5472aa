/* Programs over storages: the builder both execution paths share.
 *
 * A program's inputs are the tensors and Python numbers of a call
 * (tpu_eager_call): a tensor is read through its view out of its storage's
 * buffer, which becomes a parameter the first time anything reads it; a
 * storage several arguments share is one parameter. Rules are applied to
 * values; results are written back through views (in-place ops, input
 * mutations of a graph) or become new tensors. Finishing compiles the
 * program into an entry that tpu_eager_execute runs on any call with the
 * same signature.
 *
 * Eager builds a program of one rule per call signature (eager.c); the
 * torch.compile backend builds one program per graph, applying the rule of
 * every node (csrc/torch/graph.cpp). Both therefore read, write and lower
 * identically. */
#ifndef TPU_EAGER_PROGRAM_H_
#define TPU_EAGER_PROGRAM_H_

#include "eager/eager.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_program tpu_program;

/* A program over |call|'s arguments for |ctx| (tpu_eager_context_get() for
 * the process's); |call| and |ctx| must outlive the program, |ctx| its
 * entries too. |name| names it in errors and dumps. */
tpu_status_t tpu_program_new(const tpu_eager_context *ctx, const tpu_eager_call *call, const char *name,
                             tpu_program **out_p) TPU_MUST_USE;
void tpu_program_free(tpu_program *p);
tpu_hlo_builder *tpu_program_builder(tpu_program *p);

/* Tensor argument |arg| (|item| of a list, -1 otherwise) read through its
 * view; 0-dim host tensors are runtime operands. */
tpu_hlo_value tpu_program_tensor(tpu_program *p, int arg, int item);
/* The whole storage tensor argument |arg| views, read as a 1-D value of the
 * tensor's dtype (what as_strided reads); TPU_HLO_NONE where the argument
 * has no storage. */
tpu_hlo_value tpu_program_tensor_storage(tpu_program *p, int arg);
/* Python-number argument |arg| as a runtime rank-0 value. */
tpu_hlo_value tpu_program_scalar(tpu_program *p, int arg);
/* Number |item| of Scalar[] argument |arg|, a runtime rank-0 value of the
 * number's own type (the list is one runtime operand). */
tpu_hlo_value tpu_program_scalar_item(tpu_program *p, int arg, int item);

/* One application of a rule: what tpu_program_apply lowers. Pointers are
 * borrowed for the call. */
typedef struct tpu_program_apply_args {
  const tpu_lower_rule *rule;
  const char *op; /* names the op in errors */
  int num_args;
  const tpu_lower_arg *args; /* in schema order */
  tpu_lower_fetch_fn fetch;  /* reads tensor arguments */
  void *user;                /* the context's user pointer, for |fetch| */
  tpu_dtype_t common_dtype;
  tpu_hlo_precision_t precision;
  int num_outputs;
  const tpu_hlo_type *out_types; /* from the meta functions */
} tpu_program_apply_args;

/* Applies |a->rule|, its |a->num_outputs| results in |out_values|. Random
 * rules get a state of their own. Runtime checks the rule adds guard the
 * whole program. |*out_writes_add| (may be NULL) tells whether the values
 * it computes for written arguments add to them (tpu_lower_ctx.writes_add). */
tpu_status_t tpu_program_apply(tpu_program *p, const tpu_program_apply_args *a, tpu_hlo_value *out_values,
                               bool *out_writes_add) TPU_MUST_USE;
/* A fetch function reading the program's own call arguments (eager). */
tpu_hlo_value tpu_program_fetch_call(tpu_lower_ctx *c, int arg, int item);

/* Writes |value| through the view of tensor argument |arg| (of its item
 * |item| for a list, -1 otherwise); writes chain. With
 * |donate|, the storage's old buffer may become the new one (in place, when
 * the types agree); without, the program makes a new buffer and the old one
 * lives until the program ends. |adds|: through an expanded view, the
 * elements' changes add up (tpu_hlo_view_write). */
void tpu_program_write(tpu_program *p, int arg, int item, tpu_hlo_value value, bool donate, bool adds);
/* Makes |value| new output |index|, laid out as |meta| says. */
void tpu_program_output(tpu_program *p, int index, tpu_hlo_value value, const tpu_eager_out_meta *meta);

/* Several calls in one program (fused eager): the call given to
 * tpu_program_new holds every call's arguments one after another, and
 * |arg_base| is where the next call's begin; argument indexes passed to the
 * functions above are relative to it. */
void tpu_program_set_base(tpu_program *p, int arg_base);
/* Before a call's lowering, in a fused program: the base of its |num_args|
 * arguments; what earlier calls wrote and it may read passes the boundary
 * (see program.c). */
void tpu_program_begin_call(tpu_program *p, int arg_base, int num_args);
/* After a call's lowering, in a fused program: keeps what the call read
 * alive until its results exist, as strict's parameters are (see program.c). */
void tpu_program_end_call(tpu_program *p);
/* Reads see the writes of earlier calls, each random op gets the state
 * strict eager would give it (tpu_eager_call.rng_states), and finishing
 * defers the compile to the first execute. |exact|: a call reads what
 * earlier calls wrote through the boundary custom call (kernels.h), so XLA
 * computes every call as strict eager's program does, bit for bit. Without,
 * XLA fuses across calls (a product and a sum into one fused multiply-add,
 * a broadcast into the next call's reduction). */
void tpu_program_set_fused(tpu_program *p, bool exact);
/* Finishing keeps the program's text; the first execute compiles it. */
void tpu_program_set_lazy(tpu_program *p);
/* Makes |value| the whole content of tensor argument |arg|'s storage, laid
 * out as |meta| says (a new output given as an argument). */
void tpu_program_output_to(tpu_program *p, int arg, tpu_hlo_value value, const tpu_eager_out_meta *meta);
/* The storage of argument |arg| (|item|) is not a result, whatever writes
 * it: nobody holds it any more. */
void tpu_program_discard(tpu_program *p, int arg, int item);

/* Compiles the program (or loads it from the on-disk cache). The entry is
 * the caller's: insert it in a cache or free it with tpu_eager_entry_free. */
tpu_status_t tpu_program_finish(tpu_program *p, tpu_eager_entry **out_entry) TPU_MUST_USE;

/* Exporting (torchtpu.export_stablehlo): a program over no call whose
 * parameters are values, one per tpu_program_export_param in order, and
 * whose results are the values given to tpu_program_export_finish as they
 * are (no storages, no layouts): a self-contained StableHLO module for any
 * PJRT user. Rules lower exactly as in the other paths, but call no
 * hand-written kernels (custom calls only this process registers); random
 * rules are refused (they read the program's random state). */
tpu_status_t tpu_program_new_export(const char *name, tpu_program **out_p) TPU_MUST_USE;
tpu_hlo_value tpu_program_export_param(tpu_program *p, const tpu_hlo_type *t);
/* The module's text (malloc'ed, the caller's). Runtime checks the rules
 * added (index bounds) are not part of it: |*out_num_checks| says how many
 * kinds were left out. */
tpu_status_t tpu_program_export_finish(tpu_program *p, const tpu_hlo_value *results, int num_results,
                                       char **out_text, int *out_num_checks) TPU_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TPU_EAGER_PROGRAM_H_ */
