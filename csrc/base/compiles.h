/* The compile log: per owner of programs (an eager op, a fused trace, a
 * compiled function) the distinct signatures it built programs for, the
 * programs compiled and loaded from the disk cache, and the seconds spent;
 * what torchtpu.compiles() reports. An owner that passes a limit of
 * signatures leaves one warning, once, naming what changed between its
 * signatures and the remedy (the torch glue raises it as a Python warning).
 * Library code prints nothing: a listener (the glue's TORCHTPU_LOG=compiles)
 * hears each event. Thread-safe. */
#ifndef TPU_BASE_COMPILES_H_
#define TPU_BASE_COMPILES_H_

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_compile_event {
  TPU_COMPILE_BUILT = 0, /* a program built, compiled only if it runs alone (fused eager's calls) */
  TPU_COMPILE_COMPILED,  /* compiled by XLA */
  TPU_COMPILE_LOADED,    /* loaded from the disk cache */
} tpu_compile_event;

/* A program of |name| for |signature| (its arguments as "float32[4,8]; 2.5",
 * "; " between them) was built, compiled or loaded in |seconds|. |name| is
 * the owner unless tpu_compiles_set_owner maps it. Copies both. */
void tpu_compiles_note(const char *name, const char *signature, tpu_compile_event ev, double seconds);

/* Programs named |prefix| or |prefix|_<anything> belong to |owner| (a
 * compiled function's graphs). Copies both. */
void tpu_compiles_set_owner(const char *prefix, const char *owner);

/* Called (outside the log's lock) for every note with the owner. NULL: none. */
typedef void (*tpu_compiles_listener)(const char *owner, const char *signature, tpu_compile_event ev,
                                      double seconds);
void tpu_compiles_set_listener(tpu_compiles_listener fn);

/* Signatures an owner may build before it warns (0: the default, 8). */
void tpu_compiles_set_limit(int n);
int tpu_compiles_limit(void);

/* The oldest warning not taken yet (malloc'd, the caller frees it), or NULL. */
char *tpu_compiles_take_warning(void);

/* One owner's numbers, for the report; |signatures| holds the first
 * |num_kept| of its |num_signatures| (at most 16 are kept), valid during the
 * callback. */
typedef struct tpu_compiles_entry {
  const char *owner;
  int64_t num_signatures, compiled, loaded;
  double seconds;
  const char *const *signatures;
  int num_kept;
} tpu_compiles_entry;
/* Calls |fn| for every owner, in the order they first compiled, under the
 * log's lock: |fn| must not note. */
void tpu_compiles_each(void (*fn)(void *ctx, const tpu_compiles_entry *e), void *ctx);
/* Forgets every owner's numbers (not the owners' names, limit or listener). */
void tpu_compiles_reset(void);

#ifdef __cplusplus
}
#endif

#endif /* TPU_BASE_COMPILES_H_ */
