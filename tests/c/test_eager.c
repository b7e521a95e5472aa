/* Eager-layer tests on the real plugin: an ordinary op, and a per-item op
 * (a _foreach_ call) over a list long enough for the hashed storage lookup,
 * with a Scalar[] operand, in place and with new outputs; the overlap test
 * that sends aliased items to the in-turn path; Python numbers through the
 * runtime-scalar table, many of them colliding in its slots; a dtype a rule
 * does not admit. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "eager/eager.h"

static tpu_runtime *rt;

/* A storage holding |n| floats |values|, and a ref to all of it. */
static tpu_storage *make_storage(const float *values, int64_t n, tpu_tensor_ref *out_ref) {
  tpu_storage *s = NULL;
  tpu_status_t st = tpu_storage_new(tpu_eager_context_get(), 0, n * 4, &s);
  tpu_buffer *buf = NULL;
  if (st == NULL) st = tpu_buffer_from_host(rt, 0, values, TPU_F32, &n, 1, &buf);
  if (st != NULL) {
    fprintf(stderr, "make_storage: %s\n", tpu_status_message(st));
    check_failures++;
    tpu_status_free(st);
    return s;
  }
  tpu_hlo_type t = tpu_hlo_make_type(TPU_F32, 1, &n);
  tpu_storage_set(s, buf, &t);
  memset(out_ref, 0, sizeof *out_ref);
  out_ref->storage = s;
  out_ref->view = (tpu_view){.dtype = TPU_F32, .rank = 1, .sizes = {n}, .strides = {1}};
  return s;
}

static void read_back(tpu_storage *s, float *out, int64_t n) {
  tpu_status_t st = tpu_buffer_to_host(rt, s->buf, out, (size_t)n * 4);
  CHECK(st == NULL);
  tpu_status_free(st);
}

static void list_arg(tpu_eager_arg *a, tpu_tensor_ref *items, int n, bool mutated, tpu_dtype_t *dtypes, int *ranks,
                     const int64_t **sizes) {
  memset(a, 0, sizeof *a);
  a->lower.kind = TPU_ARG_TENSOR_LIST;
  a->lower.n = n;
  a->items = items;
  a->mutated = mutated;
  for (int i = 0; i < n; i++) {
    dtypes[i] = items[i].view.dtype;
    ranks[i] = items[i].view.rank;
    sizes[i] = items[i].view.sizes;
  }
  a->lower.item_dtypes = dtypes;
  a->lower.item_ranks = ranks;
  a->lower.item_sizes = sizes;
}

/* The cache gives |e| for |call| (the reference taken is let go at once:
 * the cache keeps its own). */
static bool lookup_is(const tpu_eager_call *call, tpu_eager_entry *e) {
  tpu_eager_entry *found = tpu_eager_lookup(call);
  tpu_eager_entry_release(found);
  return found == e;
}

enum { N = 40 }; /* more than the 32 tensors a call scans linearly */

/* _foreach_add_.List(self, other, alpha) as add_.Tensor per item, then
 * _foreach_mul.ScalarList(self, scalars) as mul.Scalar with new outputs. */
