/* The PJRT runtime: plugin loading, client, devices, buffers.
 *
 * Every PJRT call goes through CALL() (internal.h), which checks that the
 * plugin's table has the slot and that this process may call the plugin at
 * all (see fork below), and every PJRT_Error* is turned into a status by
 * tpu_runtime_from_pjrt(), here, the one place that destroys them. Compiling
 * is compile.c's, launching launch.c's. */

#include "runtime/runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/stats.h"
#include "runtime/internal.h"

tpu_status_t tpu_runtime_from_pjrt(const PJRT_Api *api, PJRT_Error *err, const char *what) {
  if (err == NULL) return NULL;
  PJRT_Error_Message_Args m = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Error_Message_Args, message_size),
      .error = err,
  };
  api->PJRT_Error_Message(&m);
  int pjrt_code = 2;
  if (TPU_PJRT_HAS(api, PJRT_Error_GetCode)) {
    PJRT_Error_GetCode_Args c = {
        .struct_size = TPU_PJRT_SIZE(PJRT_Error_GetCode_Args, code),
        .error = err,
    };
    PJRT_Error *e2 = api->PJRT_Error_GetCode(&c);
    if (e2 == NULL) pjrt_code = c.code;
    else {
      PJRT_Error_Destroy_Args d = {.struct_size = TPU_PJRT_SIZE(PJRT_Error_Destroy_Args, error),
                                   .error = e2};
      api->PJRT_Error_Destroy(&d);
    }
  }
  tpu_code_t code = TPU_ERR_RUNTIME;
  /* An allocation failing inside a launch reaches a later read through the
   * buffer's event, as XLA's "Out of memory allocating N bytes", its code
   * not always kept. */
  if (pjrt_code == TPU_PJRT_CODE_RESOURCE_EXHAUSTED ||
      memmem(m.message, m.message_size, "Out of memory allocating", 24) != NULL)
    code = TPU_ERR_OUT_OF_MEMORY;
  else if (pjrt_code == TPU_PJRT_CODE_UNIMPLEMENTED) code = TPU_ERR_UNAVAILABLE;
  tpu_status_t st = tpu_status_new(code, "%s: %.*s", what, (int)m.message_size, m.message);
  PJRT_Error_Destroy_Args d = {.struct_size = TPU_PJRT_SIZE(PJRT_Error_Destroy_Args, error),
                               .error = err};
  api->PJRT_Error_Destroy(&d);
  return st;
}

/* --- fork -----------------------------------------------------------------
 * fork() copies only the calling thread. The plugin's client runs threads of
 * its own (XLA's thread pools, the CPU client's async work queue), which the
 * child does not have, and locks they held stay held there: a child that
 * calls the plugin waits forever. So a child forked after a runtime was
 * created (in this process or an ancestor) is marked, by a pthread_atfork
 * handler registered on the first tpu_runtime_create, and CALL() refuses
 * every plugin call there at once; releases free host memory only (the
 * plugin's memory belongs to the parent's copy). Atomic flags, so the
 * handler is async-signal-safe. */
static atomic_bool g_created;
static atomic_bool g_forked;
static pthread_once_t g_fork_watch = PTHREAD_ONCE_INIT;

static void mark_forked_child(void) {
  if (atomic_load_explicit(&g_created, memory_order_relaxed))
    atomic_store_explicit(&g_forked, true, memory_order_relaxed);
}
static void watch_forks(void) { pthread_atfork(NULL, NULL, mark_forked_child); }

bool tpu_runtime_in_forked_child(void) { return atomic_load_explicit(&g_forked, memory_order_relaxed); }

tpu_status_t tpu_runtime_check_fork(void) {
  if (!tpu_runtime_in_forked_child()) return NULL;
  return tpu_status_new(TPU_ERR_RUNTIME,
                        "Cannot re-initialize tpu in forked subprocess. To use tpu with multiprocessing, "
                        "you must use the 'spawn' start method");
}

static tpu_status_t dup_n(const char *s, size_t n, char **out) {
  TPU_RETURN_IF_ERROR(tpu_alloc(n + 1, (void **)out));
  memcpy(*out, s, n);
  (*out)[n] = '\0';
  return NULL;
}

