/* The PJRT runtime: plugin loading, client, buffers, compile and execute.
 *
 * Every PJRT call goes through CALL(), which checks that the plugin's table
 * has the slot and that this process may call the plugin at all (see fork
 * below), and every PJRT_Error* is turned into a status by from_pjrt(), the
 * one place that destroys them. */

#include "runtime/runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/stats.h"
#include "base/strbuf.h"
#include "base/profile.h"
#include "runtime/pjrt_api.h"

#define TPU_MAX_DEVICES 64
/* Launches kept in flight before the host waits for the oldest one. */
#define TPU_MAX_PENDING 1024

typedef struct pending_list {
  PJRT_Event **events;
  size_t head, count, cap;
} pending_list;

struct tpu_runtime {
  const PJRT_Api *api;
  PJRT_Client *client;
  int num_devices;
  PJRT_Device *devices[TPU_MAX_DEVICES];
  char *kinds[TPU_MAX_DEVICES];
  char *platform_name;
  char *platform_version;
  char *plugin_path;
  pthread_mutex_t lock; /* guards |pending| and |async_error| */
  pending_list pending[TPU_MAX_DEVICES];
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

/* Serialized xla.CompileOptionsProto: executable_build_options {num_replicas:
 * 1, num_partitions: 1}, compile_portable_executable: true. Portable programs
 * run on any device of the client, chosen at execute time. */
static const char kCompileOptions[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01, 0x20, 0x01};

/* XLA debug options set on the CPU plugin (CompileOptionsProto
 * env_option_overrides, applied over XLA's defaults and XLA_FLAGS):
 * - dots go to XLA's YNNPACK library kernels, as jax configures the same
 *   compiler. Reductions stay XLA's own: YNNPACK's reduce fusion summed a
 *   float32 tensor of 2^20 elements 50x further from the exact sum than
 *   PyTorch's CPU kernel (XLA's own reduction: 1.7x), and crashed on
 *   reductions of rank 15;
 * - no XNNPACK thunks: an XNNPACK dot whose right-hand operand is a program
 *   parameter packs that operand once and reuses the packed copy whenever the
 *   parameter's address repeats, without looking at its contents (XLA's thunk
 *   emitter, "capture_rhs"). Eager programs run again and again on buffers
 *   whose address stays while their values change (a donated in-place update
 *   of a weight, a freed buffer's memory reused), so products read stale
 *   weights: gradients after an optimizer step were 20-40% off.
 * A plugin that does not know an option fails its compile naming it; the
 * runtime then drops that option for good and compiles again. */
typedef struct cpu_override {
  const char *name;
  const char *string_value; /* OptionOverrideProto.string_field, or NULL for bool_value */
  bool bool_value;          /* OptionOverrideProto.bool_field */
  bool ynn;                 /* left out of programs of more than CPU_OVERRIDES_MAX_RANK dims */
} cpu_override;
static const cpu_override kCpuOverrides[] = {
    {"xla_cpu_experimental_ynn_fusion_type", "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT", false, true},
    {"xla_cpu_use_xnnpack", NULL, false, false},
};
#define NUM_CPU_OVERRIDES (sizeof kCpuOverrides / sizeof kCpuOverrides[0])

/* YNNPACK's runtime crashed (a stack overflow or a segfault in its pipeline
 * builder, when a program first ran) on reductions and dots over more than 8
 * dims once they held some 2^15 elements: [4]*9 summed over one dim, a batch
 * of 2^7 16x16 matrices as [2]*7 + [16, 16] in linalg.solve. Merging dims
 * with reshapes does not help, since XLA folds a reshape into the reduction
 * it feeds (a 9-d tensor flattened and summed is a 9-d reduction again), so
 * a program with any value of more dims is compiled without the overrides:
 * XLA's own emitters, which take any rank. */
#define CPU_OVERRIDES_MAX_RANK 8

static void put_varint(tpu_strbuf *sb, uint64_t v) {
  do {
    uint8_t byte = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) byte |= 0x80;
    tpu_strbuf_append(sb, &byte, 1);
  } while (v);
}

