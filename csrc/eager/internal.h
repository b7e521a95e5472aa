/* Pieces shared by the eager layer's files; not part of its interface. */
#ifndef TPU_EAGER_INTERNAL_H_
#define TPU_EAGER_INTERNAL_H_

#include <stdatomic.h>

#include "base/strbuf.h"
#include "eager/eager.h"
#include "eager/program.h"

/* A call's tensors in order (list items included), each with the index of
 * the first tensor sharing its storage. */
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

tpu_status_t tpu_flatten_call(const tpu_eager_call *call, flat_call *f) TPU_MUST_USE;
/* The buffer type of slot |slot|'s storage as a program over |f| reads it:
 * its buffer's, or before it has one, the one its first ref (the slot's
 * own) gives it. Programs (program.c) and keys (eager.c) both take it from
 * here, so that a key says what its program reads. */
tpu_hlo_type tpu_flat_slot_type(const flat_call *f, int slot);
void tpu_flat_release(flat_call *f);
int tpu_flat_index(const flat_call *f, int arg, int item);
bool tpu_ref_is_none(const tpu_tensor_ref *r);

/* Entry references (an entry starts with one): unref says whether it was the last. */
void tpu_eager_entry_retain(tpu_eager_entry *e);
bool tpu_eager_entry_unref(tpu_eager_entry *e);
/* The hash of the key the cache keeps the entry under (fused eager's loop
 * detection names calls by it); set by the cache. */
void tpu_eager_entry_set_hash(tpu_eager_entry *e, uint64_t hash);
uint64_t tpu_eager_entry_hash(const tpu_eager_entry *e);
const tpu_eager_context *tpu_eager_entry_context(const tpu_eager_entry *e);
/* A number no other entry of the process has had (entries are freed and
 * their memory reused, so their addresses are no names). */
uint64_t tpu_eager_entry_serial(const tpu_eager_entry *e);

/* Replaces |s|'s buffer without running recorded calls first (results). */
void tpu_storage_put(tpu_storage *s, tpu_buffer *buf, const tpu_hlo_type *type);
/* Frees a storage PyTorch let go of while a trace held it. */
void tpu_storage_destroy(tpu_storage *s);
/* tpu_eager_execute without settling the call's storages first. */
tpu_status_t tpu_eager_execute_raw(const tpu_eager_entry *e, const tpu_eager_call *call,
                                   tpu_storage *const *new_outputs) TPU_MUST_USE;
/* The same, telling a failed data check (*|out_check_failed|) from other
 * errors. */
tpu_status_t tpu_eager_execute_checked(const tpu_eager_entry *e, const tpu_eager_call *call,
                                       tpu_storage *const *new_outputs, bool *out_check_failed) TPU_MUST_USE;
/* Applies |call|'s rule (to its item |k|, -1 for the whole call) in |p|;
 * new outputs become program outputs (|out_arg| < 0) or the contents of
 * arguments |out_arg| + output index (fused eager). */
tpu_status_t tpu_eager_apply(tpu_program *p, const tpu_eager_call *call, int k, const tpu_eager_out_meta *meta,
                             int out_arg) TPU_MUST_USE;
/* The eager cache, for other programs than one-op ones (fused traces): a
 * held entry or NULL; insert returns the entry kept (held), NULL if out of
 * memory. */
tpu_eager_entry *tpu_eager_cache_find(const char *key, size_t len, uint64_t h);
tpu_eager_entry *tpu_eager_cache_insert(tpu_eager_entry *e, const char *key, size_t len, uint64_t h);
/* The promoted dtypes of the call an entry was built for (kept for fused
 * eager, which builds the call again from a lookup's call). */
bool tpu_eager_entry_set_dtypes(tpu_eager_entry *e, tpu_dtype_t common, const tpu_dtype_t *items, int n);
tpu_dtype_t tpu_eager_entry_common_dtype(const tpu_eager_entry *e);
const tpu_dtype_t *tpu_eager_entry_item_common_dtypes(const tpu_eager_entry *e);
/* Every output's metadata (as tpu_eager_compile takes them). */
const tpu_eager_out_meta *tpu_eager_entry_metas(const tpu_eager_entry *e);
/* Trace hooks (trace.c). */
extern int tpu_trace_pending; /* storages a trace holds (atomic) */
extern int tpu_poisoned_storages; /* storages with a poison (storage.c; atomic) */
tpu_status_t tpu_trace_settle_call(const tpu_eager_call *call, tpu_cut_reason why) TPU_MUST_USE;
bool tpu_trace_call_touches(const tpu_eager_call *call);
tpu_status_t tpu_trace_record(tpu_eager_entry *e, const tpu_eager_call *call,
                              tpu_storage *const *new_outputs) TPU_MUST_USE;

/* --- entries: a compiled program and how to run it (entry.c) --- */

/* Distinct runtime checks one program may carry (checks raising the same
 * error share one). */
#define MAX_CHECKS_PER_PROGRAM 16

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
  const tpu_eager_context *ctx; /* what it was built for and runs on; outlives it */
  atomic_int refs; /* the cache's and each caller's between lookup and release */
  uint64_t hash;   /* of the key the cache keeps it under */
  uint64_t serial; /* unique to this entry in the process (fused eager's keys name entries by it) */
  tpu_executable *exe;
  int num_params;
  param_src *params;
  bool *donate;      /* per param, as execute wants it: the buffer is given up */
  bool any_donation; /* some param is aliased to a result (execute gets |donate|) */
  int num_results;
  result_dst *results;
  int num_meta;
  tpu_eager_out_meta *meta; /* per output index */
  bool track; /* ask for completion tracking (see tpu_executable_execute) */
  char *name;
  char *signature; /* its call's arguments, for the compile log (NULL: out of memory) */
  const char *writer; /* |name|, interned: what its results' storages name (tpu_storage.writer) */
  char *text; /* a lazy entry's program until it is compiled */
  /* a one-op entry's call's promoted dtypes (a lookup's call has none: they
   * are computed on a miss), for fused eager's programs */
  tpu_dtype_t common_dtype;
  tpu_dtype_t *item_common_dtypes;
  tpu_compile_options options;
  /* Runtime checks: the last |num_checks| results, each s64[1 +
   * TPU_LOWER_CHECK_VALUES]: the flag, then the values its message reports. */
  int num_checks;
  /* A fused program's checks (checks_first): its results are kept only if
   * every flag passes, and it donates nothing, so that a failure leaves
   * every storage as it was before the program (trace.c then replays the
   * calls as strict eager runs them). A one-op program's own writes keep
   * their old values where a check fails, and it donates as strict does. */
  bool checks_first;
  tpu_code_t check_codes[MAX_CHECKS_PER_PROGRAM];
  const char *check_messages[MAX_CHECKS_PER_PROGRAM];
  int check_num_values[MAX_CHECKS_PER_PROGRAM];
};

/* Compiles |text| into |e| (or loads it from the disk cache), writing it to
 * the dump folder first when one is set. */
tpu_status_t tpu_eager_entry_compile(tpu_eager_entry *e, const char *text) TPU_MUST_USE;
/* |e|'s executable; a lazy entry's is compiled by the first caller. */
tpu_status_t tpu_eager_entry_executable(const tpu_eager_entry *e, tpu_executable **out_exe) TPU_MUST_USE;

#endif /* TPU_EAGER_INTERNAL_H_ */
