/* Fused eager's trace (trace.c) as each storage carries it: the trace's
 * bookkeeping lives in the storage box (one per PyTorch storage) so that a
 * call finds whether it touches the trace without a lookup. The hooks the
 * rest of eager calls are in internal.h. */
#ifndef TPU_EAGER_TRACE_H_
#define TPU_EAGER_TRACE_H_

#include <stdbool.h>

/* Changed under the trace's lock; |held| is also read without it
 * (atomically). */
typedef struct tpu_trace_mark {
  int held;            /* a recorded call reads or writes the storage */
  bool dropped;        /* PyTorch let go of it while held (the trace frees it) */
  int slot;            /* while held: its index among the trace's storages */
  int readers, reader; /* while held: calls that read it (trace.c, MAX_READERS); the last counted */
} tpu_trace_mark;

#endif /* TPU_EAGER_TRACE_H_ */
