// Shared pieces of the C++ glue: the process runtime, status -> c10 error,
// dtype mapping, and the C description of a tensor. Everything that computes
// lives in C; these files only translate between PyTorch and it.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>

#include <Python.h>

#include <string>

extern "C" {
#include "eager/eager.h"
}

namespace torchtpu {

// Throws the c10 error matching |st|'s code (IndexError, TypeError …) with
// its message, after freeing it. No-op for NULL.
void throw_status(tpu_status_t st, const char* context = nullptr);

#define TPU_CHECK(expr)                                \
  do {                                                 \
    tpu_status_t tpu_check_st_ = (expr);               \
    if (tpu_check_st_ != nullptr) ::torchtpu::throw_status(tpu_check_st_); \
  } while (0)

// Refuses dtype |t| where the CPU kernel |kernel| does (|admitted| false),
// with the message C rules give (tpu_lower_not_implemented): for the C++
// composites, which have no rule to declare what they admit.
void check_admitted(bool admitted, const char* kernel, c10::ScalarType t);

// The type name PyTorch's messages give a tensor ("torch.cuda.FloatTensor"),
// with tpu's name ("torch.tpu.FloatTensor"): c10 prints "tpuFloatType",
// which Python translates only for the CPU's and CUDA's types.
std::string legacy_type_name(const at::Tensor& t);

// The process's settings, filled by torchtpu._C._configure from
// torchtpu/_settings.py (which reads the environment; C++ and C read none).
struct Config {
  std::string plugin_path, platform;
  std::string error;             // non-empty: what every use of the device raises (no plugin)
  int cpu_devices = 1;           // devices the CPU plugin makes
  std::string cache_dir;         // the persistent compile cache ("" = off)
  int64_t cache_max_bytes = 0;   // its size cap (0: the default)
  std::string kernels = "1";     // TORCHTPU_KERNELS (tpu_kernels_select's names)
  bool has_xla_flags = false;    // XLA_FLAGS, part of the compile cache's key
  std::string xla_flags;
  tpu_eager_options eager{};     // .kernels is filled from |kernels| when the runtime starts
};
// Sets the settings the runtime starts with; throws ValueError for an
// unknown kernel name and RuntimeError once the runtime has started.
void configure(const Config& config);
// The runtime of this process, created on first use from the plugin chosen
// at import (torchtpu._C._configure). Throws if it cannot be created, and
// in a child forked after it was (tpu_runtime_check_fork's RuntimeError).
tpu_runtime* runtime();
// The device count, or 0 when the runtime cannot start (never throws; a
// forked child gets its parent's count).
int device_count_or_zero() noexcept;
// Whether the runtime has started (a tpu tensor or query made it).
bool runtime_started() noexcept;
// The thread's current device index.
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);

// The compile progress line (progress.cpp): notes on stderr once a burst of
// compiles has run |delay| seconds, overwriting one line on a terminal
// (|tty|), else a line every few seconds; progress_finish ends it (at exit).
void progress_start(double delay, bool tty);
void progress_finish();

tpu_dtype_t to_tpu(c10::ScalarType t);
// to_tpu, or PyTorch-style "tpu does not support tensors of dtype X".
tpu_dtype_t held_dtype(c10::ScalarType t);
c10::ScalarType to_torch(tpu_dtype_t t);

c10::Allocator* allocator();
// The storage box behind a tpu storage or tensor (nullptr for a zero-byte
// storage): its data pointer, which is also the context of the storages our
// allocator makes; a storage that PyTorch wraps around a tpu data pointer
// (at::from_blob: the legacy serializer, DLPack) has only the pointer.
tpu_storage* storage_of(const c10::Storage& s);
tpu_storage* storage_of(const at::Tensor& t);
// Refuses a tensor of more dims than tpu takes (TPU_MAX_TENSOR_RANK, 64:
// PyTorch's own limit for reductions), before any C code sees its sizes.
void check_rank(int64_t dims);
// The C description of a tpu tensor (its storage box and view).
tpu_tensor_ref tensor_ref(const at::Tensor& t);
// The same, written into |r|: only the first dim() sizes and strides are set
// (a view holds 64; zeroing and copying them all made _foreach_add_ over 100
// pairs of tensors 11% slower).
void fill_tensor_ref(const at::Tensor& t, tpu_tensor_ref& r);
// A new contiguous tpu tensor owning |buf| (made by upload: of |dtype|, the
// dense buffer type of |sizes|).
at::Tensor tensor_from_buffer(tpu_buffer* buf, at::ScalarType dtype, at::IntArrayRef sizes,
                              c10::DeviceIndex device);

// Runs the internal copy rule: dst (a tpu tensor, any view) = src (a tpu
// tensor broadcastable to it), converting dtypes.
void device_copy(const at::Tensor& dst, const at::Tensor& src);
// A contiguous host copy of |src| (a tpu tensor), of its dtype.
at::Tensor to_host(const at::Tensor& src);

// Fallback policy (TORCHTPU_FALLBACK): warn once per op, error, or silent.
enum class FallbackMode { kWarn, kError, kSilent };
void set_fallback_mode(FallbackMode mode);
// The Python function fallbacks try first (torchtpu._decomp.run); a new
// reference is taken.
void set_decomposer(PyObject* fn);

}  // namespace torchtpu
