/* The C runtime over one PJRT plugin: load, client, devices, buffers,
 * compile, execute, synchronize.
 *
 * Mechanism only: no caching and no policy live here (eager/ and the
 * executable cache build on these calls). Every PJRT error is converted into
 * a tpu_status_t inside this module and destroyed there.
 *
 * Ownership: a tpu_runtime is created once per process and is never
 * destroyed while buffers or executables made from it live (the plugin's
 * shared object is never unloaded). Buffers and executables are owned by
 * whoever received them through an |out_| parameter and are released with
 * their _destroy function. All functions are thread-safe.
 *
 * Fork: the plugin's threads do not survive fork(). In a child forked after
 * a runtime was created, every function that would call the plugin returns
 * the status of tpu_runtime_check_fork() at once (tpu_runtime_create too),
 * releases free only host memory, and markers are reached when recorded.
 * Queries of what the runtime learnt at creation (device count, names) still
 * answer. A process forked before any runtime was created may create one. */
#ifndef TPU_RUNTIME_RUNTIME_H_
#define TPU_RUNTIME_RUNTIME_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"
#include "base/strbuf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_runtime tpu_runtime;
typedef struct tpu_buffer tpu_buffer;         /* a device buffer (immutable contents) */
typedef struct tpu_executable tpu_executable; /* a compiled program */

typedef struct tpu_runtime_options {
  const char *plugin_path; /* path to the plugin's shared object; required */
  const char *platform;    /* "cpu", "cuda", "tpu" or NULL: selects client options */
  int cpu_device_count;    /* devices the CPU plugin creates; default 1 */
} tpu_runtime_options;

void tpu_runtime_options_init(tpu_runtime_options *opts);

/* Whether this process was forked after a runtime was created (by it or by
 * an ancestor): then it must not call the plugin. */
bool tpu_runtime_in_forked_child(void);
/* NULL, or in such a child a TPU_ERR_RUNTIME status: "Cannot re-initialize
 * tpu in forked subprocess. To use tpu with multiprocessing, you must use
 * the 'spawn' start method" (CUDA's words for the same limit). */
tpu_status_t tpu_runtime_check_fork(void) TPU_MUST_USE;

/* Loads the plugin and creates its client. On failure nothing is left
 * allocated except a plugin that was already dlopen'ed (never unloaded). */
tpu_status_t tpu_runtime_create(const tpu_runtime_options *opts,
                                tpu_runtime **out_rt) TPU_MUST_USE;
/* Destroys the client. Every buffer and executable must be gone first. */
void tpu_runtime_destroy(tpu_runtime *rt);

int tpu_runtime_device_count(const tpu_runtime *rt);
/* Strings valid while |rt| lives. */
const char *tpu_runtime_platform_name(const tpu_runtime *rt);    /* "cpu", "cuda" … */
const char *tpu_runtime_platform_version(const tpu_runtime *rt);
const char *tpu_runtime_plugin_path(const tpu_runtime *rt);
/* The serialized CompileOptionsProto compiles use (valid while |rt| lives;
 * may change once, when the plugin refuses an XLA option), but for programs
 * compiled without the XLA option overrides (tpu_executable_compile). */
const char *tpu_runtime_compile_options(const tpu_runtime *rt, size_t *out_size);
const char *tpu_runtime_device_kind(const tpu_runtime *rt, int device);
/* The device's free and total memory: the plugin's allocator statistics
 * where it reports a limit (CUDA, TPU), the host's available memory on the
 * CPU plugin, whose device memory is host memory; TPU_ERR_UNAVAILABLE
 * otherwise. */
tpu_status_t tpu_runtime_memory_info(tpu_runtime *rt, int device, int64_t *out_free,
                                     int64_t *out_total) TPU_MUST_USE;
void tpu_runtime_api_version(const tpu_runtime *rt, int *out_major, int *out_minor);

/* Registers |handler| (an XLA_FFI_Handler*, see runtime/xla_ffi.h) as the
 * typed FFI custom call |name| of the plugin's platform: programs compiled
 * afterwards may call it (stablehlo.custom_call @name, api_version 4).
 * TPU_ERR_NOT_IMPLEMENTED when the plugin has no FFI extension we know. */
