/* The status helpers: the annotating TPU_RETURN_IF_ERROR and its plain form,
 * tpu_status_join, and the allocation hook's count. */
#include <string.h>

#include "base/alloc.h"
#include "check.h"

static tpu_status_t fail_with(tpu_code_t code, const char *what) { return tpu_status_new(code, "%s", what); }

static tpu_status_t plain(tpu_status_t inner) {
  TPU_RETURN_IF_ERROR(inner);
  return NULL;
}

static int evaluated;
static const char *counted(const char *s) {
  evaluated++;
  return s;
}

static tpu_status_t annotated(tpu_status_t inner, const char *op) {
  TPU_RETURN_IF_ERROR(inner, "while compiling %s (%d)", counted(op), 7);
  return NULL;
}

static void test_return_if_error(void) {
  CHECK(plain(NULL) == NULL);
  tpu_status_t st = plain(fail_with(TPU_ERR_INDEX, "out of range"));
  CHECK(tpu_status_code(st) == TPU_ERR_INDEX);
  CHECK(strcmp(tpu_status_message(st), "out of range") == 0);
  tpu_status_free(st);

  evaluated = 0;
  CHECK(annotated(NULL, "aten::add") == NULL);
  CHECK(evaluated == 0); /* the context is formatted on failure only */
  st = annotated(fail_with(TPU_ERR_VALUE, "bad shape"), "aten::add");
  CHECK(tpu_status_code(st) == TPU_ERR_VALUE);
  CHECK(strcmp(tpu_status_message(st), "while compiling aten::add (7): bad shape") == 0);
  tpu_status_free(st);
}

static void test_join(void) {
  CHECK(tpu_status_join(NULL, NULL) == NULL);
  tpu_status_t a = fail_with(TPU_ERR_RUNTIME, "launch failed");
  CHECK(tpu_status_join(a, NULL) == a);
  CHECK(tpu_status_join(NULL, a) == a);
  tpu_status_t st = tpu_status_join(a, fail_with(TPU_ERR_OUT_OF_MEMORY, "cleanup failed"));
  CHECK(tpu_status_code(st) == TPU_ERR_RUNTIME);
  CHECK(strcmp(tpu_status_message(st), "launch failed; then: cleanup failed") == 0);
  tpu_status_free(st);
}

static void test_alloc_hook(void) {
  void *p[3] = {NULL, NULL, NULL};
  tpu_alloc_fail_nth(3);
  CHECK_OK(tpu_alloc(8, &p[0]));
  CHECK_OK(tpu_alloc_zeroed(2, 4, &p[1]));
  CHECK(!tpu_alloc_failure_injected());
  tpu_status_t st = tpu_realloc(&p[1], 64);
  CHECK(tpu_status_code(st) == TPU_ERR_OUT_OF_MEMORY);
  CHECK(p[1] != NULL); /* a failed resize leaves the block */
  tpu_status_free(st);
  CHECK(tpu_alloc_failure_injected());
  CHECK_OK(tpu_alloc(8, &p[2])); /* once */
  tpu_alloc_fail_nth(0);
  char *copy = NULL;
  CHECK_OK(tpu_strdup("abc", &copy));
  CHECK(strcmp(copy, "abc") == 0);
  for (int i = 0; i < 3; i++) tpu_free(p[i]);
  tpu_free(copy);
}

int main(void) {
  RUN(test_return_if_error);
  RUN(test_join);
  RUN(test_alloc_hook);
  return check_failures ? 1 : 0;
}