/* A length-delimited protobuf field. */
static void put_bytes_field(tpu_strbuf *sb, int field, const void *data, size_t n) {
  put_varint(sb, (uint64_t)field << 3 | 2);
  put_varint(sb, n);
  tpu_strbuf_append(sb, data, n);
}

/* The options of a program of |num_replicas| replicas (<= 1: kCompileOptions):
 * executable_build_options (field 3) {num_replicas (4): n, num_partitions
 * (5): 1}, not portable: XLA's default device assignment puts replica i on
 * device i. */
static void put_build_options(tpu_strbuf *out, int num_replicas) {
  if (num_replicas <= 1) {
    tpu_strbuf_append(out, kCompileOptions, sizeof kCompileOptions);
    return;
  }
  tpu_strbuf build = TPU_STRBUF_INIT;
  put_varint(&build, 4 << 3 | 0);
  put_varint(&build, (uint64_t)num_replicas);
  put_varint(&build, 5 << 3 | 0);
  put_varint(&build, 1);
  put_bytes_field(out, 3, build.data, build.len);
  if (build.failed) out->failed = true;
  tpu_strbuf_release(&build);
}

/* The build options plus one env_option_overrides entry (field 7:
 * map<string, OptionOverrideProto {string_field = 1}>) per override not in
 * |dropped|. */
static tpu_status_t cpu_compile_options(unsigned dropped, int num_replicas, tpu_strbuf *out) {
  tpu_strbuf_clear(out);
  put_build_options(out, num_replicas);
  for (size_t i = 0; i < NUM_CPU_OVERRIDES; i++) {
    if (dropped & 1u << i) continue;
    tpu_strbuf value = TPU_STRBUF_INIT, entry = TPU_STRBUF_INIT;
    const cpu_override *o = &kCpuOverrides[i];
    if (o->string_value != NULL) {
      put_bytes_field(&value, 1, o->string_value, strlen(o->string_value));
    } else {
      put_varint(&value, 2 << 3 | 0); /* bool_field, varint */
      put_varint(&value, o->bool_value);
    }
    put_bytes_field(&entry, 1, o->name, strlen(o->name));
    put_bytes_field(&entry, 2, value.data, value.len);
    put_bytes_field(out, 7, entry.data, entry.len);
    if (value.failed || entry.failed) out->failed = true;
    tpu_strbuf_release(&value);
    tpu_strbuf_release(&entry);
  }
  return tpu_strbuf_status(out);
}

static tpu_status_t from_pjrt(const PJRT_Api *api, PJRT_Error *err, const char *what) {
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
  if (pjrt_code == TPU_PJRT_CODE_RESOURCE_EXHAUSTED) code = TPU_ERR_OUT_OF_MEMORY;
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

/* Calls |slot| with |args| when the plugin provides it (and this process may
 * call the plugin). */
#define CALL(api, slot, args, what)                                                        \
  (tpu_runtime_in_forked_child() ? tpu_runtime_check_fork()                                \
   : TPU_PJRT_HAS(api, slot)                                                               \
       ? from_pjrt((api), (api)->slot(args), (what))                                       \
       : tpu_status_new(TPU_ERR_UNAVAILABLE, "%s: the PJRT plugin does not provide %s",    \
                        (what), #slot))

static tpu_status_t dup_n(const char *s, size_t n, char **out) {
  TPU_RETURN_IF_ERROR(tpu_alloc(n + 1, (void **)out));
  memcpy(*out, s, n);
  (*out)[n] = '\0';
  return NULL;
}

static void event_destroy(const PJRT_Api *api, PJRT_Event *ev) {
  if (ev == NULL) return;
  PJRT_Event_Destroy_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Event_Destroy_Args, event),
                               .event = ev};
  tpu_status_free(CALL(api, PJRT_Event_Destroy, &a, "destroying an event"));
}

/* Waits for |ev| and destroys it. */
static tpu_status_t event_await(const PJRT_Api *api, PJRT_Event *ev, const char *what) {
  if (ev == NULL) return NULL;
  PJRT_Event_Await_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Event_Await_Args, event),
                             .event = ev};
  tpu_status_t st = CALL(api, PJRT_Event_Await, &a, what);
  event_destroy(api, ev);
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
  if (strcmp(rt->platform_name, "cpu") == 0) {
    rt->cpu_overrides = true;
    TPU_GOTO_IF_ERROR(st, cpu_compile_options(0, 1, &rt->compile_options), fail);
  } else {
    tpu_strbuf_append(&rt->compile_options, kCompileOptions, sizeof kCompileOptions);
    TPU_GOTO_IF_ERROR(st, tpu_strbuf_status(&rt->compile_options), fail);
  }

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
    free(rt->pending[i].events);
    free(rt->kinds[i]);
  }
  if (rt->client != NULL) {
    PJRT_Client_Destroy_Args d = {.struct_size = TPU_PJRT_SIZE(PJRT_Client_Destroy_Args, client),
                                  .client = rt->client};
    tpu_status_free(CALL(rt->api, PJRT_Client_Destroy, &d, "destroying the client"));
  }
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

