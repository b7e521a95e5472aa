/* Builder and view tests: programs built with the C builder are compiled and
 * run on the real plugin and compared with a reference computed here. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "check.h"
#include "hlo/builder.h"
#include "hlo/view.h"
#include "runtime/runtime.h"

static tpu_runtime *rt;

/* Compiles the builder's program returning |results| (telling the runtime
 * its highest rank, as the eager layer does), runs it on |inputs| and copies
 * output 0 to |out| (|out_size| bytes). */
static tpu_status_t run(tpu_hlo_builder *b, const tpu_hlo_value *results, int num_results,
                        tpu_buffer **inputs, int num_inputs, void *out, size_t out_size) {
  char *text = NULL;
  TPU_RETURN_IF_ERROR(tpu_hlo_finish(b, results, num_results, &text));
  tpu_compile_options options;
  tpu_compile_options_init(&options);
  options.max_rank = tpu_hlo_max_rank(b);
  tpu_executable *exe = NULL;
  tpu_status_t st = tpu_executable_compile(rt, text, strlen(text), &options, &exe);
  if (st != NULL) {
    st = tpu_status_annotate(st, "program:\n%s", text);
    free(text);
    return st;
  }
  free(text);
  tpu_buffer *outs[8] = {NULL};
  st = tpu_executable_execute(rt, exe, 0, inputs, (size_t)num_inputs, NULL, true, outs);
  if (st == NULL) st = tpu_buffer_to_host(rt, outs[0], out, out_size);
  for (size_t i = 0; i < tpu_executable_num_outputs(exe); i++) tpu_buffer_destroy(rt, outs[i]);
  tpu_executable_destroy(rt, exe);
  return st;
}

static void test_constants_exact(void) {
  tpu_hlo_builder *b = NULL;
  CHECK_OK(tpu_hlo_builder_create(&b));
  /* NaN, infinities, -0.0 and a value that needs exact bits. */
  double vals[5] = {NAN, INFINITY, -INFINITY, -0.0, 0.1};
  tpu_hlo_value parts[5];
  int64_t one = 1;
  for (int i = 0; i < 5; i++)
    parts[i] = tpu_hlo_reshape(b, tpu_hlo_scalar_f64(b, TPU_F32, vals[i]), 1, &one);
  tpu_hlo_value all = tpu_hlo_concatenate(b, parts, 5, 0);
  float got[5];
  CHECK_OK(run(b, &all, 1, NULL, 0, got, sizeof got));
  CHECK(isnan(got[0]) && got[1] == INFINITY && got[2] == -INFINITY);
  CHECK(got[3] == 0.0f && signbit(got[3]));
  CHECK(got[4] == 0.1f);

  tpu_hlo_builder_reset(b);
  tpu_hlo_value bf = tpu_hlo_convert(b, tpu_hlo_scalar_f64(b, TPU_BF16, 1.00390625), TPU_F32);
  float g;
  CHECK_OK(run(b, &bf, 1, NULL, 0, &g, sizeof g));
  CHECK(g == 1.0f || g == 1.0078125f); /* 1 + 2^-8 is a tie: round to even = 1.0 */
  CHECK(g == 1.0f);

  tpu_hlo_builder_reset(b);
  tpu_hlo_value h = tpu_hlo_convert(b, tpu_hlo_scalar_f64(b, TPU_F16, 65504.0), TPU_F32);
  CHECK_OK(run(b, &h, 1, NULL, 0, &g, sizeof g));
  CHECK(g == 65504.0f);

  tpu_hlo_builder_reset(b);
  tpu_hlo_value i8 = tpu_hlo_convert(b, tpu_hlo_scalar_i64(b, TPU_S8, 1000), TPU_S64);
  int64_t gi;
  CHECK_OK(run(b, &i8, 1, NULL, 0, &gi, sizeof gi));
  CHECK(gi == (int8_t)1000);
  tpu_hlo_builder_destroy(b);
}

