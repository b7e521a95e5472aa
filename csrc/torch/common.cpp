// The process runtime, error translation and dtype mapping shared by the
// glue files.
#include "torch/tpu_torch.h"

#include <c10/util/Exception.h>
#include <torch/csrc/utils/device_lazy_init.h>

#include <mutex>

extern "C" {
#include "base/stats.h"
#include "kernels/kernels.h"
#include "runtime/compile_cache.h"
}

namespace torchtpu {

namespace {
std::mutex g_runtime_mutex;
tpu_runtime* g_runtime = nullptr;
std::string g_runtime_error;  // why the runtime could not start, once tried
thread_local c10::DeviceIndex t_current_device = 0;
}  // namespace

namespace {
Config g_config;      // set by torchtpu._C._configure before first use
unsigned g_kernels = ~0u;
}  // namespace

void configure(const Config& config) {
  std::lock_guard<std::mutex> lock(g_runtime_mutex);
  TORCH_CHECK(g_runtime == nullptr, "the tpu runtime has already started; configure it before first use");
  unsigned bits = 0;
  TORCH_CHECK_VALUE(tpu_kernels_select(config.kernels.c_str(), &bits), "TORCHTPU_KERNELS=", config.kernels,
                    ": expected 1, 0, or kernel names (attention, matmul) separated by commas");
  g_config = config;
  g_runtime_error = config.error;
  g_kernels = bits;
}

void throw_status(tpu_status_t st, const char* context) {
  if (st == nullptr) return;
  std::string msg = tpu_status_message(st);
  if (context != nullptr) msg = std::string(context) + ": " + msg;
  tpu_code_t code = tpu_status_code(st);
  tpu_status_free(st);
  switch (code) {
    case TPU_ERR_INDEX:
      TORCH_CHECK_INDEX(false, msg);
    case TPU_ERR_TYPE:
      TORCH_CHECK_TYPE(false, msg);
    case TPU_ERR_VALUE:
      TORCH_CHECK_VALUE(false, msg);
    case TPU_ERR_NOT_IMPLEMENTED:
      TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
    case TPU_ERR_OUT_OF_MEMORY:
      TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
    default:
      TORCH_CHECK(false, msg);
  }
}

void check_admitted(bool admitted, const char* kernel, c10::ScalarType t) {
  if (!admitted) throw_status(tpu_lower_not_implemented(kernel, to_tpu(t)));
}

std::string legacy_type_name(const at::Tensor& t) {
  return c10::str("torch.", c10::get_privateuse1_backend(), ".", c10::toString(t.scalar_type()), "Tensor");
}

tpu_runtime* runtime() {
  std::lock_guard<std::mutex> lock(g_runtime_mutex);
  if (g_runtime != nullptr) {
    TPU_CHECK(tpu_runtime_check_fork());  // a child forked after the start cannot use it
    return g_runtime;
  }
  TORCH_CHECK(g_runtime_error.empty(), g_runtime_error);
  TORCH_CHECK(!g_config.plugin_path.empty(),
              "torchtpu has no PJRT plugin configured: import torchtpu before using the tpu device");
  tpu_runtime_options opts;
  tpu_runtime_options_init(&opts);
  opts.plugin_path = g_config.plugin_path.c_str();
  opts.platform = g_config.platform.empty() ? nullptr : g_config.platform.c_str();
  opts.cpu_device_count = g_config.cpu_devices;
  tpu_runtime* rt = nullptr;
  tpu_status_t st = tpu_runtime_create(&opts, &rt);
  if (st != nullptr) {
    g_runtime_error = std::string("torchtpu could not start the PJRT plugin: ") + tpu_status_message(st);
    tpu_status_free(st);
    TORCH_CHECK(false, g_runtime_error);
  }
  tpu_eager_options eager = g_config.eager;
  eager.kernels = tpu_kernels_register(rt, g_kernels);
  tpu_eager_init(rt, &eager);
  st = tpu_compile_cache_configure(rt, g_config.cache_dir.c_str(), g_config.cache_max_bytes,
                                   g_config.has_xla_flags ? g_config.xla_flags.c_str() : nullptr);
  if (st != nullptr) {  // the cache is an optimization: warn and go on without it
    TORCH_WARN("torchtpu: ", tpu_status_message(st), "; compiled programs will not be cached on disk");
    tpu_status_free(st);
  }
  g_runtime = rt;
  // PyTorch's own mark of a bad fork: a forked child forgets that the device
  // was initialized, so its first tpu factory calls torch.tpu._lazy_init
  // again, which raises there.
  torch::utils::register_fork_handler_for_device_init(c10::DeviceType::PrivateUse1);
  return rt;
}

bool runtime_started() noexcept {
  std::lock_guard<std::mutex> lock(g_runtime_mutex);
  return g_runtime != nullptr;
}

int device_count_or_zero() noexcept {
  {
    // Known since the start: it answers in a forked child too, as CUDA's does.
    std::lock_guard<std::mutex> lock(g_runtime_mutex);
    if (g_runtime != nullptr) return tpu_runtime_device_count(g_runtime);
    // The CPU plugin makes as many devices as it is told: PyTorch asks for
    // the count (torch.accelerator, a default process group, DeviceMesh)
    // without starting a client whose threads and memory a process that
    // never uses tpu would carry. Its file was found at configure.
    if (g_config.platform == "cpu" && g_runtime_error.empty() && !g_config.plugin_path.empty()) return g_config.cpu_devices;
  }
  try {
    return tpu_runtime_device_count(runtime());
  } catch (...) {
    return 0;
  }
}

c10::DeviceIndex current_device() { return t_current_device; }

void set_current_device(c10::DeviceIndex index) {
  if (index == t_current_device) return;
  int n = device_count_or_zero();
  TORCH_CHECK(index >= 0 && index < n, "Invalid device index ", static_cast<int>(index), " for tpu: ", n,
              " device(s) available");
  t_current_device = index;
}

tpu_dtype_t to_tpu(c10::ScalarType t) {
  switch (t) {
    case at::kBool: return TPU_BOOL;
    case at::kChar: return TPU_S8;
    case at::kShort: return TPU_S16;
    case at::kInt: return TPU_S32;
    case at::kLong: return TPU_S64;
    case at::kByte: return TPU_U8;
    case at::kUInt16: return TPU_U16;
    case at::kUInt32: return TPU_U32;
    case at::kUInt64: return TPU_U64;
    case at::kHalf: return TPU_F16;
    case at::kFloat: return TPU_F32;
    case at::kDouble: return TPU_F64;
    case at::kBFloat16: return TPU_BF16;
    case at::kComplexFloat: return TPU_C64;
    case at::kComplexDouble: return TPU_C128;
    case at::kFloat8_e5m2: return TPU_F8E5M2;
    case at::kFloat8_e4m3fn: return TPU_F8E4M3FN;
    case at::kFloat8_e5m2fnuz: return TPU_F8E5M2FNUZ;
    case at::kFloat8_e4m3fnuz: return TPU_F8E4M3FNUZ;
    default: return TPU_INVALID;
  }
}

tpu_dtype_t held_dtype(c10::ScalarType t) {
  tpu_dtype_t d = to_tpu(t);
  TORCH_CHECK(d != TPU_INVALID, "tpu does not support tensors of dtype ", t);
  return d;
}

c10::ScalarType to_torch(tpu_dtype_t t) {
  switch (t) {
    case TPU_BOOL: return at::kBool;
    case TPU_S8: return at::kChar;
    case TPU_S16: return at::kShort;
    case TPU_S32: return at::kInt;
    case TPU_S64: return at::kLong;
    case TPU_U8: return at::kByte;
    case TPU_U16: return at::kUInt16;
    case TPU_U32: return at::kUInt32;
    case TPU_U64: return at::kUInt64;
    case TPU_F16: return at::kHalf;
    case TPU_F32: return at::kFloat;
    case TPU_F64: return at::kDouble;
    case TPU_BF16: return at::kBFloat16;
    case TPU_C64: return at::kComplexFloat;
    case TPU_C128: return at::kComplexDouble;
    case TPU_F8E5M2: return at::kFloat8_e5m2;
    case TPU_F8E4M3FN: return at::kFloat8_e4m3fn;
    case TPU_F8E5M2FNUZ: return at::kFloat8_e5m2fnuz;
    case TPU_F8E4M3FNUZ: return at::kFloat8_e4m3fnuz;
    default: TORCH_CHECK(false, "torchtpu: no PyTorch dtype for ", tpu_dtype_name(t));
  }
}

tpu_storage* storage_of(const c10::Storage& s) { return static_cast<tpu_storage*>(s.data_ptr().get()); }

tpu_storage* storage_of(const at::Tensor& t) { return storage_of(t.storage()); }

void check_rank(int64_t dims) {
  TORCH_CHECK(dims <= TPU_MAX_TENSOR_RANK, "tpu supports tensors of at most ", TPU_MAX_TENSOR_RANK,
              " dimensions, got ", dims);
}

tpu_tensor_ref tensor_ref(const at::Tensor& t) {
  tpu_tensor_ref r;
  fill_tensor_ref(t, r);
  return r;
}

void fill_tensor_ref(const at::Tensor& t, tpu_tensor_ref& r) {
  r.host_scalar = nullptr;
  r.wrapped_number = false;
  r.storage = storage_of(t);
  tpu_view& v = r.view;
  v.dtype = held_dtype(t.scalar_type());
  check_rank(t.dim());
  v.rank = static_cast<int>(t.dim());
  auto sizes = t.sizes();
  auto strides = t.strides();
  for (int i = 0; i < v.rank; i++) {
    v.sizes[i] = sizes[i];
    v.strides[i] = strides[i];
  }
  v.offset = t.storage_offset();
  r.conj = t.is_conj();
  r.neg = t.is_neg();
}

at::Tensor tensor_from_buffer(tpu_buffer* buf, at::ScalarType dtype, at::IntArrayRef sizes,
                              c10::DeviceIndex device) {
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device));
  at::Tensor t = at::detail::empty_generic(sizes, allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           dtype, std::nullopt);
  tpu_storage* s = storage_of(t);
  tpu_hlo_type type = tpu_storage_dense_type(to_tpu(dtype), static_cast<int>(sizes.size()), sizes.data());
  if (s != nullptr) tpu_storage_set(s, buf, &type);
  else tpu_buffer_destroy(runtime(), buf);
  return t;
}

}  // namespace torchtpu