void tpu_runtime_event_destroy(const PJRT_Api *api, PJRT_Event *ev) {
  if (ev == NULL) return;
  PJRT_Event_Destroy_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Event_Destroy_Args, event),
                               .event = ev};
  tpu_status_free(CALL(api, PJRT_Event_Destroy, &a, "destroying an event"));
}

tpu_status_t tpu_runtime_event_await(const PJRT_Api *api, PJRT_Event *ev, const char *what) {
  if (ev == NULL) return NULL;
  PJRT_Event_Await_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Event_Await_Args, event),
                             .event = ev};
  tpu_status_t st = CALL(api, PJRT_Event_Await, &a, what);
  tpu_runtime_event_destroy(api, ev);
  return st;
}

void tpu_runtime_options_init(tpu_runtime_options *opts) {
  memset(opts, 0, sizeof *opts);
  opts->cpu_device_count = 1;
}

static tpu_status_t load_api(const char *path, const PJRT_Api **out_api) {
  *out_api = NULL;
  /* RTLD_LOCAL keeps the plugin's LLVM/absl symbols away from PyTorch's. */
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    const char *why = dlerror();
    return tpu_status_new(TPU_ERR_NOT_FOUND, "cannot load the PJRT plugin '%s': %s", path,
                          why ? why : "unknown error");
  }
  const PJRT_Api *(*get_api)(void) = (const PJRT_Api *(*)(void))dlsym(handle, "GetPjrtApi");
  if (get_api == NULL)
    return tpu_status_new(TPU_ERR_NOT_FOUND,
                          "'%s' is not a PJRT plugin: it does not export GetPjrtApi", path);
  const PJRT_Api *api = get_api();
  if (api == NULL)
    return tpu_status_new(TPU_ERR_RUNTIME, "GetPjrtApi of '%s' returned NULL", path);
  if (api->pjrt_api_version.major_version != 0)
    return tpu_status_new(TPU_ERR_RUNTIME,
                          "the PJRT plugin '%s' has API version %d.%d; torchtpu speaks 0.x", path,
                          api->pjrt_api_version.major_version,
                          api->pjrt_api_version.minor_version);
  if (!TPU_PJRT_HAS(api, PJRT_Error_Destroy) || !TPU_PJRT_HAS(api, PJRT_Error_Message) ||
      !TPU_PJRT_HAS(api, PJRT_LoadedExecutable_Execute))
    return tpu_status_new(TPU_ERR_RUNTIME, "the PJRT plugin '%s' lacks basic entry points", path);
  /* The plugin is never dlclose'd: it registers handlers and threads. */
  *out_api = api;
  return NULL;
}

static tpu_status_t client_string(const PJRT_Api *api, PJRT_Client *client, bool version,
                                  char **out) {
  PJRT_Client_String_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Client_String_Args, value_size),
                               .client = client};
  tpu_status_t st = version ? CALL(api, PJRT_Client_PlatformVersion, &a, "reading the platform")
                            : CALL(api, PJRT_Client_PlatformName, &a, "reading the platform");
  if (st != NULL) return st;
  return dup_n(a.value, a.value_size, out);
}

/* The device's kind, "unknown" when the plugin cannot say. */
static tpu_status_t device_kind(const PJRT_Api *api, PJRT_Device *dev, char **out) {
  PJRT_Device_GetDescription_Args g = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Device_GetDescription_Args, device_description),
      .device = dev};
  tpu_status_t st = CALL(api, PJRT_Device_GetDescription, &g, "describing a device");
  PJRT_DeviceDescription_String_Args k = {
      .struct_size = TPU_PJRT_SIZE(PJRT_DeviceDescription_String_Args, value_size),
      .device_description = g.device_description};
  if (st == NULL) st = CALL(api, PJRT_DeviceDescription_Kind, &k, "describing a device");
  if (st != NULL) {
    tpu_status_free(st);
    return tpu_strdup("unknown", out);
  }
  return dup_n(k.value, k.value_size, out);
}

