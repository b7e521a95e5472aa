/* How the host kernels run their independent tasks: through a callback the
 * caller provides (XLA's thread pool in kernels/ffi.c, a plain loop in the
 * tests), so that the kernels own no threads. */
#ifndef TPU_KERNELS_PARALLEL_H_
#define TPU_KERNELS_PARALLEL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs task(arg, i) for every i in [0, n), in any order and concurrently;
 * returns when all are done. */
typedef struct tpu_parallel {
  void (*run)(void *ctx, int64_t n, void (*task)(void *arg, int64_t i), void *arg);
  void *ctx;
} tpu_parallel;

/* Runs the tasks through |par|, or one after another when it is NULL. */
static inline void tpu_parallel_run(const tpu_parallel *par, int64_t n, void (*task)(void *arg, int64_t i),
                                    void *arg) {
  if (par != NULL)
    par->run(par->ctx, n, task, arg);
  else
    for (int64_t i = 0; i < n; i++) task(arg, i);
}

#ifdef __cplusplus
}
#endif

#endif /* TPU_KERNELS_PARALLEL_H_ */
