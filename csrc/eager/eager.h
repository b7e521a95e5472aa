/* Eager execution: one op call -> a cached executable run on storage buffers.
 *
 * The torch layer describes a call in C terms (tensors as storage + view,
 * constants, which arguments the op writes) and asks for the cached program.
 * On a miss it supplies the output metadata PyTorch's meta functions computed
 * and this layer builds the one-op program (view reads, the rule, view
 * writes), compiles it and caches it. Executing swaps result buffers into the
 * storages: a write replaces the buffer of every alias at once, because all
 * aliases share one storage box.
 *
 * Key = op + every argument's signature (dtype, sizes, strides, offset,
 * storage size and buffer type, which arguments share a storage) +
 * constants. Python numbers are runtime operands, not part of the key,
 * unless the rule asks otherwise.
 *
 * Thread-safe: the cache is locked; each thread builds keys in its own
 * scratch buffer. */
#ifndef TPU_EAGER_EAGER_H_
#define TPU_EAGER_EAGER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/status.h"
#include "eager/trace.h"
#include "hlo/view.h"
#include "lower/lower.h"
#include "runtime/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The storage box: what a tpu storage's data pointer points at. One per
 * PyTorch storage, shared by all its views; owned by the storage.
 *
 * The buffer holds the storage's bytes, row-major, in the shape of the last
 * write that covered the whole storage densely, size-1 dims dropped (a
 * parameter stays [out, in]), 1-D after any other write. A program that
 * reads and rewrites a whole tensor therefore sees one shape on both sides,
 * and XLA updates the donated buffer in place instead of copying it around
 * a reshape. */
struct tpu_eager_context;

typedef struct tpu_storage {
  const struct tpu_eager_context *ctx; /* whose runtime |buf| belongs to */
  tpu_buffer *buf; /* NULL until first used */
  tpu_hlo_type type; /* |buf|'s element type and dims */
  int64_t nbytes;
  int device;
  tpu_trace_mark trace; /* fused eager's (trace.h) */
  struct tpu_storage *live_prev, *live_next; /* the live list (storage.c), for memory snapshots */
  /* Fused eager: why the storage has no value (NULL: it has one, or is
   * merely unwritten, as torch.empty's). A failed trace sets it on what the
   * calls it did not run would have made (trace.c, replay); reading the
   * storage raises it, a new buffer (a write of the whole storage) clears
   * it. Set and cleared under the trace's lock or by the storage's user. */
  char *poison;
  /* The name of the program that made |buf| (lives as long as the process;
   * NULL: none did), which an error found only when the buffer is read (the
   * program ran out of memory) names. */
  const char *writer;
} tpu_storage;

/* A tensor argument. */
typedef struct tpu_tensor_ref {
  tpu_storage *storage;    /* NULL: a zero-byte storage, or a host scalar */
  tpu_view view;
  const void *host_scalar; /* a 0-dim CPU tensor: its value, of view.dtype */
  bool wrapped_number;
  bool conj, neg; /* PyTorch's lazy conjugate / negative view bits */
} tpu_tensor_ref;

typedef struct tpu_eager_arg {
  tpu_lower_arg lower; /* kind and constants, as the rule sees them */
  tpu_tensor_ref tensor;
  tpu_tensor_ref *items; /* TENSOR_LIST: lower.n refs (storage NULL and dtype INVALID = None) */
  bool mutated;          /* the op writes this argument (schema Tensor(a!)) */
} tpu_eager_arg;

/* An empty argument (kind NONE). Cheaper than zeroing the whole struct: a
 * view has room for 64 dims, and the sizes and strides past its rank are
 * never read. */
static inline void tpu_eager_arg_clear(tpu_eager_arg *a) {
  memset(&a->lower, 0, sizeof a->lower); /* kind TPU_ARG_NONE */
  a->tensor.storage = NULL;
  a->tensor.view.dtype = TPU_INVALID;
  a->tensor.view.rank = 0;
  a->tensor.view.offset = 0;
  a->tensor.host_scalar = NULL;
  a->tensor.wrapped_number = a->tensor.conj = a->tensor.neg = false;
  a->items = NULL;
  a->mutated = false;
}

