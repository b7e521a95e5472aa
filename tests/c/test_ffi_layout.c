/* Our XLA FFI declarations (runtime/xla_ffi.h) against the real c_api.h:
 * every struct XLA hands our handlers, and every API slot they call, at the
 * offsets XLA uses. With jaxlib's header (CMake's TORCHTPU_FFI_HEADER_DIR) the
 * numbers come from it; without, from the table below, taken from that
 * header (FFI API 0.3, jaxlib 0.10.2), which the 0.2 layout the CPU plugin
 * speaks shares. */
#include <stddef.h>

#include "check.h"
#include "pjrt_layout.h"
#include "runtime/xla_ffi.h"

#define SIZE(type, last) {#type, (long)TPU_FFI_SIZE(type, last)},
#define FIELD(type, field) {#type "." #field, (long)offsetof(type, field)},
static const tpu_layout_entry ours[] = {
#include "ffi_layout_list.h"
};

#ifdef TPU_HAVE_REAL_FFI_HEADER
extern const tpu_layout_entry tpu_ffi_layout_real[];
extern const int tpu_ffi_layout_real_count;
#define REAL tpu_ffi_layout_real
#define REAL_COUNT tpu_ffi_layout_real_count
#define SOURCE "c_api.h"
#else
static const tpu_layout_entry recorded[] = {
    {"XLA_FFI_Extension_Base", 24}, {"XLA_FFI_Api_Version", 24}, {"XLA_FFI_Error_Create_Args", 28},
    {"XLA_FFI_Buffer", 48}, {"XLA_FFI_Buffer.dtype", 16}, {"XLA_FFI_Buffer.data", 24},
    {"XLA_FFI_Buffer.rank", 32}, {"XLA_FFI_Buffer.dims", 40}, {"XLA_FFI_Args", 40}, {"XLA_FFI_Rets", 40},
    {"XLA_FFI_Attrs", 48}, {"XLA_FFI_Attrs.types", 24}, {"XLA_FFI_Attrs.names", 32},
    {"XLA_FFI_Attrs.attrs", 40}, {"XLA_FFI_ByteSpan.len", 8}, {"XLA_FFI_Scalar.value", 8},
    {"XLA_FFI_CallFrame.api", 16}, {"XLA_FFI_CallFrame.ctx", 24}, {"XLA_FFI_CallFrame.stage", 32},
    {"XLA_FFI_CallFrame.args", 40}, {"XLA_FFI_CallFrame.rets", 80}, {"XLA_FFI_CallFrame.attrs", 120},
    {"XLA_FFI_Metadata.api_version", 8}, {"XLA_FFI_Metadata.traits", 32},
    {"XLA_FFI_Metadata_Extension.metadata", 24}, {"XLA_FFI_ThreadPool_Schedule_Args", 40},
    {"XLA_FFI_ThreadPool_NumThreads_Args", 32}, {"XLA_FFI_Api.api_version", 16},
    {"XLA_FFI_Api.XLA_FFI_Error_Create", 48}, {"XLA_FFI_Api.XLA_FFI_ThreadPool_Schedule", 136},
    {"XLA_FFI_Api.XLA_FFI_ThreadPool_NumThreads", 144},
};
#define REAL recorded
#define REAL_COUNT ((int)(sizeof recorded / sizeof recorded[0]))
#define SOURCE "the recorded table"
#endif

int main(void) {
  int n = (int)(sizeof ours / sizeof ours[0]);
  CHECK(n == REAL_COUNT);
  for (int i = 0; i < n && i < REAL_COUNT; i++) {
    CHECK(strcmp(ours[i].name, REAL[i].name) == 0);
    if (ours[i].value != REAL[i].value) {
      fprintf(stderr, "layout mismatch: %s is %ld in our declarations, %ld in %s\n", ours[i].name, ours[i].value,
              REAL[i].value, SOURCE);
      check_failures++;
    }
  }
  fprintf(stderr, "%s %d FFI layout facts checked against %s\n", check_failures ? "FAIL" : "ok  ", n, SOURCE);
  return check_failures ? 1 : 0;
}