static void test_per_item_op(void) {
  tpu_storage *xs[N], *ys[N];
  tpu_tensor_ref xr[N], yr[N];
  float host[N][3];
  for (int i = 0; i < N; i++) {
    int64_t n = 1 + i % 3;
    float x[3] = {(float)i, 1, 2}, y[3] = {1, (float)i, 3};
    xs[i] = make_storage(x, n, &xr[i]);
    ys[i] = make_storage(y, n, &yr[i]);
  }
  const tpu_lower_rule *add = tpu_lower_find("add_.Tensor");
  CHECK(add != NULL);
  if (add == NULL) return;
  tpu_eager_item_arg sources[3] = {{.arg = 0}, {.arg = 1}, {.arg = 2}};
  int alias = 0;
  tpu_eager_op *op = NULL;
  CHECK_OK(tpu_eager_op_new("test::foreach_add_", add, 1, 0, &alias, 3, sources, &op));

  tpu_eager_arg args[3];
  tpu_dtype_t dt[2][N];
  int ranks[2][N];
  const int64_t *sizes[2][N];
  list_arg(&args[0], xr, N, true, dt[0], ranks[0], sizes[0]);
  list_arg(&args[1], yr, N, false, dt[1], ranks[1], sizes[1]);
  memset(&args[2], 0, sizeof args[2]);
  args[2].lower = (tpu_lower_arg){.kind = TPU_ARG_SCALAR, .dtype = TPU_F64, .f = 2.0, .i = 2};
  tpu_eager_call call = {.op = op, .num_args = 3, .args = args, .common_dtype = TPU_F32, .device = 0};
  CHECK(tpu_eager_call_items(&call) == N);
  CHECK(!tpu_eager_items_overlap(&call));
  CHECK(tpu_eager_lookup(&call) == NULL);
  tpu_eager_entry *e = NULL;
  CHECK_OK(tpu_eager_compile(&call, NULL, &e));
  tpu_eager_entry_release(e);
  CHECK(lookup_is(&call, e));
  CHECK_OK(tpu_eager_execute(e, &call, NULL));
  for (int i = 0; i < N; i++) {
    float got[3];
    read_back(xs[i], got, 1 + i % 3);
    float want[3] = {(float)i + 2, 1 + 2.0f * (float)i, 2 + 6};
    for (int j = 0; j < 1 + i % 3; j++) CHECK(got[j] == want[j]);
    host[i][0] = got[0];
  }

  /* New outputs, one per item, and a Scalar[] runtime operand. */
  const tpu_lower_rule *mul = tpu_lower_find("mul.Scalar");
  alias = -1;
  tpu_eager_item_arg two[2] = {{.arg = 0}, {.arg = 1}};
  tpu_eager_op *mop = NULL;
  CHECK_OK(tpu_eager_op_new("test::foreach_mul", mul, 1, 1, &alias, 2, two, &mop));
  double values[N];
  tpu_dtype_t value_types[N];
  for (int i = 0; i < N; i++) {
    values[i] = 0.5 * i;
    value_types[i] = TPU_F64;
  }
  args[0].mutated = false;
  memset(&args[1], 0, sizeof args[1]);
  args[1].lower = (tpu_lower_arg){.kind = TPU_ARG_SCALAR_LIST, .n = N, .dtype = TPU_F64, .floats = values,
                                  .item_dtypes = value_types};
  tpu_eager_call mcall = {.op = mop, .num_args = 2, .args = args, .common_dtype = TPU_F32, .device = 0};
  tpu_eager_out_meta meta[N];
  tpu_storage *outs[N];
  for (int i = 0; i < N; i++) {
    meta[i] = (tpu_eager_out_meta){.dtype = TPU_F32, .rank = 1, .sizes = {1 + i % 3}, .strides = {1}};
    CHECK_OK(tpu_storage_new(tpu_eager_context_get(), 0, (1 + i % 3) * 4, &outs[i]));
  }
  CHECK_OK(tpu_eager_compile(&mcall, meta, &e));
  tpu_eager_entry_release(e);
  for (int round = 0; round < 2; round++) { /* new numbers, same program */
    for (int i = 0; i < N; i++) values[i] = round == 0 ? 0.5 * i : -1.0;
    CHECK(lookup_is(&mcall, e));
    CHECK_OK(tpu_eager_execute(e, &mcall, outs));
    for (int i = 0; i < N; i++) {
      float got[3];
      read_back(outs[i], got, 1 + i % 3);
      CHECK(got[0] == host[i][0] * (float)values[i]);
    }
  }

  /* The same tensor written as two items: not one program. */
  xr[1] = xr[0];
  args[0].mutated = true;
  list_arg(&args[1], yr, N, false, dt[1], ranks[1], sizes[1]);
  list_arg(&args[0], xr, N, true, dt[0], ranks[0], sizes[0]);
  CHECK(tpu_eager_items_overlap(&call));
  for (int i = 0; i < N; i++) {
    tpu_storage_free(xs[i]);
    tpu_storage_free(ys[i]);
    tpu_storage_free(outs[i]);
  }
}

/* add.Tensor(x, other, alpha) for 400 numbers: the scalar table has
 * 256 slots, so numbers collide with each other and with alpha=1 (a second
 * lookup in the same call replaced, and destroyed, the first one's buffer
 * before the launch read it). */
static void test_scalar_table_collisions(void) {
  float zero[4] = {0};
  tpu_tensor_ref xr;
  tpu_storage *x = make_storage(zero, 4, &xr);
  const tpu_lower_rule *add = tpu_lower_find("add.Tensor");
  CHECK(add != NULL);
  if (add == NULL) return;
  int alias = -1;
  tpu_eager_op *op = NULL;
  CHECK_OK(tpu_eager_op_new("test::add_numbers", add, 1, 1, &alias, 0, NULL, &op));
  tpu_eager_arg args[3];
  memset(args, 0, sizeof args);
  int64_t four = 4;
  args[0].lower = (tpu_lower_arg){.kind = TPU_ARG_TENSOR, .dtype = TPU_F32, .rank = 1, .sizes = &four};
  args[0].tensor = xr;
  tpu_eager_out_meta meta = {.dtype = TPU_F32, .rank = 1, .sizes = {4}, .strides = {1}};
  tpu_eager_call call = {.op = op, .num_args = 3, .args = args, .common_dtype = TPU_F32, .device = 0};
  tpu_eager_entry *e = NULL;
  int wrong = 0;
  for (int i = 0; i < 400; i++) {
    args[1].lower = (tpu_lower_arg){.kind = TPU_ARG_SCALAR, .dtype = TPU_S64, .i = i, .f = i};
    args[2].lower = (tpu_lower_arg){.kind = TPU_ARG_SCALAR, .dtype = TPU_S64, .i = 1, .f = 1};
    if (e == NULL) {
      CHECK_OK(tpu_eager_compile(&call, &meta, &e));
      tpu_eager_entry_release(e);
    }
    CHECK(lookup_is(&call, e));
    tpu_storage *out = NULL;
    CHECK_OK(tpu_storage_new(tpu_eager_context_get(), 0, 16, &out));
    CHECK_OK(tpu_eager_execute(e, &call, &out));
    float got[4];
    read_back(out, got, 4);
    for (int j = 0; j < 4; j++) wrong += got[j] != (float)i;
    tpu_storage_free(out);
  }
  CHECK(wrong == 0);
  tpu_storage_free(x);
}