static tpu_status_t check_device(const tpu_runtime *rt, int device) {
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
  TPU_RETURN_IF_ERROR(check_device(rt, device));
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
  TPU_RETURN_IF_ERROR(check_device(rt, device));
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
  event_destroy(rt->api, a.done_with_host_buffer);
  tpu_stats_add(TPU_STAT_H2D_BYTES, dense_bytes(dtype, dims, rank));
  *out_buf = (tpu_buffer *)a.buffer;
  return NULL;
}

tpu_status_t tpu_buffer_uninitialized(tpu_runtime *rt, int device, tpu_dtype_t dtype,
                                      const int64_t *dims, int rank, tpu_buffer **out_buf) {
  *out_buf = NULL;
  TPU_RETURN_IF_ERROR(check_device(rt, device));
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
  TPU_RETURN_IF_ERROR(CALL(rt->api, PJRT_Buffer_ToHostBuffer, &a, "copying a tensor to the host"));
  TPU_RETURN_IF_ERROR(event_await(rt->api, a.event, "copying a tensor to the host"));
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
  return event_await(rt->api, a.event, "computing a tensor");
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

void tpu_buffer_destroy(tpu_runtime *rt, tpu_buffer *buf) {
  if (buf == NULL) return;
  PJRT_Buffer_Destroy_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Buffer_Destroy_Args, buffer),
                                .buffer = (PJRT_Buffer *)buf};
  tpu_status_free(CALL(rt->api, PJRT_Buffer_Destroy, &a, "releasing a buffer"));
}

/* --- executables -------------------------------------------------------- */

static tpu_status_t wrap_loaded(tpu_runtime *rt, PJRT_LoadedExecutable *loaded,
                                tpu_executable **out_exe) {
  tpu_executable *exe = NULL;
  tpu_status_t st = NULL;
  TPU_GOTO_IF_ERROR(st, tpu_alloc_zeroed(1, sizeof *exe, (void **)&exe), fail);
  exe->exe = loaded;
  PJRT_LoadedExecutable_GetExecutable_Args g = {
      .struct_size = TPU_PJRT_SIZE(PJRT_LoadedExecutable_GetExecutable_Args, executable),
      .loaded_executable = loaded};
  TPU_GOTO_IF_ERROR(st, CALL(rt->api, PJRT_LoadedExecutable_GetExecutable, &g, "inspecting a program"),
                    fail);
  PJRT_Executable_NumOutputs_Args n = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Executable_NumOutputs_Args, num_outputs),
      .executable = g.executable};
  st = CALL(rt->api, PJRT_Executable_NumOutputs, &n, "inspecting a program");
  PJRT_Executable_Destroy_Args d = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Executable_Destroy_Args, executable),
      .executable = g.executable};
  tpu_status_free(CALL(rt->api, PJRT_Executable_Destroy, &d, "inspecting a program"));
  if (st != NULL) goto fail;
  exe->num_outputs = n.num_outputs;
  *out_exe = exe;
  return NULL;

fail:
  free(exe);
  PJRT_LoadedExecutable_Destroy_Args ld = {
      .struct_size = TPU_PJRT_SIZE(PJRT_LoadedExecutable_Destroy_Args, executable),
      .executable = loaded};
  tpu_status_free(CALL(rt->api, PJRT_LoadedExecutable_Destroy, &ld, "releasing a program"));
  return st;
}