static void test_sticky_errors(void) {
  tpu_hlo_builder *b = NULL;
  CHECK_OK(tpu_hlo_builder_create(&b));
  int64_t d3 = 3, d4 = 4;
  tpu_hlo_type t3 = tpu_hlo_make_type(TPU_F32, 1, &d3), t4 = tpu_hlo_make_type(TPU_F32, 1, &d4);
  tpu_hlo_value a = tpu_hlo_param(b, &t3, -1), c = tpu_hlo_param(b, &t4, -1);
  tpu_hlo_value bad = tpu_hlo_binary(b, TPU_HLO_ADD, a, c);
  CHECK(bad == TPU_HLO_NONE);
  CHECK(tpu_hlo_failed(b));
  CHECK(tpu_hlo_unary(b, TPU_HLO_EXP, a) == TPU_HLO_NONE); /* sticky */
  char *text = NULL;
  tpu_status_t st = tpu_hlo_finish(b, &a, 1, &text);
  CHECK(st != NULL && text == NULL);
  CHECK(strstr(tpu_status_message(st), "differ") != NULL);
  tpu_status_free(st);
  tpu_hlo_builder_reset(b);
  CHECK(!tpu_hlo_failed(b));
  tpu_hlo_builder_destroy(b);
}

static void test_reduce_sort_dot(void) {
  tpu_hlo_builder *b = NULL;
  CHECK_OK(tpu_hlo_builder_create(&b));
  float x[6] = {3, -1, 2, 5, 0, -4};
  int64_t d23[2] = {2, 3}, d6 = 6;
  tpu_buffer *in = NULL;
  CHECK_OK(tpu_buffer_from_host(rt, 0, x, TPU_F32, d23, 2, &in));
  tpu_hlo_type t = tpu_hlo_make_type(TPU_F32, 2, d23);

  tpu_hlo_value p = tpu_hlo_param(b, &t, -1);
  int64_t dim1 = 1;
  tpu_hlo_value s = tpu_hlo_reduce_simple(b, p, tpu_hlo_scalar_f64(b, TPU_F32, 0), TPU_HLO_ADD, &dim1, 1);
  float sums[2];
  CHECK_OK(run(b, &s, 1, &in, 1, sums, sizeof sums));
  CHECK(sums[0] == 4 && sums[1] == 1);

  tpu_hlo_builder_reset(b);
  p = tpu_hlo_param(b, &t, -1);
  tpu_hlo_type sc = tpu_hlo_make_type(TPU_F32, 0, NULL);
  tpu_hlo_type ts[2] = {sc, sc};
  tpu_hlo_value args[2];
  tpu_hlo_region cmp;
  tpu_hlo_region_begin(b, 2, ts, args);
  tpu_hlo_value lt = tpu_hlo_compare(b, TPU_HLO_LT, args[0], args[1]);
  tpu_hlo_region_end(b, &lt, 1, &cmp);
  tpu_hlo_value flat = tpu_hlo_reshape(b, p, 1, &d6);
  tpu_hlo_value sorted;
  tpu_hlo_sort(b, &flat, 1, 0, true, &cmp, &sorted);
  float srt[6];
  CHECK_OK(run(b, &sorted, 1, &in, 1, srt, sizeof srt));
  CHECK(srt[0] == -4 && srt[5] == 5 && srt[2] == 0);

  tpu_hlo_builder_reset(b);
  p = tpu_hlo_param(b, &t, -1);
  tpu_hlo_dot_dims dd;
  memset(&dd, 0, sizeof dd);
  dd.num_contract = 1;
  dd.lhs_contract[0] = 1;
  dd.rhs_contract[0] = 1;
  tpu_hlo_value gram = tpu_hlo_dot_general(b, p, p, &dd, TPU_F32, TPU_HLO_PRECISION_HIGHEST);
  float g[4];
  CHECK_OK(run(b, &gram, 1, &in, 1, g, sizeof g));
  CHECK(g[0] == 14 && g[1] == 7 && g[2] == 7 && g[3] == 41);
  tpu_buffer_destroy(rt, in);
  tpu_hlo_builder_destroy(b);
}

/* --- views ------------------------------------------------------------------ */

#define N 24

static tpu_view make_view(int rank, const int64_t *sizes, const int64_t *strides, int64_t offset) {
  tpu_view v;
  memset(&v, 0, sizeof v);
  v.dtype = TPU_F32;
  v.rank = rank;
  for (int i = 0; i < rank; i++) {
    v.sizes[i] = sizes[i];
    v.strides[i] = strides[i];
  }
  v.offset = offset;
  return v;
}

