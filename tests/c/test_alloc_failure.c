/* Injected allocation failures (base/alloc.h) through the runtime, the
 * program builder and eager execution, under AddressSanitizer: each scenario
 * runs with its 1st, 2nd, ... allocation failing until a run injects no
 * failure. A failure must come back as an out-of-memory status or be
 * absorbed (a best-effort path); either way nothing leaks (LeakSanitizer at
 * exit), nothing crashes, and a run that reports success computed the right
 * values. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "eager/eager.h"

static tpu_runtime *rt;

typedef tpu_status_t (*scenario_fn)(void);

/* Runs |fn| with allocation n = 1, 2, ... failing; returns how many runs
 * failed with a status. */
static int run_failing(const char *name, scenario_fn fn) {
  int failed = 0;
  for (long n = 1;; n++) {
    tpu_alloc_fail_nth(n);
    tpu_status_t st = fn();
    bool injected = tpu_alloc_failure_injected();
    tpu_alloc_fail_nth(0);
    if (st != NULL) {
      failed++;
      if (!injected || tpu_status_code(st) != TPU_ERR_OUT_OF_MEMORY) {
        fprintf(stderr, "%s, allocation %ld failing (injected: %d): %s\n", name, n, injected,
                tpu_status_message(st));
        check_failures++;
      }
      tpu_status_free(st);
    }
    if (!injected) {
      CHECK(st == NULL);
      fprintf(stderr, "  %s: %ld allocations, %d failed runs\n", name, n - 1, failed);
      return failed;
    }
    if (n > 20000) {
      fprintf(stderr, "%s: no end of allocations\n", name);
      check_failures++;
      return failed;
    }
  }
}

/* A status for a wrong value, so the loop reports it with the step. */
static tpu_status_t expect(bool ok, const char *what) {
  return ok ? NULL : tpu_status_new(TPU_ERR_RUNTIME, "wrong result: %s", what);
}

/* --- the runtime ------------------------------------------------------------------ */

static tpu_status_t runtime_create_destroy(void) {
  tpu_runtime_options o;
  tpu_runtime_options_init(&o);
  o.plugin_path = test_plugin_path();
  o.platform = "cpu";
  tpu_runtime *r = NULL;
  TPU_RETURN_IF_ERROR(tpu_runtime_create(&o, &r), "creating the runtime");
  tpu_status_t st = expect(tpu_runtime_device_kind(r, 0) != NULL, "device kind");
  tpu_runtime_destroy(r);
  return st;
}

/* Upload, compile, launch (tracked), read back, serialize and load again. */
static tpu_status_t runtime_programs(void) {
  float x[4] = {1, 2, 3, 4}, got[4] = {0};
  int64_t four = 4;
  tpu_buffer *in = NULL, *out = NULL;
  tpu_executable *exe = NULL, *again = NULL;
  char *bytes = NULL;
  size_t size = 0;
  tpu_status_t st = NULL;
  TPU_GOTO_IF_ERROR(st, tpu_buffer_from_host(rt, 0, x, TPU_F32, &four, 1, &in), done);
  tpu_compile_options opts;
  tpu_compile_options_init(&opts);
  opts.name = "double";
  TPU_GOTO_IF_ERROR(st, tpu_executable_compile(rt, kDouble, sizeof kDouble - 1, &opts, &exe), done);
  TPU_GOTO_IF_ERROR(st, tpu_executable_serialize(rt, exe, &bytes, &size), done);
  TPU_GOTO_IF_ERROR(st, tpu_executable_deserialize(rt, bytes, size, &again), done);
  TPU_GOTO_IF_ERROR(st, tpu_executable_execute(rt, again, 0, &in, 1, NULL, true, &out), done);
  TPU_GOTO_IF_ERROR(st, tpu_runtime_synchronize(rt, 0), done);
  TPU_GOTO_IF_ERROR(st, tpu_buffer_to_host(rt, out, got, sizeof got), done);
  st = expect(got[0] == 2 && got[3] == 8, "a + a");
done:
  tpu_buffer_destroy(rt, out);
  tpu_buffer_destroy(rt, in);
  tpu_executable_destroy(rt, again);
  tpu_executable_destroy(rt, exe);
  free(bytes);
  return st;
}

/* --- eager: the program builder, the cache, execution --------------------------------- */

static void tensor_arg(tpu_eager_arg *a, tpu_storage *s, const int64_t *n, bool mutated) {
  memset(a, 0, sizeof *a);
  a->lower = (tpu_lower_arg){.kind = TPU_ARG_TENSOR, .dtype = TPU_F32, .rank = 1, .sizes = n};
  a->tensor.storage = s;
  a->tensor.view = (tpu_view){.dtype = TPU_F32, .rank = 1, .sizes = {*n}, .strides = {1}};
  a->mutated = mutated;
}