void tpu_compile_options_init(tpu_compile_options *o) {
  *o = (tpu_compile_options){.max_rank = 0, .name = NULL, .num_replicas = 1};
}

tpu_status_t tpu_runtime_compile_options_for(tpu_runtime *rt, const tpu_compile_options *options,
                                             tpu_strbuf *out) {
  const int num_replicas = options != NULL ? options->num_replicas : 1;
  if (!rt->cpu_overrides) {
    tpu_strbuf_clear(out);
    put_build_options(out, num_replicas);
    return tpu_strbuf_status(out);
  }
  unsigned left_out = 0;
  if (options != NULL && options->max_rank > CPU_OVERRIDES_MAX_RANK)
    for (size_t i = 0; i < NUM_CPU_OVERRIDES; i++)
      if (kCpuOverrides[i].ynn) left_out |= 1u << i;
  pthread_mutex_lock(&rt->lock);
  left_out |= rt->dropped_overrides;
  pthread_mutex_unlock(&rt->lock);
  return cpu_compile_options(left_out, num_replicas, out);
}

tpu_status_t tpu_executable_compile(tpu_runtime *rt, const char *mlir, size_t size,
                                    const tpu_compile_options *options, tpu_executable **out_exe) {
  *out_exe = NULL;
  PJRT_Program program = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Program, format_size),
      .code = (char *)mlir,
      .code_size = size,
      .format = "mlir",
      .format_size = 4,
  };
  PJRT_Client_Compile_Args a = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Client_Compile_Args, executable),
      .client = rt->client,
      .program = &program,
  };
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int64_t trace_start = tpu_profile_enabled() ? tpu_profile_now_ns() : 0;
  const char *name = options != NULL && options->name != NULL ? options->name : "program";
  tpu_strbuf proto = TPU_STRBUF_INIT;
  tpu_status_t st = NULL;
  for (;;) {
    pthread_mutex_lock(&rt->lock);
    unsigned dropped = rt->dropped_overrides;
    pthread_mutex_unlock(&rt->lock);
    TPU_GOTO_IF_ERROR(st, tpu_runtime_compile_options_for(rt, options, &proto), done);
    a.compile_options = proto.data;
    a.compile_options_size = proto.len;
    st = CALL(rt->api, PJRT_Client_Compile, &a, "XLA compilation failed");
    size_t refused = NUM_CPU_OVERRIDES;
    for (size_t i = 0; st != NULL && rt->cpu_overrides && i < NUM_CPU_OVERRIDES; i++)
      if (!(dropped & 1u << i) && strstr(tpu_status_message(st), kCpuOverrides[i].name) != NULL) refused = i;
    if (refused == NUM_CPU_OVERRIDES) break;
    /* An older plugin without the option: drop it for good and compile again. */
    tpu_status_free(st);
    st = NULL;
    pthread_mutex_lock(&rt->lock);
    rt->dropped_overrides |= dropped | 1u << refused;
    st = cpu_compile_options(rt->dropped_overrides, 1, &rt->compile_options);
    pthread_mutex_unlock(&rt->lock);
    if (st != NULL) goto done;
  }
done:
  tpu_strbuf_release(&proto);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  tpu_stats_add(TPU_STAT_COMPILE_NS,
                (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec)));
  if (trace_start != 0) tpu_profile_span(TPU_PROFILE_COMPILE, name, st != NULL ? "miss (failed)" : "miss", -1, trace_start, tpu_profile_now_ns());
  if (st != NULL) return st;
  TPU_RETURN_IF_ERROR(wrap_loaded(rt, a.executable, out_exe));
  tpu_executable_set_name(*out_exe, name);
  return NULL;
}

size_t tpu_executable_num_outputs(const tpu_executable *exe) { return exe->num_outputs; }

const char *tpu_executable_name(const tpu_executable *exe) { return exe->name[0] ? exe->name : "program"; }

void tpu_executable_set_name(tpu_executable *exe, const char *name) {
  snprintf(exe->name, sizeof exe->name, "%s", name != NULL ? name : "");
}