tpu_status_t tpu_runtime_create(const tpu_runtime_options *opts, tpu_runtime **out_rt) {
  *out_rt = NULL;
  if (opts == NULL || opts->plugin_path == NULL)
    return tpu_status_new(TPU_ERR_VALUE, "tpu_runtime_create: no plugin path given");
  /* Before the plugin is loaded: loading may start its threads. */
  pthread_once(&g_fork_watch, watch_forks);
  atomic_store_explicit(&g_created, true, memory_order_relaxed);
  TPU_RETURN_IF_ERROR(tpu_runtime_check_fork());
  const PJRT_Api *api = NULL;
  TPU_RETURN_IF_ERROR(load_api(opts->plugin_path, &api));

  tpu_runtime *rt = NULL;
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(1, sizeof *rt, (void **)&rt));
  rt->api = api;
  pthread_mutex_init(&rt->lock, NULL);
  tpu_status_t st = NULL;

  if (TPU_PJRT_HAS(api, PJRT_Plugin_Initialize)) {
    PJRT_Plugin_Initialize_Args init = {
        .struct_size = TPU_PJRT_SIZE(PJRT_Plugin_Initialize_Args, extension_start)};
    TPU_GOTO_IF_ERROR(st, CALL(api, PJRT_Plugin_Initialize, &init, "initializing the plugin"),
                      fail);
  }

  PJRT_NamedValue options[4];
  size_t num_options = 0;
  const char *platform = opts->platform ? opts->platform : "";
  if (strcmp(platform, "cpu") == 0) {
    options[num_options++] = (PJRT_NamedValue){
        .struct_size = TPU_PJRT_SIZE(PJRT_NamedValue, value_size),
        .name = "cpu_device_count",
        .name_size = strlen("cpu_device_count"),
        .type = PJRT_NamedValue_kInt64,
        .int64_value = opts->cpu_device_count > 0 ? opts->cpu_device_count : 1,
        .value_size = 1,
    };
  } else if (strcmp(platform, "cuda") == 0) {
    /* Share the GPU with other frameworks instead of grabbing 75% of it. */
    options[num_options++] = (PJRT_NamedValue){
        .struct_size = TPU_PJRT_SIZE(PJRT_NamedValue, value_size),
        .name = "preallocate",
        .name_size = strlen("preallocate"),
        .type = PJRT_NamedValue_kBool,
        .bool_value = false,
        .value_size = 1,
    };
  }
  PJRT_Client_Create_Args create = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Client_Create_Args, kv_try_get_user_arg),
      .create_options = options,
      .num_options = num_options,
  };
  TPU_GOTO_IF_ERROR(st, CALL(api, PJRT_Client_Create, &create, "creating the PJRT client"), fail);
  rt->client = create.client;

  TPU_GOTO_IF_ERROR(st, client_string(api, rt->client, false, &rt->platform_name), fail);
  TPU_GOTO_IF_ERROR(st, client_string(api, rt->client, true, &rt->platform_version), fail);
  rt->defer_destroys = strcmp(rt->platform_name, "cpu") == 0; /* see launch.c */
  TPU_GOTO_IF_ERROR(st, tpu_runtime_init_compile_options(rt), fail);

  PJRT_Client_AddressableDevices_Args devs = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Client_AddressableDevices_Args, num_addressable_devices),
      .client = rt->client};
  TPU_GOTO_IF_ERROR(st, CALL(api, PJRT_Client_AddressableDevices, &devs, "listing devices"),
                    fail);
  rt->num_devices = (int)(devs.num_addressable_devices < TPU_MAX_DEVICES
                              ? devs.num_addressable_devices
                              : TPU_MAX_DEVICES);
  for (int i = 0; i < rt->num_devices; i++) {
    rt->devices[i] = devs.addressable_devices[i];
    TPU_GOTO_IF_ERROR(st, device_kind(api, rt->devices[i], &rt->kinds[i]), fail);
  }
  TPU_GOTO_IF_ERROR(st, tpu_strdup(opts->plugin_path, &rt->plugin_path), fail);
  *out_rt = rt;
  return NULL;

