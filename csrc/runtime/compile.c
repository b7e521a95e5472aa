/* Compiling: the options every compile sends (with the CPU plugin's XLA
 * overrides, dropped for good when a plugin refuses one), compile,
 * serialize and load again, executables' lifetime. */

#include "runtime/runtime.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "runtime/internal.h"

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

tpu_status_t tpu_runtime_init_compile_options(tpu_runtime *rt) {
  rt->cpu_overrides = strcmp(rt->platform_name, "cpu") == 0;
  return tpu_runtime_compile_options_for(rt, NULL, &rt->compile_options);
}