tpu_status_t tpu_executable_serialize(tpu_runtime *rt, const tpu_executable *exe, char **out_bytes,
                                      size_t *out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  PJRT_LoadedExecutable_GetExecutable_Args g = {
      .struct_size = TPU_PJRT_SIZE(PJRT_LoadedExecutable_GetExecutable_Args, executable),
      .loaded_executable = exe->exe};
  TPU_RETURN_IF_ERROR(
      CALL(rt->api, PJRT_LoadedExecutable_GetExecutable, &g, "serializing a program"));
  PJRT_Executable_Serialize_Args s = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Executable_Serialize_Args, serialized_executable_deleter),
      .executable = g.executable};
  tpu_status_t st = CALL(rt->api, PJRT_Executable_Serialize, &s, "serializing a program");
  if (st == NULL) {
    st = tpu_alloc(s.serialized_bytes_size, (void **)out_bytes);
    if (st == NULL) {
      memcpy(*out_bytes, s.serialized_bytes, s.serialized_bytes_size);
      *out_size = s.serialized_bytes_size;
    }
    if (s.serialized_executable_deleter != NULL)
      s.serialized_executable_deleter(s.serialized_executable);
  }
  PJRT_Executable_Destroy_Args d = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Executable_Destroy_Args, executable),
      .executable = g.executable};
  tpu_status_free(CALL(rt->api, PJRT_Executable_Destroy, &d, "serializing a program"));
  return st;
}

tpu_status_t tpu_executable_deserialize(tpu_runtime *rt, const char *bytes, size_t size,
                                        tpu_executable **out_exe) {
  *out_exe = NULL;
  PJRT_Executable_DeserializeAndLoad_Args a = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Executable_DeserializeAndLoad_Args,
                                   overridden_serialized_compile_options_size),
      .client = rt->client,
      .serialized_executable = bytes,
      .serialized_executable_size = size,
  };
  TPU_RETURN_IF_ERROR(
      CALL(rt->api, PJRT_Executable_DeserializeAndLoad, &a, "loading a cached program"));
  return wrap_loaded(rt, a.loaded_executable, out_exe);
}

void tpu_executable_destroy(tpu_runtime *rt, tpu_executable *exe) {
  if (exe == NULL) return;
  PJRT_LoadedExecutable_Destroy_Args d = {
      .struct_size = TPU_PJRT_SIZE(PJRT_LoadedExecutable_Destroy_Args, executable),
      .executable = exe->exe};
  tpu_status_free(CALL(rt->api, PJRT_LoadedExecutable_Destroy, &d, "releasing a program"));
  free(exe);
}

/* --- pending launches ----------------------------------------------------- */

static bool event_ready(const PJRT_Api *api, PJRT_Event *ev) {
  PJRT_Event_IsReady_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Event_IsReady_Args, is_ready),
                               .event = ev};
  tpu_status_t st = CALL(api, PJRT_Event_IsReady, &a, "polling");
  if (st != NULL) {
    tpu_status_free(st);
    return false;
  }
  return a.is_ready;
}

/* Records the first asynchronous error; frees the others. Lock held. */
static void note_async_error(tpu_runtime *rt, tpu_status_t st) {
  if (st == NULL) return;
  if (rt->async_error == NULL) rt->async_error = st;
  else tpu_status_free(st);
}

/* Adds |ev| to |device|'s in-flight list, dropping finished launches from the
 * front and waiting for the oldest when too many are in flight. */
static void pending_push(tpu_runtime *rt, int device, PJRT_Event *ev) {
  pthread_mutex_lock(&rt->lock);
  pending_list *p = &rt->pending[device];
  while (p->count > 0) {
    PJRT_Event *front = p->events[p->head];
    if (p->count < TPU_MAX_PENDING && !event_ready(rt->api, front)) break;
    note_async_error(rt, event_await(rt->api, front, "a program failed"));
    p->head = (p->head + 1) % p->cap;
    p->count--;
  }
  if (p->count == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 64;
    PJRT_Event **ev2 = tpu_alloc_or_null(cap * sizeof *ev2);
    if (ev2 == NULL) {
      pthread_mutex_unlock(&rt->lock);
      note_async_error(rt, event_await(rt->api, ev, "a program failed"));
      return;
    }
    for (size_t i = 0; i < p->count; i++) ev2[i] = p->events[(p->head + i) % p->cap];
    free(p->events);
    p->events = ev2;
    p->cap = cap;
    p->head = 0;
  }
  p->events[(p->head + p->count) % p->cap] = ev;
  p->count++;
  pthread_mutex_unlock(&rt->lock);
}

