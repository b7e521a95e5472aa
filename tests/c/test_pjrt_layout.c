/* Our PJRT declarations against the real pjrt_c_api.h: every args struct we
 * pass has the struct_size the plugin expects, and every PJRT_Api slot we read
 * sits at the same offset. Without the real header (no CPU plugin wheel at
 * configure time) the test fails unless TORCHTPU_NO_PJRT_HEADER=1. */
#include <stddef.h>

#include "check.h"
#include "pjrt_layout.h"
#include "runtime/pjrt_api.h"

#define SIZE(ours, real, last) {#real, (long)TPU_PJRT_SIZE(ours, last)},
#define FIELD(ours, real, field) {#real "." #field, (long)offsetof(ours, field)},
#define SLOT(name) {"PJRT_Api." #name, (long)offsetof(PJRT_Api, name)},
static const tpu_layout_entry ours[] = {
#include "pjrt_layout_list.h"
};

#ifdef TPU_HAVE_REAL_PJRT_HEADER
extern const tpu_layout_entry tpu_layout_real[];
extern const int tpu_layout_real_count;
#endif

int main(void) {
#ifdef TPU_HAVE_REAL_PJRT_HEADER
  int n = (int)(sizeof ours / sizeof ours[0]);
  CHECK(n == tpu_layout_real_count);
  for (int i = 0; i < n && i < tpu_layout_real_count; i++) {
    if (ours[i].value != tpu_layout_real[i].value) {
      fprintf(stderr, "layout mismatch: %s is %ld in our declarations, %ld in pjrt_c_api.h\n",
              ours[i].name, ours[i].value, tpu_layout_real[i].value);
      check_failures++;
    }
  }
  fprintf(stderr, "%s %d layout facts checked against pjrt_c_api.h\n", check_failures ? "FAIL" : "ok  ", n);
  return check_failures ? 1 : 0;
#else
  const char *skip = getenv("TORCHTPU_NO_PJRT_HEADER");
  fprintf(stderr, "no pjrt_c_api.h was given to CMake (TORCHTPU_PJRT_HEADER_DIR): layout unchecked\n");
  return skip && *skip == '1' ? 0 : 1;
#endif
}
