/* Lowering rules: one ATen overload -> StableHLO, shared by eager and
 * torch.compile.
 *
 * A rule receives its arguments in schema order (tensors as builder values,
 * the rest as constants) and the output types PyTorch's meta functions
 * computed, and writes one value per output. Rules never re-derive PyTorch's
 * type promotion or broadcasting: they produce values of the given output
 * types (c->common_dtype is PyTorch's promoted input type, for the few rules
 * that compute in it, such as comparisons).
 *
 * Tensor arguments are fetched through tpu_lower_tensor(): eager reads the
 * view out of its storage only when a rule asks, so an argument a rule never
 * reads (the target of fill_ or copy_) costs nothing. In-place and out=
 * variants share the functional rule: the rule computes the value, and the
 * caller writes it through the mutated argument's view.
 *
 * Nothing here knows PJRT or PyTorch; the registry is a static table. */
#ifndef TPU_LOWER_LOWER_H_
#define TPU_LOWER_LOWER_H_

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "hlo/builder.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_arg_kind {
  TPU_ARG_NONE = 0,    /* None, or an absent optional */
  TPU_ARG_TENSOR,      /* a tensor (value via tpu_lower_tensor) */
  TPU_ARG_TENSOR_LIST, /* Tensor[] / Tensor?[]: |n| items, NONE items allowed */
  TPU_ARG_SCALAR,      /* a Python number: a rank-0 runtime value of |dtype| */
  TPU_ARG_INT,
  TPU_ARG_INT_LIST,
  TPU_ARG_FLOAT,
  TPU_ARG_FLOAT_LIST,
  TPU_ARG_BOOL,
  TPU_ARG_BOOL_LIST,
  TPU_ARG_SCALAR_LIST, /* Scalar[]: |n| Python numbers, runtime values (see below) */
  TPU_ARG_STRING,
  TPU_ARG_DTYPE,       /* a ScalarType */
  TPU_ARG_OTHER,       /* layout, device, memory format, generator: not for rules */
} tpu_arg_kind_t;

typedef struct tpu_lower_arg {
  tpu_arg_kind_t kind;
  int n;                  /* list length */
  int64_t i;              /* INT, and the value of a constant SCALAR if integral */
  double f;               /* FLOAT, and the value of a SCALAR (a complex one's real part) */
  double fi;              /* a complex SCALAR's (dtype C128) imaginary part */
  bool b;                 /* BOOL */
  bool is_const;          /* SCALAR: the value is known (i/f) */
  tpu_dtype_t dtype;      /* DTYPE; the type of a SCALAR/TENSOR */
  bool wrapped_number;    /* TENSOR made from a Python number (promotion rules) */
  const int64_t *ints;    /* INT_LIST (n); SCALAR_LIST of dtype S64 */
  const double *floats;   /* FLOAT_LIST (n); SCALAR_LIST of dtype F64 (n) or C128 (2n: re, im) */
  const bool *bools;      /* BOOL_LIST (n) */
  const char *s;          /* STRING */
  int rank;               /* TENSOR: rank and sizes, known before reading */
  const int64_t *sizes;
  /* TENSOR_LIST: dtype per item (INVALID = None); SCALAR_LIST: each number's
   * own type (S64, F64, C128, BOOL), its value in |floats| when |dtype| is
   * C128 (some number is complex: pairs) or F64 (some number is a float),
   * else in |ints|. */
  const tpu_dtype_t *item_dtypes;
  const int *item_ranks;
  const int64_t *const *item_sizes;
  const int64_t *strides; /* TENSOR: strides in elements where known (eager), else NULL */
} tpu_lower_arg;

/* A SCALAR_LIST's values (|n| of its dtype: int64, double, or complex128 as
 * (re, im) pairs) and their size in bytes. */
static inline const void *tpu_scalar_list_values(const tpu_lower_arg *l) {
  return l->dtype == TPU_S64 ? (const void *)l->ints : (const void *)l->floats;
}
static inline size_t tpu_scalar_list_bytes(const tpu_lower_arg *l) {
  return (size_t)l->n * (l->dtype == TPU_C128 ? 16 : 8);
}

typedef struct tpu_lower_ctx tpu_lower_ctx;

/* A runtime check a rule asks for: |ok| is a rank-0 i1 value; when false the
 * op raises |code| with |message| and writes nothing. The message is a
 * static string, or (|num_values| > 0) a printf format of that many %lld,
 * filled with |values| (rank-0 s64: the offending index, say) read back with
 * the flag. */
#define TPU_LOWER_CHECK_VALUES 3
typedef struct tpu_lower_check {
  tpu_hlo_value ok;
  tpu_code_t code;
  const char *message;
  int num_values;
  tpu_hlo_value values[TPU_LOWER_CHECK_VALUES];
} tpu_lower_check;
#define TPU_LOWER_MAX_CHECKS 4