tpu_status_t tpu_runtime_register_ffi(tpu_runtime *rt, const char *name, void *handler) TPU_MUST_USE;

/* Whether the plugin exports PJRT's profiler extension
 * (PJRT_Extension_Type_Profiler: the GPU plugin and libtpu do, the CPU plugin
 * does not). Traces take device spans from completion events either way;
 * the extension's own device trace (XSpace) is not collected. */
bool tpu_runtime_has_profiler_extension(const tpu_runtime *rt);

/* --- buffers -------------------------------------------------------------
 * Buffers are dense, row-major, with the given dims (rank may be 0; a zero
 * dim is allowed). */
tpu_status_t tpu_buffer_from_host(tpu_runtime *rt, int device, const void *data, tpu_dtype_t dtype,
                                  const int64_t *dims, int rank,
                                  tpu_buffer **out_buf) TPU_MUST_USE;
/* A buffer whose contents are unspecified (zeros where the plugin cannot
 * allocate without initializing). */
tpu_status_t tpu_buffer_uninitialized(tpu_runtime *rt, int device, tpu_dtype_t dtype,
                                      const int64_t *dims, int rank,
                                      tpu_buffer **out_buf) TPU_MUST_USE;
/* Copies the whole buffer into |dst| (|size| bytes, exactly the buffer's
 * dense size) and waits for the copy. Surfaces errors of the computation that
 * produced the buffer. */
tpu_status_t tpu_buffer_to_host(tpu_runtime *rt, tpu_buffer *buf, void *dst,
                                size_t size) TPU_MUST_USE;
/* Waits until |buf| is computed; returns the computation's error if any. */
tpu_status_t tpu_buffer_await(tpu_runtime *rt, tpu_buffer *buf) TPU_MUST_USE;
/* The host address of |buf|'s bytes (dense, row-major), valid while |buf|
 * lives, where the plugin keeps device memory in host memory (the CPU
 * plugin); TPU_ERR_UNAVAILABLE elsewhere. Read it after tpu_buffer_await;
 * write it only while nothing has read |buf| (PJRT takes buffers as
 * immutable): the distributed backend writes results there in place. */
tpu_status_t tpu_buffer_host_pointer(tpu_runtime *rt, tpu_buffer *buf, void **out_ptr) TPU_MUST_USE;
/* Releases |buf| (NULL is fine). Pending computations that read it finish. */
void tpu_buffer_destroy(tpu_runtime *rt, tpu_buffer *buf);

/* --- executables -------------------------------------------------------- */
/* What a compile is told about the program beside its text. */
typedef struct tpu_compile_options {
  int max_rank; /* the most dims of any value in the program */
  const char *name; /* names the program in traces (copied); NULL: "program" */
  /* 1: a program of one replica, run on the device execute names. n > 1:
   * replica i runs on device i (collectives across them), launched by
   * tpu_executable_execute_replicas. */
  int num_replicas;
} tpu_compile_options;
/* Defaults: a program of low-rank values, unnamed, one replica. */
void tpu_compile_options_init(tpu_compile_options *o);
/* Writes to |out| the serialized CompileOptionsProto a compile with
 * |options| uses (NULL: the defaults). */
tpu_status_t tpu_runtime_compile_options_for(tpu_runtime *rt, const tpu_compile_options *options,
                                             tpu_strbuf *out) TPU_MUST_USE;

/* Compiles StableHLO (MLIR text or bytecode); |options| may be NULL (the
 * defaults). Traced as a compile span "miss". |out_exe| is owned by the caller. Compile errors come back as
 * TPU_ERR_RUNTIME with XLA's message. On the CPU plugin, a program with
 * values of more than 8 dims is compiled without the YNNPACK option
 * (YNNPACK crashed on them). */
tpu_status_t tpu_executable_compile(tpu_runtime *rt, const char *mlir, size_t size,
                                    const tpu_compile_options *options, tpu_executable **out_exe) TPU_MUST_USE;
size_t tpu_executable_num_outputs(const tpu_executable *exe);
/* The program's name in traces (valid while |exe| lives); set by compile
 * from its options, or later (a program loaded from a cache). */