#define TPU_EAGER_MAX_RETURNS 8

#define TPU_EAGER_MAX_ITEM_ARGS 16

/* Where an argument of a per-item rule comes from: a call argument (item k
 * of a list: a tensor, or a number of a Scalar[]), or a constant the list op
 * does not have (a default of the per-tensor op: alpha=1). */
typedef struct tpu_eager_item_arg {
  int arg;             /* the call's argument, or -1: |fixed| */
  tpu_lower_arg fixed; /* a constant without pointers (NONE, INT, FLOAT, BOOL, SCALAR) */
} tpu_eager_item_arg;

/* One dispatcher overload served by a rule; made once, lives forever.
 * Outputs are the op's returns, then the arguments it writes without
 * returning them (running statistics of batch norm): the rule computes one
 * value per output.
 *
 * A per-item op (_foreach_add_.List, _fused_adamw_) runs its rule once per
 * item k of the call's first tensor list, all in one program, on
 * |item_args|. An output that writes a list argument writes its item k; a
 * new output r of item k is the call's output k * num_outputs + r. */
typedef struct tpu_eager_op {
  const char *name;
  const tpu_lower_rule *rule;
  int num_outputs;
  int num_returns;
  int output_alias[TPU_EAGER_MAX_RETURNS]; /* the argument an output writes, or -1 (new) */
  uint32_t id;
  int num_item_args; /* 0: not a per-item op */
  tpu_eager_item_arg item_args[TPU_EAGER_MAX_ITEM_ARGS];
} tpu_eager_op;

/* |name| is copied; |item_args| (|num_item_args| of them, 0 for an ordinary
 * op) too. */
tpu_status_t tpu_eager_op_new(const char *name, const tpu_lower_rule *rule, int num_outputs, int num_returns,
                              const int *output_alias, int num_item_args, const tpu_eager_item_arg *item_args,
                              tpu_eager_op **out_op) TPU_MUST_USE;

typedef struct tpu_eager_call {
  const tpu_eager_op *op;
  int num_args;
  tpu_eager_arg *args;
  tpu_dtype_t common_dtype;
  const tpu_dtype_t *item_common_dtypes; /* a per-item op's, one per item (on a miss) */
  tpu_hlo_precision_t precision;
  int device;
  uint64_t rng_seed, rng_offset; /* for TPU_RULE_RNG rules */
  const uint64_t *rng_states; /* a fused program's: (seed, offset) per random op, or NULL */
} tpu_eager_call;

/* Metadata of an output that is a new tensor (from the meta functions);
 * dtype TPU_INVALID for an undefined output (a gradient not asked for). */
typedef struct tpu_eager_out_meta {
  tpu_dtype_t dtype;
  int rank;
  int64_t sizes[TPU_MAX_TENSOR_RANK];
  int64_t strides[TPU_MAX_TENSOR_RANK]; /* non-overlapping and dense */
} tpu_eager_out_meta;

typedef struct tpu_eager_entry tpu_eager_entry;

/* The process's settings for eager execution, filled by the caller from
 * its settings (torchtpu/_settings.py reads the environment; C reads none).
 * tpu_eager_options_init sets the defaults. */
typedef struct tpu_eager_options {
  unsigned kernels;           /* TPU_KERNEL_* bits registered with the runtime; 0 */
  int fused_max_ops;          /* TORCHTPU_FUSED_MAX_OPS: calls one fused program records; 512 */
  bool fused_exact;           /* TORCHTPU_FUSED_EXACT: a boundary between fused calls; true */
  size_t max_cached_programs; /* TORCHTPU_MAX_CACHED_PROGRAMS: programs kept loaded; 4096 */
} tpu_eager_options;

void tpu_eager_options_init(tpu_eager_options *o);