fail:
  tpu_runtime_destroy(rt);
  return st;
}

void tpu_runtime_destroy(tpu_runtime *rt) {
  if (rt == NULL) return;
  tpu_status_free(tpu_runtime_synchronize(rt, -1));
  for (int i = 0; i < TPU_MAX_DEVICES; i++) {
    free(rt->pending[i].items);
    free(rt->kinds[i]);
  }
  if (rt->client != NULL) {
    PJRT_Client_Destroy_Args d = {.struct_size = TPU_PJRT_SIZE(PJRT_Client_Destroy_Args, client),
                                  .client = rt->client};
    tpu_status_free(CALL(rt->api, PJRT_Client_Destroy, &d, "destroying the client"));
  }
  free(rt->doomed.items);
  tpu_status_free(rt->async_error);
  free(rt->platform_name);
  free(rt->platform_version);
  free(rt->plugin_path);
  tpu_strbuf_release(&rt->compile_options);
  pthread_mutex_destroy(&rt->lock);
  free(rt);
}

int tpu_runtime_device_count(const tpu_runtime *rt) { return rt->num_devices; }
const char *tpu_runtime_platform_name(const tpu_runtime *rt) { return rt->platform_name; }
const char *tpu_runtime_platform_version(const tpu_runtime *rt) { return rt->platform_version; }
const char *tpu_runtime_plugin_path(const tpu_runtime *rt) { return rt->plugin_path; }
const char *tpu_runtime_compile_options(const tpu_runtime *rt, size_t *out_size) {
  *out_size = rt->compile_options.len;
  return rt->compile_options.data;
}

const char *tpu_runtime_device_kind(const tpu_runtime *rt, int device) {
  if (device < 0 || device >= rt->num_devices || rt->kinds[device] == NULL) return "unknown";
  return rt->kinds[device];
}

void tpu_runtime_api_version(const tpu_runtime *rt, int *out_major, int *out_minor) {
  *out_major = rt->api->pjrt_api_version.major_version;
  *out_minor = rt->api->pjrt_api_version.minor_version;
}

tpu_status_t tpu_runtime_check_device(const tpu_runtime *rt, int device) {
  if (device < 0 || device >= rt->num_devices)
    return tpu_status_new(TPU_ERR_RUNTIME, "invalid device index %d: %s has %d device(s)", device,
                          rt->platform_name, rt->num_devices);
  return NULL;
}

/* The host's available and total memory (the CPU plugin's device memory):
 * /proc/meminfo's MemAvailable (what the kernel could give without
 * swapping), else the free pages. */
static void host_memory(int64_t *out_free, int64_t *out_total) {
  long page = sysconf(_SC_PAGE_SIZE);
  *out_total = (int64_t)sysconf(_SC_PHYS_PAGES) * page;
  *out_free = (int64_t)sysconf(_SC_AVPHYS_PAGES) * page;
  FILE *f = fopen("/proc/meminfo", "r");
  if (f == NULL) return;
  char line[128];
  long long kib;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1) *out_free = (int64_t)kib * 1024;
  fclose(f);
}

tpu_status_t tpu_runtime_memory_info(tpu_runtime *rt, int device, int64_t *out_free, int64_t *out_total) {
  TPU_RETURN_IF_ERROR(tpu_runtime_check_device(rt, device));
  PJRT_Device_MemoryStats_Args a = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Device_MemoryStats_Args, peak_pool_bytes_is_set),
      .device = rt->devices[device]};
  tpu_status_t st = CALL(rt->api, PJRT_Device_MemoryStats, &a, "reading the device's memory statistics");
  if (st == NULL && a.bytes_limit_is_set) {
    *out_total = a.bytes_limit;
    *out_free = a.bytes_limit - a.bytes_in_use;
    return NULL;
  }
  if (strcmp(rt->platform_name, "cpu") == 0) {
    tpu_status_free(st);
    host_memory(out_free, out_total);
    return NULL;
  }
  if (st != NULL) return st;
  return tpu_status_new(TPU_ERR_UNAVAILABLE, "the PJRT plugin of %s reports no memory limit for device %d",
                        rt->platform_name, device);
}