tpu_status_t tpu_runtime_synchronize(tpu_runtime *rt, int device) {
  /* Before the lock, which a launching thread of the parent may have held. */
  TPU_RETURN_IF_ERROR(tpu_runtime_check_fork());
  pthread_mutex_lock(&rt->lock);
  for (int d = 0; d < rt->num_devices; d++) {
    if (device >= 0 && d != device) continue;
    pending_list *p = &rt->pending[d];
    while (p->count > 0) {
      note_async_error(rt, event_await(rt->api, p->events[p->head], "a program failed"));
      p->head = (p->head + 1) % p->cap;
      p->count--;
    }
  }
  tpu_status_t st = rt->async_error;
  rt->async_error = NULL;
  pthread_mutex_unlock(&rt->lock);
  return st;
}

/* --- markers --------------------------------------------------------------- */

struct tpu_marker {
  const PJRT_Api *api;
  pthread_mutex_t lock;
  pthread_cond_t reached;
  int refs;
  bool done;
  int64_t made_ns, reached_ns;
};

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void marker_reach(tpu_marker *m) {
  pthread_mutex_lock(&m->lock);
  m->reached_ns = now_ns();
  m->done = true;
  pthread_cond_broadcast(&m->reached);
  pthread_mutex_unlock(&m->lock);
}

/* The callback owns |error|; the launch's error reaches the user through
 * synchronize, so it is only freed here. */
static void marker_on_ready(PJRT_Error *error, void *arg) {
  tpu_marker *m = arg;
  if (error != NULL) {
    PJRT_Error_Destroy_Args d = {.struct_size = TPU_PJRT_SIZE(PJRT_Error_Destroy_Args, error), .error = error};
    m->api->PJRT_Error_Destroy(&d);
  }
  marker_reach(m);
  tpu_marker_release(m);
}

tpu_marker *tpu_marker_record(tpu_runtime *rt, int device) {
  tpu_marker *m = tpu_alloc_or_null(sizeof *m);
  if (m == NULL) return NULL;
  memset(m, 0, sizeof *m);
  pthread_mutex_init(&m->lock, NULL);
  pthread_cond_init(&m->reached, NULL);
  m->api = rt->api;
  m->refs = 1;
  m->made_ns = now_ns();
  if (tpu_runtime_in_forked_child()) { /* this process launched nothing */
    marker_reach(m);
    return m;
  }
  /* The newest launch still in flight finishes after all earlier ones (one
   * in-order queue per device); programs run inline were done at launch.
   * The lock keeps the event alive while the callback is attached. */
  pthread_mutex_lock(&rt->lock);
  PJRT_Event *last = NULL;
  if (device >= 0 && device < rt->num_devices && rt->pending[device].count > 0) {
    pending_list *p = &rt->pending[device];
    last = p->events[(p->head + p->count - 1) % p->cap];
  }
  bool waiting = false;
  if (last != NULL && TPU_PJRT_HAS(rt->api, PJRT_Event_OnReady) && !event_ready(rt->api, last)) {
    m->refs++;
    PJRT_Event_OnReady_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Event_OnReady_Args, user_arg),
                                 .event = last, .callback = marker_on_ready, .user_arg = m};
    PJRT_Error *err = rt->api->PJRT_Event_OnReady(&a);
    waiting = err == NULL;
    if (!waiting) {
      m->refs--;
      tpu_status_free(from_pjrt(rt->api, err, "watching a launch"));
    }
  }
  pthread_mutex_unlock(&rt->lock);
  if (!waiting) marker_reach(m);
  return m;
}

