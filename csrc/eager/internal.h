/* Pieces shared by the eager layer's files; not part of its interface. */
#ifndef TPU_EAGER_INTERNAL_H_
#define TPU_EAGER_INTERNAL_H_

#include "eager/eager.h"

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

tpu_status_t tpu_flatten_call(const tpu_eager_call *call, flat_call *f);
void tpu_flat_release(flat_call *f);
int tpu_flat_index(const flat_call *f, int arg, int item);
bool tpu_ref_is_none(const tpu_tensor_ref *r);
const char *tpu_eager_dump_dir(void);

/* The eager cache's view of an entry. */
tpu_eager_entry **tpu_eager_entry_chain(tpu_eager_entry *e);
/* Entry references (an entry starts with one): unref says whether it was the last. */
void tpu_eager_entry_retain(tpu_eager_entry *e);
bool tpu_eager_entry_unref(tpu_eager_entry *e);
void tpu_eager_entry_set_key(tpu_eager_entry *e, char *key, size_t len, uint64_t hash); /* takes |key| */
bool tpu_eager_entry_has_key(const tpu_eager_entry *e, const char *key, size_t len, uint64_t hash);
uint64_t tpu_eager_entry_hash(const tpu_eager_entry *e);

#endif /* TPU_EAGER_INTERNAL_H_ */