/* What programs are built for and run on, passed to every program
 * (tpu_program_new) and kept by the entries it makes: the runtime, the
 * options (options.kernels: the hand-written kernels rules may call), and
 * the folder each compiled program's StableHLO is written into (NULL:
 * none). */
typedef struct tpu_eager_context {
  tpu_runtime *rt;
  tpu_eager_options options;
  const char *dump_dir;
} tpu_eager_context;

/* Sets the process's context, the one eager calls (tpu_eager_compile) and
 * the cache use and storages are made for, from |rt| and a copy of |opts|
 * (fields out of range take their defaults); call once before anything
 * else. */
void tpu_eager_init(tpu_runtime *rt, const tpu_eager_options *opts);
/* The process's context, valid as long as the process. */
const tpu_eager_context *tpu_eager_context_get(void);
/* The process context's dump folder (NULL or "": off). */
tpu_status_t tpu_eager_set_dump_dir(const char *dir) TPU_MUST_USE;

/* How many times |call|'s rule runs: the length of its first tensor list for
 * a per-item op, else 1. */
int tpu_eager_call_items(const tpu_eager_call *call);
/* True when a per-item |call| writes an item that may share bytes with a
 * tensor of another item (or a plain tensor argument): one program would not
 * see the earlier items' writes, as running the items in turn does. Items
 * that are apart in one storage (views of one flat buffer) are not. */
bool tpu_eager_items_overlap(const tpu_eager_call *call);

/* Before a lookup: outside fused mode, runs the calls recorded on |call|'s
 * storages (the key reads their buffers' types). */
tpu_status_t tpu_eager_prepare(const tpu_eager_call *call) TPU_MUST_USE;
/* The cached program for |call|, or NULL (a miss). The caller holds a
 * reference until tpu_eager_entry_release: the cache may drop the entry
 * meanwhile (another thread reaching its cap), not free it. */
tpu_eager_entry *tpu_eager_lookup(const tpu_eager_call *call);
/* The key lookup uses for |call| (malloc'd into |*out|, |*len| bytes): its
 * op, precision and per argument its kind and signature. A call without an
 * op (a compiled graph's inputs, graph.cpp) keys its arguments alone: the
 * one description of what a program over them depends on. Settles nothing
 * (tpu_eager_prepare first). */
tpu_status_t tpu_eager_call_key(const tpu_eager_call *call, char **out, size_t *len) TPU_MUST_USE;
/* Builds, compiles and caches the program for |call|; |meta| has one entry
 * per output (items times outputs for a per-item op; entries of outputs that
 * write arguments are ignored). |*out_entry| is a reference, as lookup's. */
tpu_status_t tpu_eager_compile(const tpu_eager_call *call, const tpu_eager_out_meta *meta,
                               tpu_eager_entry **out_entry) TPU_MUST_USE;
/* Lets go of a reference from lookup or compile (NULL is fine). */
void tpu_eager_entry_release(tpu_eager_entry *e);
/* Frees an entry not owned by the eager cache (a compiled graph's). */
void tpu_eager_entry_free(tpu_eager_entry *e);
/* True when running |e| draws random numbers (needs rng_seed/rng_offset). */
bool tpu_eager_entry_uses_rng(const tpu_eager_entry *e);
/* Output metadata of output |i| (dtype INVALID for outputs that are not new
 * tensors). */
const tpu_eager_out_meta *tpu_eager_entry_meta(const tpu_eager_entry *e, int i);
/* Runs |e| for |call|. |new_outputs[i]| is the storage of output i when it is
 * a new tensor (NULL for outputs that write arguments, undefined and
 * zero-byte outputs). Recorded calls on the storages run first. */
tpu_status_t tpu_eager_execute(const tpu_eager_entry *e, const tpu_eager_call *call,
                               tpu_storage *const *new_outputs) TPU_MUST_USE;

/* --- eager modes ----------------------------------------------------------------
 * strict: every call runs at once as its own program (the default).
 * fused: calls are recorded and runs of them become one program, run when
 *   something needs their results (trace.c): a cut.
 * blocking: every call runs at once and waits for its results, so that an
 *   error of the device is reported by the call that caused it. */