/* A thread holding an entry while another empties the cache (at its cap):
 * the entry stays usable until released, and is freed by a later clear. */
static void test_cache_clear_while_held(void) {
  float one[4] = {1, 2, 3, 4};
  tpu_tensor_ref xr;
  tpu_storage *x = make_storage(one, 4, &xr);
  const tpu_lower_rule *neg = tpu_lower_find("neg");
  CHECK(neg != NULL);
  if (neg == NULL) return;
  int alias = -1;
  tpu_eager_op *op = NULL;
  CHECK_OK(tpu_eager_op_new("test::neg", neg, 1, 1, &alias, 0, NULL, &op));
  tpu_eager_arg arg;
  memset(&arg, 0, sizeof arg);
  int64_t four = 4;
  arg.lower = (tpu_lower_arg){.kind = TPU_ARG_TENSOR, .dtype = TPU_F32, .rank = 1, .sizes = &four};
  arg.tensor = xr;
  tpu_eager_out_meta meta = {.dtype = TPU_F32, .rank = 1, .sizes = {4}, .strides = {1}};
  tpu_eager_call call = {.op = op, .num_args = 1, .args = &arg, .common_dtype = TPU_F32, .device = 0};
  tpu_eager_entry *held = NULL;
  CHECK_OK(tpu_eager_compile(&call, &meta, &held));
  CHECK_OK(tpu_eager_cache_clear());
  CHECK(tpu_eager_cache_size() == 0);
  CHECK(tpu_eager_lookup(&call) == NULL);
  for (int round = 0; round < 2; round++) {
    tpu_storage *out = NULL;
    CHECK_OK(tpu_storage_new(tpu_eager_context_get(), 0, 16, &out));
    CHECK_OK(tpu_eager_execute(held, &call, &out));
    float got[4];
    read_back(out, got, 4);
    CHECK(got[0] == -1 && got[3] == -4);
    tpu_storage_free(out);
  }
  tpu_eager_entry_release(held); /* the last reference: freed by the next clear */
  CHECK_OK(tpu_eager_cache_clear());
  tpu_storage_free(x);
}

/* A dtype the rule does not admit (abs of bool: PyTorch's meta function
 * takes it, its CPU kernel does not) is refused before the rule runs, with
 * PyTorch's message, and nothing is compiled or cached. */
static void test_dtype_admission(void) {
  const tpu_lower_rule *abs_rule = tpu_lower_find("abs");
  CHECK(abs_rule != NULL && abs_rule->admit.dtypes != 0);
  if (abs_rule == NULL) return;
  int alias = -1;
  tpu_eager_op *op = NULL;
  CHECK_OK(tpu_eager_op_new("test::abs", abs_rule, 1, 1, &alias, 0, NULL, &op));
  int64_t four = 4;
  tpu_storage *x = NULL;
  CHECK_OK(tpu_storage_new(tpu_eager_context_get(), 0, 4, &x));
  tpu_eager_arg arg;
  memset(&arg, 0, sizeof arg);
  arg.lower = (tpu_lower_arg){.kind = TPU_ARG_TENSOR, .dtype = TPU_BOOL, .rank = 1, .sizes = &four};
  arg.tensor.storage = x;
  arg.tensor.view = (tpu_view){.dtype = TPU_BOOL, .rank = 1, .sizes = {4}, .strides = {1}};
  tpu_eager_out_meta meta = {.dtype = TPU_BOOL, .rank = 1, .sizes = {4}, .strides = {1}};
  tpu_eager_call call = {.op = op, .num_args = 1, .args = &arg, .common_dtype = TPU_BOOL, .device = 0};
  size_t before = tpu_eager_cache_size();
  tpu_eager_entry *e = NULL;
  tpu_status_t st = tpu_eager_compile(&call, &meta, &e);
  CHECK(st != NULL && tpu_status_code(st) == TPU_ERR_NOT_IMPLEMENTED);
  CHECK(st != NULL && strcmp(tpu_status_message(st), "\"abs_cpu\" not implemented for 'Bool'") == 0);
  CHECK(e == NULL);
  CHECK(tpu_eager_cache_size() == before);
  tpu_status_free(st);
  tpu_storage_free(x);
}

int main(void) {
  rt = test_runtime_create();
  if (rt == NULL) return 1;
  tpu_eager_options opts;
  tpu_eager_options_init(&opts); /* no hand-written kernels */
  tpu_eager_init(rt, &opts);
  RUN(test_per_item_op);
  RUN(test_scalar_table_collisions);
  RUN(test_cache_clear_while_held);
  RUN(test_dtype_admission);
  tpu_status_free(tpu_eager_cache_clear());
  tpu_runtime_destroy(rt);
  return check_failures ? 1 : 0;
}