static uint64_t dense_bytes(tpu_dtype_t dtype, const int64_t *dims, int rank) {
  uint64_t n = tpu_dtype_size(dtype);
  for (int i = 0; i < rank; i++) n *= (uint64_t)dims[i];
  return n;
}

/* --- buffers ------------------------------------------------------------ */

tpu_status_t tpu_buffer_from_host(tpu_runtime *rt, int device, const void *data, tpu_dtype_t dtype,
                                  const int64_t *dims, int rank, tpu_buffer **out_buf) {
  *out_buf = NULL;
  TPU_RETURN_IF_ERROR(tpu_runtime_check_device(rt, device));
  /* PJRT aborts the process on a type it has no buffers of */
  if (tpu_dtype_size(dtype) == 0) return tpu_status_new(TPU_ERR_TYPE, "no device buffers of dtype %d", (int)dtype);
  static const char zero[16] = {0};
  PJRT_Client_BufferFromHostBuffer_Args a = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Client_BufferFromHostBuffer_Args, buffer),
      .client = rt->client,
      .data = data != NULL ? data : zero,
      .type = (int)dtype,
      .dims = dims,
      .num_dims = (size_t)rank,
      .host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
      .device = rt->devices[device],
  };
  TPU_RETURN_IF_ERROR(
      CALL(rt->api, PJRT_Client_BufferFromHostBuffer, &a, "copying a tensor to the device"));
  /* The data was copied before the call returned; the event is moot. */
  tpu_runtime_event_destroy(rt->api, a.done_with_host_buffer);
  tpu_stats_add(TPU_STAT_H2D_BYTES, dense_bytes(dtype, dims, rank));
  *out_buf = (tpu_buffer *)a.buffer;
  return NULL;
}

tpu_status_t tpu_buffer_uninitialized(tpu_runtime *rt, int device, tpu_dtype_t dtype,
                                      const int64_t *dims, int rank, tpu_buffer **out_buf) {
  *out_buf = NULL;
  TPU_RETURN_IF_ERROR(tpu_runtime_check_device(rt, device));
  if (TPU_PJRT_HAS(rt->api, PJRT_Client_CreateUninitializedBuffer)) {
    PJRT_Client_CreateUninitializedBuffer_Args a = {
        .struct_size = TPU_PJRT_SIZE(PJRT_Client_CreateUninitializedBuffer_Args, buffer),
        .client = rt->client,
        .shape_dims = dims,
        .shape_num_dims = (size_t)rank,
        .shape_element_type = (int)dtype,
        .device = rt->devices[device],
    };
    tpu_status_t st = CALL(rt->api, PJRT_Client_CreateUninitializedBuffer, &a,
                           "allocating device memory");
    if (st == NULL) {
      *out_buf = (tpu_buffer *)a.buffer;
      return NULL;
    }
    if (tpu_status_code(st) != TPU_ERR_UNAVAILABLE) return st;
    tpu_status_free(st);
  }
  uint64_t n = dense_bytes(dtype, dims, rank);
  void *zeros = NULL;
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(1, (size_t)n, &zeros));
  tpu_status_t st = tpu_buffer_from_host(rt, device, zeros, dtype, dims, rank, out_buf);
  free(zeros);
  return st;
}

tpu_status_t tpu_buffer_to_host(tpu_runtime *rt, tpu_buffer *buf, void *dst, size_t size) {
  if (buf == NULL) return tpu_status_new(TPU_ERR_VALUE, "reading a NULL device buffer");
  PJRT_Buffer_ToHostBuffer_Args a = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Buffer_ToHostBuffer_Args, event),
      .src = (PJRT_Buffer *)buf,
      .dst = dst,
      .dst_size = size,
  };
  tpu_status_t st = CALL(rt->api, PJRT_Buffer_ToHostBuffer, &a, "copying a tensor to the host");
  if (st == NULL) st = tpu_runtime_event_await(rt->api, a.event, "copying a tensor to the host");
  if (st != NULL) {
    tpu_runtime_error_reported(rt, st);
    return st;
  }
  tpu_stats_add(TPU_STAT_D2H_BYTES, size);
  return NULL;
}

