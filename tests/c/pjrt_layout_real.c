/* The plugin's own pjrt_c_api.h side of the layout test (compiled only when
 * CMake is given TORCHTPU_PJRT_HEADER_DIR). Kept in its own translation unit:
 * it declares the same names as our runtime/pjrt_api.h. */
#include <stddef.h>

#include "pjrt_c_api.h"
#include "pjrt_layout.h"

#define SIZE(ours, real, last) {#real, (long)real##_STRUCT_SIZE},
#define FIELD(ours, real, field) {#real "." #field, (long)offsetof(real, field)},
#define SLOT(name) {"PJRT_Api." #name, (long)offsetof(PJRT_Api, name)},
const tpu_layout_entry tpu_layout_real[] = {
#include "pjrt_layout_list.h"
};
const int tpu_layout_real_count = sizeof tpu_layout_real / sizeof tpu_layout_real[0];
