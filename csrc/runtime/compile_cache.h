/* The persistent compile cache: serialized executables on disk, shared by
 * eager and compiled programs and across processes.
 *
 * A policy layer over tpu_executable_compile. Entries are keyed by a 128-bit
 * hash of the program text, the compile options, and the plugin's identity
 * (platform name and version, PJRT API version, the plugin file's size and
 * modification time), so an executable from another XLA build is never
 * loaded. Files are written to a temporary name and renamed (atomic), carry
 * their key (the program text, compared on load) and a checksum, and a
 * corrupt, truncated, unloadable or another program's entry is a miss that
 * gets replaced, never an error. What is not a regular file (a FIFO, a
 * directory, a symlink) is never read: skipped, and replaced where it can be
 * removed. The directory is capped in size; the oldest entries go first. */
#ifndef TPU_RUNTIME_COMPILE_CACHE_H_
#define TPU_RUNTIME_COMPILE_CACHE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Points the cache at |dir| (created if needed; NULL or "" turns it off) with
 * a size cap in bytes (0: the default, 2 GiB). Entries go into a
 * subdirectory per plugin identity and |xla_flags| (the XLA_FLAGS XLA reads
 * its defaults from, NULL when unset; the caller reads the environment). */
tpu_status_t tpu_compile_cache_configure(tpu_runtime *rt, const char *dir, int64_t max_bytes,
                                         const char *xla_flags) TPU_MUST_USE;
/* The directory entries of this plugin go to ("" when off); valid until the
 * next configure. */
const char *tpu_compile_cache_dir(void);

/* Compiles |mlir| with |options| (as tpu_executable_compile), or loads the
 * executable a previous compile of the same text stored. |*out_loaded| says
 * which happened (stats count compiles as cache misses and loads apart;
 * traces record a load as a compile span "disk load"). */
tpu_status_t tpu_compile_cached(tpu_runtime *rt, const char *mlir, size_t size, const tpu_compile_options *options,
                                tpu_executable **out_exe, bool *out_loaded) TPU_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TPU_RUNTIME_COMPILE_CACHE_H_ */