/* Fetches tensor |arg| (|item| of a list, -1 otherwise) as a value. */
typedef tpu_hlo_value (*tpu_lower_fetch_fn)(tpu_lower_ctx *c, int arg, int item);

struct tpu_lower_ctx {
  tpu_hlo_builder *b;
  const char *op; /* "aten::add.Tensor", for messages */
  int num_args;
  const tpu_lower_arg *args;
  int num_outputs;               /* the op's returns, then arguments it writes without returning */
  const tpu_hlo_type *out_types; /* from PyTorch's meta functions; dtype INVALID: not wanted */
  tpu_hlo_value *outputs;        /* written by the rule */
  tpu_dtype_t common_dtype;      /* PyTorch's promoted dtype of the inputs */
  tpu_hlo_precision_t precision; /* float32 matmul/conv precision (TPU_RULE_MATMUL_PRECISION) */
  unsigned kernels;              /* TPU_KERNEL_* (kernels/kernels.h) programs may call */
  tpu_hlo_value rng_state;       /* ui64[2] for rules flagged TPU_RULE_RNG */
  tpu_lower_fetch_fn fetch;
  void *user;    /* the caller's */
  intptr_t data; /* the running rule's |data| */
  int num_checks;
  tpu_lower_check checks[TPU_LOWER_MAX_CHECKS];
  /* Set by a rule whose values for written arguments add to them (index_put_
   * with accumulate): written through an expanded view, each memory location
   * then gets the sum of its elements' changes, as the CPU's kernel adds them
   * one by one (tpu_hlo_view_write). */
  bool writes_add;
};

/* Rule flags. */
enum {
  /* Scalar arguments are compile-time constants (in the cache key) instead of
   * runtime values: for rules whose lowering depends on the value. */
  TPU_RULE_CONST_SCALARS = 1u << 0,
  /* The rule draws random bits from c->rng_state. */
  TPU_RULE_RNG = 1u << 1,
  /* Run by a hand-written kernel of the torch layer (copies), not registered
   * with the dispatcher by name. */
  TPU_RULE_INTERNAL = 1u << 2,
  /* The rule computes one item of a list op (a fused optimizer step): it is
   * applied to item k of each list argument in turn, all in one program, and
   * sees each list argument as that item (a tensor, or None past the end of a
   * shorter list). */
  TPU_RULE_PER_ITEM = 1u << 3,
  /* Float arguments are runtime values, seen as SCALAR arguments of dtype
   * F64 (a learning rate that changes every step), not constants. */
  TPU_RULE_RUNTIME_FLOATS = 1u << 4,
  /* A Python number must fit the dtype of the first tensor argument, as
   * PyTorch's kernels convert it with an overflow check (fill_ of an uint8
   * tensor with 1000 raises); checked on every call, by the caller. */
  TPU_RULE_CHECKED_SCALARS = 1u << 5,
  /* The rule builds dots or convolutions with c->precision (PyTorch's
   * float32 matmul precision, which eager asks for these calls only: the
   * setting is a hash-map lookup); other rules see the default. */
  TPU_RULE_MATMUL_PRECISION = 1u << 6,
};

typedef tpu_status_t (*tpu_lower_fn)(tpu_lower_ctx *c);

/* A set of dtypes: one bit per tpu_dtype_t. */
#define TPU_DT(t) (1u << (t))
#define TPU_DTS_F32_F64 (TPU_DT(TPU_F32) | TPU_DT(TPU_F64))
#define TPU_DTS_FLOAT (TPU_DT(TPU_F16) | TPU_DT(TPU_BF16) | TPU_DTS_F32_F64) /* PyTorch's floating types */
#define TPU_DTS_FLOAT8 (TPU_DT(TPU_F8E5M2) | TPU_DT(TPU_F8E4M3FN) | TPU_DT(TPU_F8E5M2FNUZ) | TPU_DT(TPU_F8E4M3FNUZ))
#define TPU_DTS_ANY_FLOAT (TPU_DTS_FLOAT | TPU_DTS_FLOAT8) /* tpu_dtype_is_float */
#define TPU_DTS_COMPLEX (TPU_DT(TPU_C64) | TPU_DT(TPU_C128))
#define TPU_DTS_INT                                                                                    \
  (TPU_DT(TPU_S8) | TPU_DT(TPU_S16) | TPU_DT(TPU_S32) | TPU_DT(TPU_S64) | TPU_DT(TPU_U8) | TPU_DT(TPU_U16) | \
   TPU_DT(TPU_U32) | TPU_DT(TPU_U64))
/* Whose dtype a rule's admission looks at, when not argument 0 .. n-1. */
#define TPU_ADMIT_OUTPUT (-1)