static tpu_status_t storage_of(const float *values, int64_t n, tpu_storage **out) {
  TPU_RETURN_IF_ERROR(tpu_storage_new(tpu_eager_context_get(), 0, n * 4, out));
  tpu_buffer *buf = NULL;
  TPU_RETURN_IF_ERROR(tpu_buffer_from_host(rt, 0, values, TPU_F32, &n, 1, &buf));
  tpu_hlo_type t = tpu_hlo_make_type(TPU_F32, 1, &n);
  tpu_storage_set(*out, buf, &t);
  return NULL;
}

static tpu_status_t read_storage(tpu_storage *s, float *out, int64_t n) {
  return tpu_buffer_to_host(rt, s->buf, out, (size_t)n * 4);
}

/* add.Tensor(x, y, alpha=2) into a new output: an op, its program compiled
 * (the cache emptied first, so every run builds it), run twice (a hit). */
static tpu_status_t eager_one_op(void) {
  static tpu_eager_op *op; /* ops live as long as the process */
  float xv[4] = {1, 2, 3, 4}, yv[4] = {10, 20, 30, 40}, got[4] = {0};
  int64_t four = 4;
  tpu_storage *x = NULL, *y = NULL, *out = NULL;
  tpu_eager_entry *e = NULL;
  tpu_status_t st = NULL;
  TPU_GOTO_IF_ERROR(st, tpu_eager_cache_clear(), done);
  if (op == NULL) {
    int alias = -1;
    TPU_GOTO_IF_ERROR(st, tpu_eager_op_new("test::add", tpu_lower_find("add.Tensor"), 1, 1, &alias, 0, NULL, &op),
                      done);
  }
  TPU_GOTO_IF_ERROR(st, storage_of(xv, 4, &x), done);
  TPU_GOTO_IF_ERROR(st, storage_of(yv, 4, &y), done);
  tpu_eager_arg args[3];
  tensor_arg(&args[0], x, &four, false);
  tensor_arg(&args[1], y, &four, false);
  memset(&args[2], 0, sizeof args[2]);
  args[2].lower = (tpu_lower_arg){.kind = TPU_ARG_SCALAR, .dtype = TPU_F64, .f = 2.0, .i = 2};
  tpu_eager_call call = {.op = op, .num_args = 3, .args = args, .common_dtype = TPU_F32, .device = 0};
  tpu_eager_out_meta meta = {.dtype = TPU_F32, .rank = 1, .sizes = {4}, .strides = {1}};
  TPU_GOTO_IF_ERROR(st, tpu_eager_prepare(&call), done);
  e = tpu_eager_lookup(&call);
  if (e == NULL) TPU_GOTO_IF_ERROR(st, tpu_eager_compile(&call, &meta, &e), done);
  for (int round = 0; round < 2; round++) {
    tpu_storage_free(out);
    TPU_GOTO_IF_ERROR(st, tpu_storage_new(tpu_eager_context_get(), 0, 16, &out), done);
    TPU_GOTO_IF_ERROR(st, tpu_eager_execute(e, &call, &out), done);
    TPU_GOTO_IF_ERROR(st, read_storage(out, got, 4), done);
    TPU_GOTO_IF_ERROR(st, expect(got[0] == 21 && got[3] == 84, "x + 2 * y"), done);
  }
done:
  tpu_eager_entry_release(e);
  tpu_storage_free(out);
  tpu_storage_free(y);
  tpu_storage_free(x);
  return st;
}

enum { ITEMS = 34 }; /* more than the 32 tensors a call scans linearly */