typedef enum tpu_eager_mode { TPU_EAGER_STRICT = 0, TPU_EAGER_FUSED, TPU_EAGER_BLOCKING } tpu_eager_mode;
void tpu_eager_set_default_mode(tpu_eager_mode mode);
/* This thread's mode; -1 follows the default. Returns the previous setting. */
int tpu_eager_set_thread_mode(int mode);
tpu_eager_mode tpu_eager_current_mode(void);
/* Marks this thread as working for whichever thread waits on it
 * (autograd's workers run a backward for the thread that called it): a
 * data check's error in its recorded calls goes to the thread that cuts
 * their trace (trace.c), not to it. */
void tpu_eager_set_thread_works_for_others(void);

/* Runs |e| for |call| as the thread's mode says: executes it (and waits,
 * blocking), or records it (fused). A call whose program checks data is
 * never recorded: it runs at once, after the recorded calls on its storages
 * (its entry is looked up again then, since their buffers changed). */
tpu_status_t tpu_eager_run(tpu_eager_entry *e, const tpu_eager_call *call,
                           tpu_storage *const *new_outputs) TPU_MUST_USE;

/* Why recorded calls ran (the cut of a trace). */
typedef enum tpu_cut_reason {
  TPU_CUT_SYNC = 0,     /* synchronize, an event */
  TPU_CUT_HOST_READ,    /* .cpu(), .item(), printing: the host reads a storage */
  TPU_CUT_HOST_WRITE,   /* the host writes a storage a recorded call uses */
  TPU_CUT_ALONE,        /* a call fused eager runs alone (a random _foreach_ op) uses a recorded storage */
  TPU_CUT_GRAPH,        /* a compiled graph uses a recorded storage */
  TPU_CUT_STRICT,       /* a call of a thread in another mode uses a recorded storage */
  TPU_CUT_DEVICE,       /* a call on another device */
  TPU_CUT_SIZE,         /* the trace reached its size cap */
  TPU_CUT_LOOP,         /* the calls repeat: a loop's iterations */
  TPU_CUT_MODE,         /* the thread left fused mode */
  TPU_CUT_OTHER,        /* storage resizing, other direct uses of a storage */
  TPU_CUT_COUNT_
} tpu_cut_reason;
const char *tpu_cut_reason_name(tpu_cut_reason r);
/* Runs the recorded calls that use |s| (all of them: one trace) first. */
tpu_status_t tpu_storage_settle(tpu_storage *s, tpu_cut_reason why) TPU_MUST_USE;
/* Runs every recorded call. */
tpu_status_t tpu_eager_flush(tpu_cut_reason why) TPU_MUST_USE;
/* Sets the trace's size cap in calls (0: options.fused_max_ops). */
void tpu_eager_set_fused_max_ops(int n);
/* Why the last fused program that failed did ("" if none has). */
void tpu_eager_fused_last_failure(char *out, size_t cap);
/* Whether repeating calls cut the trace (on by default). */
void tpu_eager_set_fused_loop_detection(bool on);

/* --- storages ---------------------------------------------------------------- */
/* A storage of |nbytes| on |device| of |ctx|'s runtime, in |*out| (released
 * with tpu_storage_free). TPU_ERR_OUT_OF_MEMORY, worded as PyTorch's CUDA
 * allocator words it, when the device's storages would hold more than their
 * limit: the memory fraction (below) of the device's capacity. The check is
 * made here, when PyTorch allocates an op's outputs before the launch, so
 * the op that does not fit raises, not a later read. */
tpu_status_t tpu_storage_new(const struct tpu_eager_context *ctx, int device, int64_t nbytes,
                             tpu_storage **out) TPU_MUST_USE;
/* torch.tpu.set_per_process_memory_fraction: the share of |device|'s
 * capacity (0 to 1; 1 until set) its storages may hold. */
tpu_status_t tpu_storage_set_memory_fraction(const struct tpu_eager_context *ctx, int device,
                                             double fraction) TPU_MUST_USE;