bool tpu_marker_done(tpu_marker *m) {
  pthread_mutex_lock(&m->lock);
  bool done = m->done;
  pthread_mutex_unlock(&m->lock);
  return done;
}

void tpu_marker_wait(tpu_marker *m) {
  pthread_mutex_lock(&m->lock);
  while (!m->done) pthread_cond_wait(&m->reached, &m->lock);
  pthread_mutex_unlock(&m->lock);
}

int64_t tpu_marker_time_ns(tpu_marker *m) {
  pthread_mutex_lock(&m->lock);
  int64_t t = m->reached_ns > m->made_ns ? m->reached_ns : m->made_ns;
  pthread_mutex_unlock(&m->lock);
  return t;
}

void tpu_marker_release(tpu_marker *m) {
  if (m == NULL) return;
  pthread_mutex_lock(&m->lock);
  bool last = --m->refs == 0;
  pthread_mutex_unlock(&m->lock);
  if (!last) return;
  pthread_mutex_destroy(&m->lock);
  pthread_cond_destroy(&m->reached);
  free(m);
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
  return from_pjrt(rt->api, ffi->register_handler(&a), "registering an FFI handler");
}

bool tpu_runtime_has_profiler_extension(const tpu_runtime *rt) {
  for (const PJRT_Extension_Base *e = rt->api->extension_start; e != NULL; e = e->next)
    if (e->type == TPU_PJRT_EXTENSION_PROFILER) return true;
  return false;
}

bool tpu_runtime_runs_small_programs_inline(const tpu_runtime *rt) {
  return strcmp(rt->platform_name, "cpu") == 0;
}

/* --- tracing ----------------------------------------------------------------
 * A traced launch always asks for the completion event: its callback closes
 * the device span, whether the plugin ran the program inline (the event is
 * ready at once) or on its threads. The event then joins the pending list,
 * as a tracked launch's does. */
typedef struct trace_wait {
  const PJRT_Api *api;
  uint64_t span;
} trace_wait;

static void trace_on_ready(PJRT_Error *error, void *arg) {
  trace_wait *w = arg;
  int64_t now = tpu_profile_now_ns();
  if (error != NULL) {
    PJRT_Error_Destroy_Args d = {.struct_size = TPU_PJRT_SIZE(PJRT_Error_Destroy_Args, error), .error = error};
    w->api->PJRT_Error_Destroy(&d);
  }
  tpu_profile_close(w->span, now);
  free(w);
}

static tpu_status_t traced_execute(tpu_runtime *rt, tpu_executable *exe, int device,
                                   PJRT_LoadedExecutable_Execute_Args *a, int64_t *keep_heap) {
  int64_t t0 = tpu_profile_now_ns();
  tpu_status_t st = CALL(rt->api, PJRT_LoadedExecutable_Execute, a, "launching a program");
  int64_t t1 = tpu_profile_now_ns();
  free(keep_heap);
  tpu_profile_span(TPU_PROFILE_EXECUTE, tpu_executable_name(exe), st != NULL ? "failed" : "", device, t0, t1);
  if (st != NULL) return st;
  tpu_stats_add(TPU_STAT_EXECUTIONS, 1);
  PJRT_Event *done = *a->device_complete_events;
  if (done == NULL) return NULL;
  uint64_t span = tpu_profile_open(TPU_PROFILE_DEVICE, tpu_executable_name(exe), "", device, t0);
  trace_wait *w = span != 0 && TPU_PJRT_HAS(rt->api, PJRT_Event_OnReady) ? tpu_alloc_or_null(sizeof *w) : NULL;
  if (w != NULL) {
    *w = (trace_wait){.api = rt->api, .span = span};
    PJRT_Event_OnReady_Args r = {.struct_size = TPU_PJRT_SIZE(PJRT_Event_OnReady_Args, user_arg),
                                 .event = done, .callback = trace_on_ready, .user_arg = w};
    PJRT_Error *err = rt->api->PJRT_Event_OnReady(&r);
    if (err != NULL) {
      tpu_status_free(from_pjrt(rt->api, err, "watching a launch"));
      free(w);
      w = NULL;
    }
  }
  if (w == NULL) tpu_profile_close(span, t1); /* no completion to wait for: the launch's end */
  pending_push(rt, device, done);
  return NULL;
}