/* The dtypes a rule admits, as PyTorch's CPU kernel does (its meta functions
 * let more through): any other dtype of argument |arg| (or of output 0 with
 * TPU_ADMIT_OUTPUT) is refused by tpu_lower_run, before the rule runs, with
 * PyTorch's message naming |kernel| (tpu_lower_not_implemented). |dtypes| 0:
 * every dtype. */
typedef struct tpu_lower_admit {
  uint32_t dtypes; /* TPU_DT bits */
  int arg;
  const char *kernel; /* "abs_cpu" */
} tpu_lower_admit;

typedef struct tpu_lower_rule {
  const char *names[4]; /* overloads served: functional, in-place, out= … */
  tpu_lower_fn fn;
  unsigned flags;
  intptr_t data; /* per-rule parameter (an HLO opcode …), as c->data */
  tpu_lower_admit admit;
} tpu_lower_rule;

/* The rule for an overload name ("aten::add_.Tensor" or "add_.Tensor"); NULL
 * if none. */
const tpu_lower_rule *tpu_lower_find(const char *name);
/* Iterates the registry: entries 0 .. tpu_lower_rule_count()-1. */
int tpu_lower_rule_count(void);
const tpu_lower_rule *tpu_lower_rule_at(int i);

/* Runs |rule|, after its dtype admission (|rule->admit|); on failure the
 * status names the op. */
tpu_status_t tpu_lower_run(const tpu_lower_rule *rule, tpu_lower_ctx *c) TPU_MUST_USE;

/* PyTorch's error for a dtype its CPU kernel |kernel| does not handle:
 * "\"abs_cpu\" not implemented for 'Bool'". The one spelling of it, for
 * tpu_lower_run's admission check and for rules whose refusal depends on
 * more than a dtype. */
tpu_status_t tpu_lower_not_implemented(const char *kernel, tpu_dtype_t t) TPU_MUST_USE;

/* --- helpers for rules ----------------------------------------------------- */
tpu_hlo_value tpu_lower_tensor(tpu_lower_ctx *c, int arg);
/* |v| behind the boundary custom call where |kernels| has it (kernels.h):
 * a buffer XLA neither fuses across nor sees through; else |v|. */
tpu_hlo_value tpu_lower_boundary(tpu_hlo_builder *b, unsigned kernels, tpu_hlo_value v);
/* The values |vs| (n of them, replaced by the results) behind one boundary
 * call, which also takes the values |keep| as operands: they stay alive
 * (XLA may not write over them) until the results exist. */
void tpu_lower_boundary_many(tpu_hlo_builder *b, unsigned kernels, tpu_hlo_value *vs, int n,
                             const tpu_hlo_value *keep, int num_keep);
tpu_hlo_value tpu_lower_list_item(tpu_lower_ctx *c, int arg, int item);
bool tpu_lower_is_none(const tpu_lower_ctx *c, int arg);
/* A tensor or scalar argument as a value converted to |dtype| and broadcast to
 * |to|'s shape. */
tpu_hlo_value tpu_lower_operand(tpu_lower_ctx *c, int arg, tpu_dtype_t dtype, const tpu_hlo_type *to);
/* A scalar (or rank-0 tensor) argument converted to |dtype|, rank 0. */
tpu_hlo_value tpu_lower_scalar(tpu_lower_ctx *c, int arg, tpu_dtype_t dtype);
int64_t tpu_lower_int(const tpu_lower_ctx *c, int arg, int64_t if_none);
double tpu_lower_float(const tpu_lower_ctx *c, int arg, double if_none);
bool tpu_lower_bool(const tpu_lower_ctx *c, int arg, bool if_none);
/* Wraps dim argument |dim| of a tensor of |rank| dims into [0, rank) (a
 * 0-dim tensor takes -1 and 0, as PyTorch's maybe_wrap_dim). A dim out of
 * range fails the builder with PyTorch's IndexError ("Dimension out of
 * range (expected to be in range of [-1, 0], but got 5)") and gives 0, so
 * a rule may go on indexing with it; every rule wraps its dims here, which
 * is the range check PyTorch's kernels make before they run. */
int tpu_lower_wrap_dim(const tpu_lower_ctx *c, int64_t dim, int rank);
/* The type PyTorch computes in for elementwise math: float32 for half types
 * (CPU and CUDA kernels compute f16/bf16 math in float32), else |t|. */
tpu_dtype_t tpu_lower_opmath(tpu_dtype_t t);
/* Records |v| (converted to the output's dtype) as output |i|; ignored for an
 * output whose type is INVALID (undefined, or a None argument). */
void tpu_lower_set_output(tpu_lower_ctx *c, int i, tpu_hlo_value v);
/* --- reduction scaffolding, shared by the reduce and nn families ------------- */
/* The reduced dims named by argument |arg| (an int, an int list, or None / an
 * empty list meaning all dims), wrapped (tpu_lower_wrap_dim) and sorted;
 * returns how many. */