double tpu_storage_memory_fraction(int device);
void tpu_storage_free(tpu_storage *s);
/* The statistics of |device|'s live storages, as PyTorch's allocators report
 * them (torch.accelerator.memory_stats: the tensors' own memory, not XLA's
 * scratch inside a program): bytes (|out_bytes|) and storages (|out_count|)
 * live now, their peak since start or the last reset of peaks, and the totals
 * made and freed since start or the last reset of accumulated statistics;
 * for all storages or one pool (small: under 1 MiB). */
enum { TPU_MEMORY_ALL, TPU_MEMORY_SMALL, TPU_MEMORY_LARGE, TPU_MEMORY_POOLS }; /* as c10's StatType */
typedef struct tpu_memory_stat {
  int64_t current, peak, allocated, freed;
} tpu_memory_stat;
void tpu_storage_memory(int device, int pool, tpu_memory_stat *out_bytes, tpu_memory_stat *out_count);
/* Calls |fn| for every live storage of |device| (-1: all) with its address,
 * bytes and whether it has a buffer yet, in the order they were made, under
 * the live list's lock: |fn| must not make or free storages. */
void tpu_storage_each_live(int device, void (*fn)(void *ctx, const tpu_storage *s), void *ctx);
/* Peaks back to the live values, and/or the made/freed totals to zero. */
void tpu_storage_reset_memory(int device, bool peak, bool accumulated);
/* Replaces the buffer, of type |type| (the old one is released; pending
 * reads still finish). */
void tpu_storage_set(tpu_storage *s, tpu_buffer *buf, const tpu_hlo_type *type);
/* The type of |s|'s buffer; before it has one, the 1-D buffer a first
 * reader of |reader| elements gives it. */
tpu_hlo_type tpu_storage_type(const tpu_storage *s, tpu_dtype_t reader);
/* The same without copying the type: |s|'s own, or |scratch| filled (its
 * dtype, rank and dims only). For keys, per call. */
const tpu_hlo_type *tpu_storage_type_in(const tpu_storage *s, tpu_dtype_t reader, tpu_hlo_type *scratch);
/* The buffer type a dense write of a whole tensor of |sizes| gives its
 * storage: the sizes without their 1s, so that a gradient made as a view of
 * a [1, n] sum and one accumulated in place as [n] run the same programs.
 * |rank| is at most TPU_MAX_TENSOR_RANK (the glue refuses more). */
tpu_hlo_type tpu_storage_dense_type(tpu_dtype_t dtype, int rank, const int64_t *sizes);
/* |st| (taken), the error of reading |s|'s buffer, naming the program that
 * made the buffer when it ran out of memory. */
tpu_status_t tpu_storage_read_error(const tpu_storage *s, tpu_status_t st) TPU_MUST_USE;
/* Marks |s| as having no value, read as the RuntimeError |why| (copied; a
 * later mark replaces it). */
tpu_status_t tpu_storage_poison(tpu_storage *s, const char *why) TPU_MUST_USE;
/* The error a read of |s| raises: its poison (NULL: none). */
tpu_status_t tpu_storage_check_value(const tpu_storage *s) TPU_MUST_USE;
/* Gives |s| a buffer of |dtype| elements if it has none (contents unspecified). */
tpu_status_t tpu_storage_materialize(tpu_storage *s, tpu_dtype_t dtype) TPU_MUST_USE;

/* Gives |dst| (no buffer yet) the first bytes of |src|'s contents, zeros
 * after them: storage resizing. */
tpu_status_t tpu_storage_copy_prefix(tpu_storage *dst, const tpu_storage *src) TPU_MUST_USE;

/* Number of cached programs; drops them all (tests, memory pressure), and
 * frees those nobody holds after waiting for every launch (the error of a
 * launch that failed comes back, as from tpu_runtime_synchronize). */
size_t tpu_eager_cache_size(void);
tpu_status_t tpu_eager_cache_clear(void) TPU_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TPU_EAGER_EAGER_H_ */