const char *tpu_executable_name(const tpu_executable *exe);
void tpu_executable_set_name(tpu_executable *exe, const char *name);

/* Serializes |exe| into a malloc'ed block (|*out_bytes| freed by the caller). */
tpu_status_t tpu_executable_serialize(tpu_runtime *rt, const tpu_executable *exe,
                                      char **out_bytes, size_t *out_size) TPU_MUST_USE;
/* Loads an executable written by tpu_executable_serialize of the same plugin
 * build. Any failure is a status, never a crash. */
tpu_status_t tpu_executable_deserialize(tpu_runtime *rt, const char *bytes, size_t size,
                                        tpu_executable **out_exe) TPU_MUST_USE;
void tpu_executable_destroy(tpu_runtime *rt, tpu_executable *exe);

/* Launches |exe| on |device| with |num_args| arguments and returns at once;
 * |outs| (tpu_executable_num_outputs entries) receives new buffers owned by
 * the caller. An argument whose bit is set in |donate| (indexed by argument,
 * NULL = none) may be consumed by an aliased output: the caller must destroy
 * that argument afterwards and never use it again. With |track|, the launch
 * joins the ones tpu_runtime_synchronize waits for; asking XLA for that
 * completion event costs about 2 us, so callers skip it for programs the
 * plugin runs inline (tiny programs on the CPU plugin): they are done when
 * this returns. While a profiler records (base/profile.h), the launch is
 * recorded as a host span and a device span that the completion event
 * closes (then every launch asks for that event). */
tpu_status_t tpu_executable_execute(tpu_runtime *rt, tpu_executable *exe, int device,
                                    tpu_buffer *const *args, size_t num_args, const bool *donate,
                                    bool track, tpu_buffer **outs) TPU_MUST_USE;

/* Launches a program compiled with |num_replicas| replicas: replica r runs on
 * device r with arguments |args[r]| (|num_args| each) and returns its new
 * buffers in |outs[r]| (tpu_executable_num_outputs each, owned by the
 * caller). Returns at once; reading an output waits for it. */
tpu_status_t tpu_executable_execute_replicas(tpu_runtime *rt, tpu_executable *exe, int num_replicas,
                                             tpu_buffer *const *const *args, size_t num_args,
                                             tpu_buffer **const *outs) TPU_MUST_USE;

/* True when the plugin runs small programs inline (the CPU plugin: fewer
 * than about 1000 flops), so they need no completion tracking. */
bool tpu_runtime_runs_small_programs_inline(const tpu_runtime *rt);

/* Waits for every tracked launch so far on |device| (-1: all devices);
 * returns the first asynchronous error seen and not reported yet, if any. */
tpu_status_t tpu_runtime_synchronize(tpu_runtime *rt, int device) TPU_MUST_USE;

/* A failed launch surfaces twice: at a read of one of its outputs (the
 * buffers carry its error) and as its completion event, which synchronize
 * reports. A read that failed with |st| (tpu_buffer_to_host and
 * tpu_buffer_await call this) has reported it: the launches in flight are
 * awaited, and the pending asynchronous error is dropped when it is the one
 * |st| carries, so that each failure is reported once, where it surfaced. */
void tpu_runtime_error_reported(tpu_runtime *rt, tpu_status_t st);

/* A point in a device's queue with the time it was reached (what
 * torch.Event(enable_timing=True) records): when every program launched on
 * the device before it had finished, and not before it was made. Refcounted
 * (the plugin's callback holds a reference while it is pending). */
typedef struct tpu_marker tpu_marker;
/* NULL when out of memory. */
tpu_marker *tpu_marker_record(tpu_runtime *rt, int device);
bool tpu_marker_done(tpu_marker *m);
/* Waits until the marker is reached. */
void tpu_marker_wait(tpu_marker *m);
/* Monotonic nanoseconds at which it was reached; call once done. */
int64_t tpu_marker_time_ns(tpu_marker *m);
void tpu_marker_release(tpu_marker *m);

#ifdef __cplusplus
}
#endif

#endif /* TPU_RUNTIME_RUNTIME_H_ */