/* Element k (row-major over sizes) of the view -> storage index. */
static int64_t storage_index(const tpu_view *v, int64_t k) {
  int64_t idx = v->offset;
  for (int i = v->rank - 1; i >= 0; i--) {
    idx += (k % v->sizes[i]) * v->strides[i];
    k /= v->sizes[i];
  }
  return idx;
}

/* Reads (and writes) |v| out of the N floats of a storage buffer of shape
 * |dims| (the bytes count, not the shape). */
static void check_view_in(const tpu_view *v, bool writable, int rank, const int64_t *dims) {
  float store[N];
  for (int i = 0; i < N; i++) store[i] = (float)i;
  tpu_buffer *buf = NULL;
  CHECK_OK(tpu_buffer_from_host(rt, 0, store, TPU_F32, dims, rank, &buf));
  tpu_hlo_builder *b = NULL;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_type st = tpu_hlo_make_type(TPU_F32, rank, dims);
  tpu_hlo_value s = tpu_hlo_param(b, &st, -1);
  tpu_hlo_value r = tpu_hlo_view_read(b, s, v);
  int64_t numel = tpu_view_numel(v);
  float got[N * 4];
  tpu_status_t status = run(b, &r, 1, &buf, 1, got, (size_t)numel * sizeof(float));
  if (status != NULL) {
    fprintf(stderr, "view read failed: %s\n", tpu_status_message(status));
    tpu_status_free(status);
    check_failures++;
  } else {
    for (int64_t k = 0; k < numel; k++) CHECK(got[k] == store[storage_index(v, k)]);
  }
  if (writable) {
    tpu_hlo_builder_reset(b);
    s = tpu_hlo_param(b, &st, -1);
    tpu_hlo_type vt = tpu_hlo_make_type(TPU_F32, v->rank, v->sizes);
    tpu_hlo_type it = tpu_hlo_make_type(TPU_S32, 1, &numel);
    tpu_hlo_value seq = tpu_hlo_convert(b, tpu_hlo_iota(b, &it, 0), TPU_F32);
    seq = tpu_hlo_reshape(b, seq, v->rank, v->sizes);
    tpu_hlo_value val = tpu_hlo_binary(b, TPU_HLO_ADD, tpu_hlo_const_f64(b, &vt, 1000.0), seq);
    tpu_hlo_value w = tpu_hlo_view_write(b, s, v, val, false);
    /* A whole-storage write is the value in the view's shape, else 1-D. */
    int64_t flat_n = N;
    tpu_hlo_type want = tpu_view_is_whole(v, N * sizeof(float)) ? vt : tpu_hlo_make_type(TPU_F32, 1, &flat_n);
    CHECK(tpu_hlo_type_equal(tpu_hlo_type_of(b, w), &want));
    float after[N];
    status = run(b, &w, 1, &buf, 1, after, sizeof after);
    if (status != NULL) {
      fprintf(stderr, "view write failed: %s\n", tpu_status_message(status));
      tpu_status_free(status);
      check_failures++;
    } else {
      float expect[N];
      memcpy(expect, store, sizeof store);
      for (int64_t k = 0; k < numel; k++) expect[storage_index(v, k)] = 1000.0f + (float)k;
      for (int i = 0; i < N; i++) CHECK(after[i] == expect[i]);
    }
  }
  tpu_hlo_builder_destroy(b);
  tpu_buffer_destroy(rt, buf);
}

static void check_view(const tpu_view *v, bool writable) {
  int64_t flat_n = N, shaped[2] = {4, 6}, other[3] = {2, 3, 4};
  check_view_in(v, writable, 1, &flat_n);
  check_view_in(v, writable, 2, shaped);
  check_view_in(v, writable, 3, other);
}