tpu_status_t tpu_buffer_await(tpu_runtime *rt, tpu_buffer *buf) {
  if (buf == NULL) return NULL;
  PJRT_Buffer_ReadyEvent_Args a = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Buffer_ReadyEvent_Args, event),
      .buffer = (PJRT_Buffer *)buf,
  };
  TPU_RETURN_IF_ERROR(CALL(rt->api, PJRT_Buffer_ReadyEvent, &a, "waiting for a tensor"));
  tpu_status_t st = tpu_runtime_event_await(rt->api, a.event, "computing a tensor");
  tpu_runtime_error_reported(rt, st);
  return st;
}

tpu_status_t tpu_buffer_host_pointer(tpu_runtime *rt, tpu_buffer *buf, void **out_ptr) {
  *out_ptr = NULL;
  if (buf == NULL) return tpu_status_new(TPU_ERR_VALUE, "the host address of a NULL device buffer");
  if (strcmp(tpu_runtime_platform_name(rt), "cpu") != 0 || !TPU_PJRT_HAS(rt->api, PJRT_Buffer_UnsafePointer))
    return tpu_status_new(TPU_ERR_UNAVAILABLE, "device memory is not host memory on this platform");
  PJRT_Buffer_UnsafePointer_Args a = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Buffer_UnsafePointer_Args, buffer_pointer),
      .buffer = (PJRT_Buffer *)buf,
  };
  TPU_RETURN_IF_ERROR(CALL(rt->api, PJRT_Buffer_UnsafePointer, &a, "finding a tensor's host memory"));
  *out_ptr = (void *)a.buffer_pointer;
  return NULL;
}

void tpu_runtime_destroy_now(const PJRT_Api *api, PJRT_Buffer *buf) {
  PJRT_Buffer_Destroy_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Buffer_Destroy_Args, buffer), .buffer = buf};
  tpu_status_free(CALL(api, PJRT_Buffer_Destroy, &a, "releasing a buffer"));
}

void tpu_buffer_destroy(tpu_runtime *rt, tpu_buffer *buf) {
  if (buf == NULL || tpu_runtime_defer_destroy(rt, (PJRT_Buffer *)buf)) return;
  tpu_runtime_destroy_now(rt->api, (PJRT_Buffer *)buf);
}

tpu_status_t tpu_runtime_register_ffi(tpu_runtime *rt, const char *name, void *handler) {
  TPU_RETURN_IF_ERROR(tpu_runtime_check_fork());
  const PJRT_FFI_Extension *ffi = NULL;
  for (const PJRT_Extension_Base *e = rt->api->extension_start; e != NULL; e = e->next)
    if (e->type == TPU_PJRT_EXTENSION_FFI) ffi = (const PJRT_FFI_Extension *)e;
  if (ffi == NULL || ffi->base.struct_size < TPU_PJRT_SIZE(PJRT_FFI_Extension, register_handler) ||
      ffi->register_handler == NULL || rt->api->pjrt_api_version.minor_version < 81)
    return tpu_status_new(TPU_ERR_NOT_IMPLEMENTED, "the PJRT plugin has no FFI extension torchtpu knows");
  PJRT_FFI_Register_Handler_Args a = {
      .struct_size = TPU_PJRT_SIZE(PJRT_FFI_Register_Handler_Args, traits),
      .target_name = name,
      .target_name_size = strlen(name),
      .handler = handler,
      .platform_name = rt->platform_name,
      .platform_name_size = strlen(rt->platform_name),
  };
  return tpu_runtime_from_pjrt(rt->api, ffi->register_handler(&a), "registering an FFI handler");
}

bool tpu_runtime_has_profiler_extension(const tpu_runtime *rt) {
  for (const PJRT_Extension_Base *e = rt->api->extension_start; e != NULL; e = e->next)
    if (e->type == TPU_PJRT_EXTENSION_PROFILER) return true;
  return false;
}

bool tpu_runtime_runs_small_programs_inline(const tpu_runtime *rt) {
  return strcmp(rt->platform_name, "cpu") == 0;
}