/* _foreach_add_.List(xs, ys): a per-item op in place over a long list. */
static tpu_status_t eager_foreach(void) {
  static tpu_eager_op *op;
  tpu_storage *xs[ITEMS] = {0}, *ys[ITEMS] = {0};
  tpu_tensor_ref xr[ITEMS], yr[ITEMS];
  tpu_dtype_t dt[2][ITEMS];
  int ranks[2][ITEMS];
  const int64_t *sizes[2][ITEMS];
  int64_t two = 2;
  tpu_eager_entry *e = NULL;
  tpu_status_t st = NULL;
  TPU_GOTO_IF_ERROR(st, tpu_eager_cache_clear(), done);
  if (op == NULL) {
    tpu_eager_item_arg sources[3] = {{.arg = 0}, {.arg = 1}, {.arg = 2}};
    int alias = 0;
    TPU_GOTO_IF_ERROR(
        st, tpu_eager_op_new("test::foreach_add_", tpu_lower_find("add_.Tensor"), 1, 0, &alias, 3, sources, &op),
        done);
  }
  for (int i = 0; i < ITEMS; i++) {
    float x[2] = {(float)i, 0}, y[2] = {1, 1};
    TPU_GOTO_IF_ERROR(st, storage_of(x, 2, &xs[i]), done);
    TPU_GOTO_IF_ERROR(st, storage_of(y, 2, &ys[i]), done);
    tpu_eager_arg a;
    tensor_arg(&a, xs[i], &two, true);
    xr[i] = a.tensor;
    tensor_arg(&a, ys[i], &two, false);
    yr[i] = a.tensor;
  }
  tpu_eager_arg args[3];
  tpu_tensor_ref *lists[2] = {xr, yr};
  for (int l = 0; l < 2; l++) {
    memset(&args[l], 0, sizeof args[l]);
    args[l].lower.kind = TPU_ARG_TENSOR_LIST;
    args[l].lower.n = ITEMS;
    args[l].items = lists[l];
    args[l].mutated = l == 0;
    for (int i = 0; i < ITEMS; i++) {
      dt[l][i] = TPU_F32;
      ranks[l][i] = 1;
      sizes[l][i] = lists[l][i].view.sizes;
    }
    args[l].lower.item_dtypes = dt[l];
    args[l].lower.item_ranks = ranks[l];
    args[l].lower.item_sizes = sizes[l];
  }
  memset(&args[2], 0, sizeof args[2]);
  args[2].lower = (tpu_lower_arg){.kind = TPU_ARG_SCALAR, .dtype = TPU_F64, .f = 3.0, .i = 3};
  tpu_eager_call call = {.op = op, .num_args = 3, .args = args, .common_dtype = TPU_F32, .device = 0};
  TPU_GOTO_IF_ERROR(st, tpu_eager_compile(&call, NULL, &e), done);
  TPU_GOTO_IF_ERROR(st, tpu_eager_execute(e, &call, NULL), done);
  for (int i = 0; i < ITEMS; i++) {
    float got[2];
    TPU_GOTO_IF_ERROR(st, read_storage(xs[i], got, 2), done);
    TPU_GOTO_IF_ERROR(st, expect(got[0] == (float)i + 3 && got[1] == 3, "x += 3 * y"), done);
  }
done:
  tpu_eager_entry_release(e);
  for (int i = 0; i < ITEMS; i++) {
    tpu_storage_free(xs[i]);
    tpu_storage_free(ys[i]);
  }
  return st;
}

/* neg_ twice in fused mode: both calls recorded, then run as one program
 * when flushed (trace.c). */
static tpu_status_t eager_fused(void) {
  static tpu_eager_op *op;
  float xv[4] = {1, 2, 3, 4}, got[4] = {0};
  int64_t four = 4;
  tpu_storage *x = NULL;
  tpu_eager_entry *e = NULL;
  tpu_status_t st = NULL;
  int mode = tpu_eager_set_thread_mode(TPU_EAGER_FUSED);
  TPU_GOTO_IF_ERROR(st, tpu_eager_cache_clear(), done);
  if (op == NULL) {
    int alias = 0;
    TPU_GOTO_IF_ERROR(st, tpu_eager_op_new("test::neg_", tpu_lower_find("neg_"), 1, 0, &alias, 0, NULL, &op), done);
  }
  TPU_GOTO_IF_ERROR(st, storage_of(xv, 4, &x), done);
  tpu_eager_arg arg;
  tensor_arg(&arg, x, &four, true);
  tpu_eager_call call = {.op = op, .num_args = 1, .args = &arg, .common_dtype = TPU_F32, .device = 0};
  for (int i = 0; i < 3; i++) {
    TPU_GOTO_IF_ERROR(st, tpu_eager_prepare(&call), done);
    e = tpu_eager_lookup(&call);
    if (e == NULL) TPU_GOTO_IF_ERROR(st, tpu_eager_compile(&call, NULL, &e), done);
    TPU_GOTO_IF_ERROR(st, tpu_eager_run(e, &call, NULL), done);
    tpu_eager_entry_release(e);
    e = NULL;
  }
  TPU_GOTO_IF_ERROR(st, tpu_eager_flush(TPU_CUT_SYNC), done);
  TPU_GOTO_IF_ERROR(st, read_storage(x, got, 4), done);
  st = expect(got[0] == -1 && got[3] == -4, "-(-(-x))");
done:
  tpu_eager_entry_release(e);
  /* A failed run may leave calls recorded: run (or drop) them before the
   * storage goes. */
  st = tpu_status_join(st, tpu_eager_flush(TPU_CUT_SYNC));
  tpu_storage_free(x);
  tpu_eager_set_thread_mode(mode);
  return st;
}

int main(void) {
  rt = test_runtime_create();
  if (rt == NULL) return 1;
  tpu_eager_options opts;
  tpu_eager_options_init(&opts); /* no hand-written kernels */
  tpu_eager_init(rt, &opts);
  CHECK(run_failing("runtime_create_destroy", runtime_create_destroy) > 0);
  CHECK(run_failing("runtime_programs", runtime_programs) > 0);
  CHECK(run_failing("eager_one_op", eager_one_op) > 0);
  CHECK(run_failing("eager_foreach", eager_foreach) > 0);
  CHECK(run_failing("eager_fused", eager_fused) > 0);
  tpu_status_free(tpu_eager_cache_clear());
  tpu_runtime_destroy(rt);
  fprintf(stderr, "%s\n", check_failures ? "FAIL" : "ok");
  return check_failures ? 1 : 0;
}