static void test_views(void) {
  /* the whole storage, in the buffer's shape and in others */
  tpu_view v0 = make_view(2, (int64_t[]){4, 6}, (int64_t[]){6, 1}, 0);
  check_view(&v0, true);
  v0 = make_view(1, (int64_t[]){24}, (int64_t[]){1}, 0);
  check_view(&v0, true);
  /* contiguous with offset */
  tpu_view v = make_view(2, (int64_t[]){2, 3}, (int64_t[]){3, 1}, 5);
  check_view(&v, true);
  /* transposed 4x6 -> 6x4 */
  v = make_view(2, (int64_t[]){6, 4}, (int64_t[]){1, 6}, 0);
  check_view(&v, true);
  /* narrowed columns of a 4x6 (needs padding at the end) */
  v = make_view(2, (int64_t[]){4, 3}, (int64_t[]){6, 1}, 3);
  check_view(&v, true);
  /* diagonal of a 4x6 */
  v = make_view(1, (int64_t[]){4}, (int64_t[]){7}, 0);
  check_view(&v, true);
  /* every other element, 3-d with a size-1 dim */
  v = make_view(3, (int64_t[]){2, 1, 3}, (int64_t[]){12, 5, 2}, 1);
  check_view(&v, true);
  /* not a strided box: strides 3 and 2 -> gather / scatter */
  v = make_view(2, (int64_t[]){3, 2}, (int64_t[]){5, 2}, 0);
  check_view(&v, true);
  /* overlapping windows (unfold) and expanded dims: read only */
  v = make_view(2, (int64_t[]){5, 4}, (int64_t[]){2, 1}, 0);
  check_view(&v, false);
  v = make_view(3, (int64_t[]){3, 2, 4}, (int64_t[]){0, 4, 1}, 8);
  check_view(&v, false);
  /* scalar */
  v = make_view(0, NULL, NULL, 17);
  check_view(&v, true);
}