int tpu_lower_reduce_dims(const tpu_lower_ctx *c, int arg, int rank, int64_t *out_dims);
/* |x| reduced over |dims| with |op| (ADD, MUL, MAX, MIN, AND, OR), starting
 * from the op's identity. */
tpu_hlo_value tpu_lower_reduce(tpu_hlo_builder *b, tpu_hlo_value x, tpu_hlo_binary_t op,
                               const int64_t *dims, int n);
/* A reduced value with the reduced dims put back as size 1 (keepdim=True);
 * |rank| is the rank before reducing. */
tpu_hlo_value tpu_lower_keepdim(tpu_hlo_builder *b, tpu_hlo_value x, int rank, const int64_t *dims,
                                int n);

/* Inclusive scan (prefix sums or products …) of |x| along |dim| with |op|:
 * a reduce_window spanning the dim, padded in front with the op's identity. */
tpu_hlo_value tpu_lower_scan(tpu_hlo_builder *b, tpu_hlo_value x, int dim, tpu_hlo_binary_t op);

/* A reduce or scan body over (value, index) pairs that keeps the larger
 * (|is_max|) or smaller value, NaN beyond every number, and among equal
 * values the lower index (the higher with |later_wins|). The order is total,
 * so XLA may associate the reduction as it likes. */
void tpu_lower_extreme_body(tpu_lower_ctx *c, tpu_dtype_t t, bool is_max, bool later_wins, tpu_hlo_region *out);

/* --- loops ------------------------------------------------------------------
 * A stablehlo.while whose body is one step of a recurrence (a column of a
 * factorization, a time step). The step sees the counter |k| (rank-0 s64)
 * and the state, which it updates in place; values the body reads that do
 * not change belong in the state too. */
#define TPU_LOWER_LOOP_MAX_STATE 8
typedef void (*tpu_lower_step_fn)(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *state);
/* Runs |step| for k = 0 .. count - 1 (|count| a rank-0 s64 value) over the
 * |n| values of |state|, replaced by the final ones. */
void tpu_lower_loop_to(tpu_lower_ctx *c, tpu_hlo_value count, int n, tpu_hlo_value *state, tpu_lower_step_fn step);
/* tpu_lower_loop_to a known count. No iterations: no loop, whose body might
 * not even compile (slices of empty matrices). */
void tpu_lower_loop(tpu_lower_ctx *c, int64_t count, int n, tpu_hlo_value *state, tpu_lower_step_fn step);
/* Whether a loop goes on: a rank-0 i1 of the state (before a step). */
typedef tpu_hlo_value (*tpu_lower_more_fn)(tpu_lower_ctx *c, const tpu_hlo_value *state);
/* Runs |step| while |more| holds, at most |max| times (an iterative method
 * that stops when every matrix of a batch has converged). */
void tpu_lower_loop_while(tpu_lower_ctx *c, int64_t max, int n, tpu_hlo_value *state, tpu_lower_step_fn step,
                          tpu_lower_more_fn more);

/* Adds a runtime check (see tpu_lower_check): data-dependent errors such as
 * an index out of range. Eager waits for the flag and raises PyTorch's
 * error; the op's writes are dropped when a check fails. */
void tpu_lower_require(tpu_lower_ctx *c, tpu_hlo_value ok, tpu_code_t code, const char *message);
/* Whether i1 |ok| (any shape) holds everywhere (rank-0 i1), and into
 * |out_value| the s64 value of |x| (ok's shape) at the first place, in
 * row-major order, where it does not (0 where it holds everywhere): what a
 * CPU kernel's message reports ("index 7 is out of bounds ..."). */
tpu_hlo_value tpu_lower_all_or_first(tpu_lower_ctx *c, tpu_hlo_value ok, tpu_hlo_value x, tpu_hlo_value *out_value);
/* A check whose message |format| (static, |n| %lld) reports |values|. */
void tpu_lower_require_values(tpu_lower_ctx *c, tpu_hlo_value ok, int n, const tpu_hlo_value *values, tpu_code_t code,
                              const char *format);
/* "[2, 3]": a shape as PyTorch prints sizes in messages, into |buf| (|cap|
 * bytes). */
void tpu_lower_shape_str(char *buf, size_t cap, int rank, const int64_t *dims);
/* A rule's error: a user-facing status of |code| ("aten::x: message"). */
tpu_status_t tpu_lower_error(tpu_lower_ctx *c, tpu_code_t code, const char *fmt, ...) TPU_PRINTF(3, 4);

#ifdef __cplusplus
}
#endif

#endif /* TPU_LOWER_LOWER_H_ */
