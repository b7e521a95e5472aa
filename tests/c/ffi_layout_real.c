/* jaxlib's xla/ffi/api/c_api.h side of the FFI layout test (compiled only
 * when CMake is given TORCHTPU_FFI_HEADER_DIR). Kept in its own translation
 * unit: it declares the same names as our runtime/xla_ffi.h. */
#include <stddef.h>

#include "pjrt_layout.h"
#include "xla/ffi/api/c_api.h"

#define SIZE(type, last) {#type, (long)type##_STRUCT_SIZE},
#define FIELD(type, field) {#type "." #field, (long)offsetof(type, field)},
const tpu_layout_entry tpu_ffi_layout_real[] = {
#include "ffi_layout_list.h"
};
const int tpu_ffi_layout_real_count = sizeof tpu_ffi_layout_real / sizeof tpu_ffi_layout_real[0];