tpu_status_t tpu_executable_execute_replicas(tpu_runtime *rt, tpu_executable *exe, int num_replicas,
                                             tpu_buffer *const *const *args, size_t num_args,
                                             tpu_buffer **const *outs) {
  if (num_replicas < 1 || num_replicas > rt->num_devices)
    return tpu_status_new(TPU_ERR_VALUE, "%d replicas, but the client has %d devices", num_replicas,
                          rt->num_devices);
  PJRT_ExecuteOptions options = {.struct_size = TPU_PJRT_SIZE(PJRT_ExecuteOptions, incarnation_ids)};
  PJRT_LoadedExecutable_Execute_Args a = {
      .struct_size = TPU_PJRT_SIZE(PJRT_LoadedExecutable_Execute_Args, execute_device),
      .executable = exe->exe,
      .options = &options,
      .argument_lists = (PJRT_Buffer *const *const *)args,
      .num_devices = (size_t)num_replicas,
      .num_args = num_args,
      .output_lists = (PJRT_Buffer **const *)outs,
  };
  for (int r = 0; r < num_replicas; r++)
    for (size_t i = 0; i < exe->num_outputs; i++) outs[r][i] = NULL;
  int64_t t0 = tpu_profile_enabled() ? tpu_profile_now_ns() : 0;
  tpu_status_t st = CALL(rt->api, PJRT_LoadedExecutable_Execute, &a, "launching a replicated program");
  if (t0 != 0)
    tpu_profile_span(TPU_PROFILE_EXECUTE, tpu_executable_name(exe), st != NULL ? "failed" : "", -1, t0,
                     tpu_profile_now_ns());
  if (st == NULL) tpu_stats_add(TPU_STAT_EXECUTIONS, 1);
  return st;
}

tpu_status_t tpu_executable_execute(tpu_runtime *rt, tpu_executable *exe, int device,
                                    tpu_buffer *const *args, size_t num_args, const bool *donate,
                                    bool track, tpu_buffer **outs) {
  TPU_RETURN_IF_ERROR(check_device(rt, device));
  int64_t keep_small[32];
  int64_t *keep = keep_small;
  size_t num_keep = 0;
  if (donate != NULL) {
    if (num_args > 32) {
      TPU_RETURN_IF_ERROR(tpu_alloc(num_args * sizeof *keep, (void **)&keep));
    }
    for (size_t i = 0; i < num_args; i++)
      if (!donate[i]) keep[num_keep++] = (int64_t)i;
  }
  PJRT_ExecuteOptions options = {
      .struct_size = TPU_PJRT_SIZE(PJRT_ExecuteOptions, incarnation_ids),
      .non_donatable_input_indices = donate != NULL ? keep : NULL,
      .num_non_donatable_input_indices = num_keep,
  };
  PJRT_Buffer *const *arg_list = (PJRT_Buffer *const *)args;
  PJRT_Buffer **out_list = (PJRT_Buffer **)outs;
  PJRT_Event *done = NULL;
  PJRT_LoadedExecutable_Execute_Args a = {
      .struct_size = TPU_PJRT_SIZE(PJRT_LoadedExecutable_Execute_Args, execute_device),
      .executable = exe->exe,
      .options = &options,
      .argument_lists = &arg_list,
      .num_devices = 1,
      .num_args = num_args,
      .output_lists = &out_list,
      .device_complete_events = track ? &done : NULL,
      .execute_device = rt->devices[device],
  };
  for (size_t i = 0; i < exe->num_outputs; i++) outs[i] = NULL;
  if (tpu_profile_enabled()) {
    a.device_complete_events = &done;
    return traced_execute(rt, exe, device, &a, keep != keep_small ? keep : NULL);
  }
  tpu_status_t st = CALL(rt->api, PJRT_LoadedExecutable_Execute, &a, "launching a program");
  if (keep != keep_small) free(keep);
  if (st != NULL) return st;
  tpu_stats_add(TPU_STAT_EXECUTIONS, 1);
  if (done != NULL) pending_push(rt, device, done);
  return NULL;
}
