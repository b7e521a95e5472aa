/* Pieces shared by the runtime's files; not part of its interface.
 *
 * runtime.c: plugin, client, devices, buffers, the PJRT error choke point;
 * compile.c: compile options, compile, (de)serialize; launch.c: execute,
 * pending launches, deferred buffer destroys, synchronize, markers. */
#ifndef TPU_RUNTIME_INTERNAL_H_
#define TPU_RUNTIME_INTERNAL_H_

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/profile.h"
#include "base/strbuf.h"
#include "runtime/pjrt_api.h"
#include "runtime/runtime.h"

#define TPU_MAX_DEVICES 64
/* Launches kept in flight before the host waits for the oldest one. */
#define TPU_MAX_PENDING 1024

/* A FIFO of (pointer, launch number) pairs: a device's tracked launches in
 * flight (their completion events), or the buffers whose destroy waits for
 * them (launch.c). */
typedef struct seq_entry {
  void *ptr;
  uint64_t seq;
} seq_entry;
typedef struct seq_queue {
  seq_entry *items;
  size_t head, count, cap;
} seq_queue;

struct tpu_runtime {
  const PJRT_Api *api;
  PJRT_Client *client;
  int num_devices;
  PJRT_Device *devices[TPU_MAX_DEVICES];
  char *kinds[TPU_MAX_DEVICES];
  char *platform_name;
  char *platform_version;
  char *plugin_path;
  pthread_mutex_t lock; /* guards |pending|, |launches|, |doomed| and |async_error| */
  seq_queue pending[TPU_MAX_DEVICES]; /* (PJRT_Event *, its launch's number) */
  uint64_t launches;                  /* the number of the newest tracked launch */
  seq_queue doomed;                   /* (PJRT_Buffer *, the newest launch when it was released) */
  bool defer_destroys;                /* the plugin's buffer destroy waits for launches (CPU) */
  tpu_status_t async_error;
  tpu_strbuf compile_options; /* serialized CompileOptionsProto for every compile; under |lock| */
  unsigned dropped_overrides;  /* kCpuOverrides the plugin refused; under |lock| */
  bool cpu_overrides;          /* |compile_options| carry kCpuOverrides */
};

struct tpu_executable {
  PJRT_LoadedExecutable *exe;
  size_t num_outputs;
  char name[TPU_PROFILE_NAME_MAX];
};

/* The one place a PJRT_Error* becomes a status: converts |err| (NULL: OK),
 * prefixing |what|, and destroys it. */
tpu_status_t tpu_runtime_from_pjrt(const PJRT_Api *api, PJRT_Error *err, const char *what) TPU_MUST_USE;

/* tpu_runtime_from_pjrt with the common case, no error, inline. */
static inline tpu_status_t tpu_runtime_pjrt_result(const PJRT_Api *api, PJRT_Error *err, const char *what) {
  return err == NULL ? NULL : tpu_runtime_from_pjrt(api, err, what);
}

/* Calls |slot| with |args| when the plugin provides it (and this process may
 * call the plugin). */
#define CALL(api, slot, args, what)                                                     \
  (tpu_runtime_in_forked_child() ? tpu_runtime_check_fork()                             \
   : TPU_PJRT_HAS(api, slot)                                                            \
       ? tpu_runtime_pjrt_result((api), (api)->slot(args), (what))                      \
       : tpu_status_new(TPU_ERR_UNAVAILABLE, "%s: the PJRT plugin does not provide %s", \
                        (what), #slot))

void tpu_runtime_event_destroy(const PJRT_Api *api, PJRT_Event *ev);
/* Waits for |ev| and destroys it. */
tpu_status_t tpu_runtime_event_await(const PJRT_Api *api, PJRT_Event *ev, const char *what) TPU_MUST_USE;
/* TPU_ERR_RUNTIME unless |device| is one of |rt|'s. */
tpu_status_t tpu_runtime_check_device(const tpu_runtime *rt, int device) TPU_MUST_USE;
/* Keeps |buf| from being destroyed while launches that may use it are in
 * flight (launch.c); false when it can be destroyed now. */
bool tpu_runtime_defer_destroy(tpu_runtime *rt, PJRT_Buffer *buf);
void tpu_runtime_destroy_now(const PJRT_Api *api, PJRT_Buffer *buf);
/* Fills |rt->compile_options| (compile.c), once the platform is known. */
tpu_status_t tpu_runtime_init_compile_options(tpu_runtime *rt) TPU_MUST_USE;

#endif /* TPU_RUNTIME_INTERNAL_H_ */