static void test_reinterpret(void) {
  float store[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  int64_t n = 4;
  tpu_buffer *buf = NULL;
  CHECK_OK(tpu_buffer_from_host(rt, 0, store, TPU_F32, &n, 1, &buf));
  tpu_hlo_builder *b = NULL;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_type st = tpu_hlo_make_type(TPU_F32, 1, &n);

  tpu_hlo_value s = tpu_hlo_param(b, &st, -1);
  tpu_hlo_value bytes = tpu_hlo_storage_as(b, s, TPU_U8);
  uint8_t got8[16];
  CHECK_OK(run(b, &bytes, 1, &buf, 1, got8, sizeof got8));
  CHECK(memcmp(got8, store, 16) == 0);

  tpu_hlo_builder_reset(b);
  s = tpu_hlo_param(b, &st, -1);
  tpu_hlo_value d = tpu_hlo_storage_as(b, s, TPU_F64);
  double got64[2];
  CHECK_OK(run(b, &d, 1, &buf, 1, got64, sizeof got64));
  CHECK(memcmp(got64, store, 16) == 0);

  tpu_hlo_builder_reset(b);
  s = tpu_hlo_param(b, &st, -1);
  tpu_hlo_value c = tpu_hlo_storage_as(b, s, TPU_C64);
  float gotc[4];
  CHECK_OK(run(b, &c, 1, &buf, 1, gotc, sizeof gotc));
  CHECK(memcmp(gotc, store, 16) == 0);
  tpu_hlo_builder_destroy(b);
  tpu_buffer_destroy(rt, buf);
}

/* A type from tpu_hlo_type_of may be passed to a builder call that adds a
 * value, which can move the builder's value table. */
static void test_type_of_across_growth(void) {
  tpu_hlo_builder *b = NULL;
  CHECK_OK(tpu_hlo_builder_create(&b));
  int64_t dims[2] = {2, 3};
  tpu_hlo_type t = tpu_hlo_make_type(TPU_F32, 2, dims);
  tpu_hlo_value v = tpu_hlo_const_f64(b, &t, 1.0);
  for (int i = 0; i < 300; i++) v = tpu_hlo_const_f64(b, tpu_hlo_type_of(b, v), 1.0);
  CHECK(tpu_hlo_type_equal(tpu_hlo_type_of(b, v), &t));
  tpu_hlo_builder_destroy(b);
}

/* XLA's CPU compiler hands reductions and dots to YNNPACK, whose runtime
 * crashed on operands of more than 8 dims and 2^15 or more elements; the
 * runtime compiles programs with such values without it. A [4]^9 tensor
 * summed over dim 3 and a batch of [2]^7 products of 16x16 matrices. */
static void test_high_rank(void) {
  tpu_hlo_builder *b = NULL;
  CHECK_OK(tpu_hlo_builder_create(&b));
  const int n = 1 << 18;
  float *x = malloc(n * sizeof *x), *got = malloc(n * sizeof *got);
  for (int i = 0; i < n; i++) x[i] = (float)(i % 7) - 3.0f;
  int64_t d9[9] = {4, 4, 4, 4, 4, 4, 4, 4, 4};
  tpu_buffer *in = NULL;
  CHECK_OK(tpu_buffer_from_host(rt, 0, x, TPU_F32, d9, 9, &in));
  tpu_hlo_type t9 = tpu_hlo_make_type(TPU_F32, 9, d9);
  tpu_hlo_value p = tpu_hlo_param(b, &t9, -1);
  CHECK(tpu_hlo_max_rank(b) == 9);
  int64_t dim3 = 3;
  tpu_hlo_value s = tpu_hlo_reduce_simple(b, p, tpu_hlo_scalar_f64(b, TPU_F32, 0), TPU_HLO_ADD, &dim3, 1);
  CHECK_OK(run(b, &s, 1, &in, 1, got, n / 4 * sizeof *got));
  /* Element [a, b, c, e, ...] of the sum: x over d at stride 4^5 (dims after 3). */
  for (int i = 0; i < n / 4; i += 997) {
    int64_t outer = i / 1024, inner = i % 1024;
    float want = 0;
    for (int d = 0; d < 4; d++) want += x[outer * 4096 + d * 1024 + inner];
    CHECK(got[i] == want);
  }

  tpu_hlo_builder_reset(b);
  CHECK(tpu_hlo_max_rank(b) == 0);
  int64_t d = 16, dm[9] = {2, 2, 2, 2, 2, 2, 2, 16, 16};
  tpu_hlo_type tm = tpu_hlo_make_type(TPU_F32, 9, dm);
  tpu_buffer *mats = NULL;
  CHECK_OK(tpu_buffer_from_host(rt, 0, x, TPU_F32, dm, 9, &mats));
  p = tpu_hlo_param(b, &tm, -1);
  tpu_hlo_dot_dims dd = {.num_batch = 7, .num_contract = 1, .lhs_contract = {8}, .rhs_contract = {7}};
  for (int i = 0; i < 7; i++) dd.lhs_batch[i] = dd.rhs_batch[i] = i;
  tpu_hlo_value prod = tpu_hlo_dot_general(b, p, p, &dd, TPU_F32, TPU_HLO_PRECISION_HIGHEST);
  CHECK_OK(run(b, &prod, 1, &mats, 1, got, 128 * 256 * sizeof *got));
  for (int m = 0; m < 128; m += 17)
    for (int r = 0; r < d; r += 5)
      for (int c = 0; c < d; c += 3) {
        const float *a = x + m * 256;
        float want = 0;
        for (int k = 0; k < d; k++) want += a[r * d + k] * a[k * d + c];
        CHECK(got[m * 256 + r * d + c] == want);
      }

  /* No value of more dims than a type holds. */
  tpu_hlo_builder_reset(b);
  int64_t ones[TPU_HLO_MAX_RANK + 1];
  for (int i = 0; i <= TPU_HLO_MAX_RANK; i++) ones[i] = 1;
  tpu_hlo_type big = tpu_hlo_make_type(TPU_F32, TPU_HLO_MAX_RANK + 1, ones);
  CHECK(tpu_hlo_iota(b, &big, 0) == TPU_HLO_NONE);
  CHECK(tpu_hlo_failed(b));
  tpu_buffer_destroy(rt, in);
  tpu_buffer_destroy(rt, mats);
  free(x);
  free(got);
  tpu_hlo_builder_destroy(b);
}

int main(void) {
  rt = test_runtime_create();
  if (rt == NULL) return 1;
  RUN(test_constants_exact);
  RUN(test_sticky_errors);
  RUN(test_reduce_sort_dot);
  RUN(test_views);
  RUN(test_reinterpret);
  RUN(test_type_of_across_growth);
  RUN(test_high_rank);
  tpu_runtime_destroy(rt);
  return check_failures ? 1 : 0;
}
