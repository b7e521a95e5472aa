/* The kernels as XLA FFI handlers: each decodes the call frame XLA passes
 * (buffers, attributes), runs the kernel on XLA's host thread pool, and
 * answers the metadata probe XLA sends at registration. Registration goes
 * through the runtime (the PJRT FFI extension), on the CPU plugin only: the
 * kernels compute on the host. */
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/paged_attention.h"
#include "runtime/xla_ffi.h"

/* --- running tasks on XLA's thread pool ---------------------------------------- */

/* One parallel loop. The caller works on it too and returns once every task
 * is done; helpers that XLA starts late find nothing left to do. The job
 * lives until the last of them lets go, since the caller does not wait for
 * helpers that never claimed a task. */
typedef struct pool_job {
  _Atomic int64_t next, done;
  _Atomic int refs;
  int64_t n;
  void (*task)(void *arg, int64_t i);
  void *arg;
} pool_job;

typedef struct xla_pool {
  const XLA_FFI_Api *api;
  XLA_FFI_ExecutionContext *ctx;
  int64_t workers; /* the caller included */
} xla_pool;

static void job_work(pool_job *j) {
  for (int64_t i; (i = atomic_fetch_add(&j->next, 1)) < j->n; atomic_fetch_add(&j->done, 1)) j->task(j->arg, i);
}

static void job_release(pool_job *j) {
  if (atomic_fetch_sub(&j->refs, 1) == 1) free(j);
}

static void job_helper(void *data) {
  job_work(data);
  job_release(data);
}

static void pool_run(void *ctx, int64_t n, void (*task)(void *arg, int64_t i), void *arg) {
  const xla_pool *p = ctx;
  pool_job *j = n > 1 && p->workers > 1 ? malloc(sizeof *j) : NULL;
  if (j == NULL) { /* one worker, one task, or no memory for the job */
    for (int64_t i = 0; i < n; i++) task(arg, i);
    return;
  }
  atomic_init(&j->next, 0);
  atomic_init(&j->done, 0);
  atomic_init(&j->refs, 1);
  j->n = n;
  j->task = task;
  j->arg = arg;
  for (int64_t h = 1; h < p->workers && h < n; h++) {
    atomic_fetch_add(&j->refs, 1);
    XLA_FFI_ThreadPool_Schedule_Args a = {.struct_size = TPU_FFI_SIZE(XLA_FFI_ThreadPool_Schedule_Args, data),
                                          .ctx = p->ctx, .task = job_helper, .data = j};
    if (p->api->XLA_FFI_ThreadPool_Schedule(&a) != NULL) { /* no pool after all: the caller does it all */
      atomic_fetch_sub(&j->refs, 1);
      break;
    }
  }
  job_work(j);
  while (atomic_load(&j->done) < n) sched_yield(); /* tasks helpers claimed are finishing */
  job_release(j);
}

/* XLA's pool for this call, capped at the machine's cores (the plugin's pool
 * may be larger than the machine). */
static xla_pool pool_of(const XLA_FFI_CallFrame *f) {
  xla_pool p = {.api = f->api, .ctx = f->ctx, .workers = 1};
  int64_t threads = 0;
  if (TPU_FFI_HAS(f->api, XLA_FFI_ThreadPool_Schedule) && TPU_FFI_HAS(f->api, XLA_FFI_ThreadPool_NumThreads)) {
    XLA_FFI_ThreadPool_NumThreads_Args a = {
        .struct_size = TPU_FFI_SIZE(XLA_FFI_ThreadPool_NumThreads_Args, num_threads),
        .ctx = f->ctx, .num_threads = &threads};
    if (f->api->XLA_FFI_ThreadPool_NumThreads(&a) != NULL) threads = 0;
  }
  /* sysconf reads a sysfs file each time: ask once (a core that comes or
   * goes later changes nothing the cap is for) */
  static _Atomic long cores;
  long n = atomic_load_explicit(&cores, memory_order_relaxed);
  if (n == 0) atomic_store_explicit(&cores, n = sysconf(_SC_NPROCESSORS_ONLN), memory_order_relaxed);
  if (threads > 0) p.workers = n > 0 && n < threads ? n : threads;
  return p;
}

/* --- call frames -------------------------------------------------------------- */

static XLA_FFI_Error *ffi_error(const XLA_FFI_CallFrame *f, int code, const char *message) {
  XLA_FFI_Error_Create_Args a = {.struct_size = TPU_FFI_SIZE(XLA_FFI_Error_Create_Args, errc),
                                 .message = message, .errc = code};
  return f->api->XLA_FFI_Error_Create(&a);
}

/* True when XLA asks for the handler's metadata (done here: FFI API 0.1 is
 * all these handlers need). */
static bool answered_probe(XLA_FFI_CallFrame *f) {
  XLA_FFI_Extension_Base *e = f->extension_start;
  if (e == NULL || e->type != XLA_FFI_Extension_Metadata) return false;
  XLA_FFI_Metadata *m = ((XLA_FFI_Metadata_Extension *)e)->metadata;
  m->api_version.major_version = 0;
  m->api_version.minor_version = 1;
  m->traits = 0;
  return true;
}

/* Scalar attribute |name| as a double (0 when absent). */
static double attr(const XLA_FFI_CallFrame *f, const char *name) {
  size_t len = strlen(name);
  for (int64_t i = 0; i < f->attrs.size; i++) {
    const XLA_FFI_ByteSpan *s = f->attrs.names[i];
    if (f->attrs.types[i] != XLA_FFI_AttrType_SCALAR || s->len != len || memcmp(s->ptr, name, len) != 0) continue;
    const XLA_FFI_Scalar *v = f->attrs.attrs[i];
    return v->dtype == XLA_FFI_DataType_F32 ? (double)*(const float *)v->value : (double)*(const int32_t *)v->value;
  }
  return 0;
}

static XLA_FFI_Buffer *arg_buffer(const XLA_FFI_CallFrame *f, int64_t i) {
  return i < f->args.size ? f->args.args[i] : NULL;
}

static XLA_FFI_Buffer *ret_buffer(const XLA_FFI_CallFrame *f, int64_t i) {
  return i < f->rets.size ? f->rets.rets[i] : NULL;
}

static bool is_f32_4d(const XLA_FFI_Buffer *b) {
  return b != NULL && b->dtype == XLA_FFI_DataType_F32 && b->rank == 4;
}

/* q [B, H, T, D], k [B, H, S, D], v [B, H, S, E]; token-major (the
 * |token_major| attribute) q [B, T, H, D] and so on. */
static bool attention_shape(const XLA_FFI_CallFrame *f, tpu_attention_shape *s) {
  const XLA_FFI_Buffer *q = arg_buffer(f, 0), *k = arg_buffer(f, 1), *v = arg_buffer(f, 2);
  if (!is_f32_4d(q) || !is_f32_4d(k) || !is_f32_4d(v)) return false;
  const bool tm = attr(f, "token_major") != 0;
  const int hd = tm ? 2 : 1, len = tm ? 1 : 2; /* the dims of heads and of rows */
  *s = (tpu_attention_shape){.batch = q->dims[0], .heads = q->dims[hd], .q_len = q->dims[len],
                             .kv_len = k->dims[len], .head_dim = q->dims[3], .v_dim = v->dims[3],
                             .token_major = tm};
  return k->dims[0] == s->batch && v->dims[0] == s->batch && k->dims[hd] == s->heads &&
         v->dims[hd] == s->heads && k->dims[3] == s->head_dim && v->dims[len] == s->kv_len;
}

static const float *data(const XLA_FFI_Buffer *b) { return b != NULL ? b->data : NULL; }

static XLA_FFI_Error *attention_fwd(XLA_FFI_CallFrame *f) {
  if (answered_probe(f) || f->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  bool has_bias = attr(f, "has_bias") != 0;
  tpu_attention_shape s;
  XLA_FFI_Buffer *out = ret_buffer(f, 0), *lse = ret_buffer(f, 1);
  if (!attention_shape(f, &s) || out == NULL || lse == NULL ||
      f->args.size != 3 + has_bias)
    return ffi_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT, TPU_KERNEL_ATTENTION_FWD ": bad operands");
  xla_pool pool = pool_of(f);
  tpu_parallel par = {.run = pool_run, .ctx = &pool};
  tpu_attention_forward(&s, data(arg_buffer(f, 0)), data(arg_buffer(f, 1)), data(arg_buffer(f, 2)),
                        has_bias ? data(arg_buffer(f, 3)) : NULL, attr(f, "causal") != 0, (float)attr(f, "scale"),
                        out->data, lse->data, &par);
  return NULL;
}

static XLA_FFI_Error *attention_bwd(XLA_FFI_CallFrame *f) {
  if (answered_probe(f) || f->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  bool has_bias = attr(f, "has_bias") != 0, bias_grad = attr(f, "bias_grad") != 0;
  int64_t a = 3 + has_bias; /* out, lse, dout follow */
  tpu_attention_shape s;
  if (!attention_shape(f, &s) || f->args.size != a + 3 ||
      f->rets.size != 3 + (has_bias && bias_grad))
    return ffi_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT, TPU_KERNEL_ATTENTION_BWD ": bad operands");
  xla_pool pool = pool_of(f);
  tpu_parallel par = {.run = pool_run, .ctx = &pool};
  tpu_attention_backward(&s, data(arg_buffer(f, 0)), data(arg_buffer(f, 1)), data(arg_buffer(f, 2)),
                         has_bias ? data(arg_buffer(f, 3)) : NULL, data(arg_buffer(f, a)),
                         data(arg_buffer(f, a + 1)), data(arg_buffer(f, a + 2)), attr(f, "causal") != 0,
                         (float)attr(f, "scale"), ret_buffer(f, 0)->data, ret_buffer(f, 1)->data,
                         ret_buffer(f, 2)->data, has_bias && bias_grad ? ret_buffer(f, 3)->data : NULL, &par);
  return NULL;
}

/* a [.., M, K] (lhs_t: [.., K, M]), b [.., K, N] (rhs_t: [.., N, K]), c
 * [.., M, N], with at most one batch dim; with has_bias a third operand,
 * bias [N]. a and b float32 or both bfloat16; c and bias float32. */
static bool matmul_shape(const XLA_FFI_CallFrame *f, tpu_matmul_shape *s) {
  const XLA_FFI_Buffer *a = arg_buffer(f, 0), *b = arg_buffer(f, 1), *c = ret_buffer(f, 0);
  const bool has_bias = attr(f, "has_bias") != 0;
  const XLA_FFI_Buffer *bias = has_bias ? arg_buffer(f, 2) : NULL;
  if (f->args.size != 2 + has_bias || f->rets.size != 1 || a == NULL || b == NULL || c == NULL) return false;
  const int64_t r = a->rank;
  const bool bf16 = a->dtype == XLA_FFI_DataType_BF16;
  if (r < 2 || r > 3 || b->rank != r || c->rank != r || (a->dtype != XLA_FFI_DataType_F32 && !bf16) ||
      b->dtype != a->dtype || c->dtype != XLA_FFI_DataType_F32)
    return false;
  const bool lt = attr(f, "lhs_t") != 0, rt = attr(f, "rhs_t") != 0;
  *s = (tpu_matmul_shape){.batch = r == 3 ? a->dims[0] : 1, .m = a->dims[r - 1 - !lt], .k = a->dims[r - 1 - lt],
                          .n = b->dims[r - 1 - rt], .lhs_t = lt, .rhs_t = rt, .bf16 = bf16};
  return b->dims[r - 2 + rt] == s->k && c->dims[r - 2] == s->m && c->dims[r - 1] == s->n &&
         (r == 2 || (b->dims[0] == s->batch && c->dims[0] == s->batch)) &&
         (!has_bias || (bias->dtype == XLA_FFI_DataType_F32 && bias->rank == 1 && bias->dims[0] == s->n));
}

static XLA_FFI_Error *matmul(XLA_FFI_CallFrame *f) {
  if (answered_probe(f) || f->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  tpu_matmul_shape s;
  if (!matmul_shape(f, &s))
    return ffi_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT, TPU_KERNEL_MATMUL_CALL ": bad operands");
  xla_pool pool = pool_of(f);
  tpu_parallel par = {.run = pool_run, .ctx = &pool};
  const float *bias = attr(f, "has_bias") != 0 ? data(arg_buffer(f, 2)) : NULL;
  if (!tpu_matmul(&s, arg_buffer(f, 0)->data, arg_buffer(f, 1)->data, bias, ret_buffer(f, 0)->data, &par))
    return ffi_error(f, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                     TPU_KERNEL_MATMUL_CALL ": out of memory, or no bfloat16 kernel on this CPU");
  return NULL;
}

/* torchtpu_grouped_matmul(a, b, offs) -> c: torch._grouped_mm's product per
 * group, each group's slice bounded by the int32 offsets (as PyTorch's CPU
 * kernel slices: group g runs from the previous offset to its own, clamped
 * to the sizes, a later group overwriting an earlier one), one tpu_matmul
 * per group with exactly its multiply-adds. With i32 attribute rows set, the
 * groups own rows: a [M, K], b [G, K, N] (rhs_t: [G, N, K]), c [M, N];
 * otherwise the contraction: a [K, M] (A transposed, as a weight gradient
 * has it), b [K, N], c [G, M, N]. What no group owns is zero. */
static XLA_FFI_Error *grouped_matmul(XLA_FFI_CallFrame *f) {
  if (answered_probe(f) || f->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  const XLA_FFI_Buffer *a = arg_buffer(f, 0), *b = arg_buffer(f, 1), *offs = arg_buffer(f, 2), *c = ret_buffer(f, 0);
  const bool rows = attr(f, "rows") != 0, rt = rows && attr(f, "rhs_t") != 0;
  bool ok = f->args.size == 3 && f->rets.size == 1 && a != NULL && b != NULL && offs != NULL && c != NULL &&
            (a->dtype == XLA_FFI_DataType_F32 || a->dtype == XLA_FFI_DataType_BF16) && b->dtype == a->dtype &&
            offs->dtype == XLA_FFI_DataType_S32 && offs->rank == 1 && c->dtype == XLA_FFI_DataType_F32 &&
            a->rank == 2 && b->rank == 3 - !rows && c->rank == 2 + !rows;
  const int64_t g = ok ? offs->dims[0] : 0;
  int64_t m = 0, n = 0, k = 0, span = 0;
  if (ok && rows) {
    m = a->dims[0], k = a->dims[1], n = b->dims[rt ? 1 : 2], span = m;
    ok = b->dims[0] == g && b->dims[rt ? 2 : 1] == k && c->dims[0] == m && c->dims[1] == n;
  } else if (ok) {
    k = a->dims[0], m = a->dims[1], n = b->dims[1], span = k;
    ok = b->dims[0] == k && c->dims[0] == g && c->dims[1] == m && c->dims[2] == n;
  }
  if (!ok) return ffi_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT, TPU_KERNEL_GROUPED_MATMUL_CALL ": bad operands");
  const bool bf16 = a->dtype == XLA_FFI_DataType_BF16;
  const size_t esize = bf16 ? 2 : 4;
  const int32_t *ends = offs->data;
  const char *pa = a->data, *pb = b->data;
  float *pc = c->data;
  memset(pc, 0, (size_t)(rows ? m * n : g * m * n) * sizeof(float));
  xla_pool pool = pool_of(f);
  tpu_parallel par = {.run = pool_run, .ctx = &pool};
  int64_t start = 0;
  for (int64_t i = 0; i < g; i++) {
    const int64_t end = ends[i];
    const int64_t lo = start < 0 ? 0 : start > span ? span : start, hi = end < lo ? lo : end > span ? span : end;
    start = end;
    if (hi == lo) continue;
    tpu_matmul_shape s = {.batch = 1, .m = rows ? hi - lo : m, .n = n, .k = rows ? k : hi - lo,
                          .lhs_t = !rows, .rhs_t = rt, .bf16 = bf16};
    const void *ga = pa + (size_t)(lo * (rows ? k : m)) * esize;
    const void *gb = pb + (size_t)(rows ? i * k * n : lo * n) * esize;
    float *gc = pc + (rows ? lo * n : i * m * n);
    if (!tpu_matmul(&s, ga, gb, NULL, gc, &par))
      return ffi_error(f, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                       TPU_KERNEL_GROUPED_MATMUL_CALL ": out of memory, or no bfloat16 kernel on this CPU");
  }
  return NULL;
}

/* torchtpu_paged_attention(query, cache, block_table, seq_lens,
 * query_start_loc[, alibi][, key, value, slots]) -> (out[, cache]), as
 * kernels.h says. */
static XLA_FFI_Error *paged_attention(XLA_FFI_CallFrame *f) {
  if (answered_probe(f) || f->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  const bool has_alibi = attr(f, "has_alibi") != 0, has_write = attr(f, "has_write") != 0;
  const XLA_FFI_Buffer *q = arg_buffer(f, 0), *cache = arg_buffer(f, 1), *table = arg_buffer(f, 2);
  const XLA_FFI_Buffer *lens = arg_buffer(f, 3), *starts = arg_buffer(f, 4), *out = ret_buffer(f, 0);
  const XLA_FFI_Buffer *alibi = has_alibi ? arg_buffer(f, 5) : NULL;
  const int64_t w = 5 + has_alibi; /* key, value, slots */
  const XLA_FFI_Buffer *key = has_write ? arg_buffer(f, w) : NULL, *value = has_write ? arg_buffer(f, w + 1) : NULL;
  const XLA_FFI_Buffer *slots = has_write ? arg_buffer(f, w + 2) : NULL, *written = has_write ? ret_buffer(f, 1) : NULL;
  bool ok = f->args.size == w + 3 * has_write && f->rets.size == 1 + has_write && q != NULL && cache != NULL &&
            table != NULL && lens != NULL && starts != NULL && out != NULL && q->dtype == XLA_FFI_DataType_F32 &&
            q->rank == 3 && (cache->dtype == XLA_FFI_DataType_F32 || cache->dtype == XLA_FFI_DataType_BF16) &&
            cache->rank == 4 && table->dtype == XLA_FFI_DataType_S32 && table->rank == 2 &&
            lens->dtype == XLA_FFI_DataType_S32 && lens->rank == 1 && starts->dtype == XLA_FFI_DataType_S32 &&
            starts->rank == 1 && out->dtype == XLA_FFI_DataType_F32 && out->rank == 3;
  tpu_paged_shape s = {0};
  if (ok) {
    s = (tpu_paged_shape){.tokens = q->dims[0], .heads = q->dims[1], .kv_heads = cache->dims[1],
                          .head_dim = q->dims[2], .blocks = cache->dims[0], .block_size = cache->dims[2],
                          .requests = table->dims[0], .width = table->dims[1],
                          .bf16_cache = cache->dtype == XLA_FFI_DataType_BF16};
    ok = cache->dims[3] == 2 * s.head_dim && lens->dims[0] == s.requests && starts->dims[0] == s.requests + 1 &&
         out->dims[0] == s.tokens && out->dims[1] == s.heads && out->dims[2] == s.head_dim &&
         (!has_alibi || (alibi != NULL && alibi->dtype == XLA_FFI_DataType_F32 && alibi->rank == 1 &&
                         alibi->dims[0] == s.heads));
  }
  if (ok && has_write)
    ok = key != NULL && value != NULL && slots != NULL && written != NULL && key->dtype == cache->dtype &&
         value->dtype == cache->dtype && key->rank == 3 && value->rank == 3 && slots->dtype == XLA_FFI_DataType_S32 &&
         slots->rank == 1 && key->dims[0] == slots->dims[0] && value->dims[0] == slots->dims[0] &&
         key->dims[1] == s.kv_heads && value->dims[1] == s.kv_heads && key->dims[2] == s.head_dim &&
         value->dims[2] == s.head_dim && written->dtype == cache->dtype;
  if (!ok) return ffi_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT, TPU_KERNEL_PAGED_ATTENTION_CALL ": bad operands");
  const void *kv = cache->data;
  if (has_write) { /* XLA aliases the result to the cache; where it could not, it starts as a copy */
    const size_t bytes = (size_t)(s.blocks * s.kv_heads * s.block_size * 2 * s.head_dim) * (s.bf16_cache ? 2 : 4);
    if (written->data != cache->data && bytes > 0) memcpy(written->data, cache->data, bytes);
    tpu_paged_cache_write(&s, key->data, value->data, slots->data, slots->dims[0], written->data);
    kv = written->data;
  }
  tpu_paged_params p = {.scale = (float)attr(f, "scale"), .soft_cap = (float)attr(f, "soft_cap"),
                        .window = (int64_t)attr(f, "window"), .alibi = has_alibi ? alibi->data : NULL};
  xla_pool pool = pool_of(f);
  tpu_parallel par = {.run = pool_run, .ctx = &pool};
  if (!tpu_paged_attention(&s, &p, q->data, kv, table->data, lens->data, starts->data, out->data, &par))
    return ffi_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                     TPU_KERNEL_PAGED_ATTENTION_CALL ": head size over the kernel's, or heads not grouped");
  return NULL;
}

static unsigned matmul_variants(void) { return tpu_matmul_bf16_available() ? TPU_KERNEL_MATMUL_BF16 : 0; }

/* Every kernel: its name in TORCHTPU_KERNELS, its bit, its custom calls and
 * their handlers, and, for one that needs an instruction set, the one this
 * CPU gives it (NULL from |isa|: it cannot run here; no |isa|: it runs on
 * any host). */
typedef XLA_FFI_Error *handler_fn(XLA_FFI_CallFrame *f);
static const struct kernel {
  const char *name;
  unsigned bit;
  int calls;
  const char *targets[3];
  handler_fn *handlers[3];
  const char *(*isa)(void);
  unsigned (*variants)(void); /* bits of what more the kernel takes on this CPU (NULL: none) */
} kernels[] = {
    {"attention", TPU_KERNEL_ATTENTION, 2, {TPU_KERNEL_ATTENTION_FWD, TPU_KERNEL_ATTENTION_BWD},
     {attention_fwd, attention_bwd}, NULL, NULL},
    {"paged_attention", TPU_KERNEL_PAGED_ATTENTION, 1, {TPU_KERNEL_PAGED_ATTENTION_CALL}, {paged_attention}, NULL,
     NULL},
    {"matmul", TPU_KERNEL_MATMUL, 2, {TPU_KERNEL_MATMUL_CALL, TPU_KERNEL_GROUPED_MATMUL_CALL},
     {matmul, grouped_matmul}, tpu_matmul_isa, matmul_variants},
};
enum { NUM_KERNELS = sizeof kernels / sizeof *kernels };

void tpu_kernels_describe(unsigned bits, char *buf, size_t cap) {
  size_t n = 0;
  if (cap > 0) buf[0] = '\0';
  for (int i = 0; i < NUM_KERNELS && n < cap; i++) {
    if ((bits & kernels[i].bit) == 0) continue;
    const char *isa = kernels[i].isa != NULL ? kernels[i].isa() : NULL;
    int w = snprintf(buf + n, cap - n, "%s%s%s%s%s", n > 0 ? ", " : "", kernels[i].name, isa ? " (" : "",
                     isa ? isa : "", isa ? ")" : "");
    n += w > 0 ? (size_t)w : 0;
  }
}

bool tpu_kernels_select(const char *setting, unsigned *out_bits) {
  *out_bits = 0;
  if (strcmp(setting, "0") == 0 || strcasecmp(setting, "off") == 0 || strcasecmp(setting, "none") == 0) return true;
  const bool all = strcmp(setting, "1") == 0 || strcasecmp(setting, "on") == 0 || strcasecmp(setting, "all") == 0;
  unsigned bits = 0;
  for (int i = 0; all && i < NUM_KERNELS; i++) bits |= kernels[i].bit;
  for (const char *p = setting; !all && *p != '\0';) {
    const size_t len = strcspn(p, ",");
    int i = 0;
    while (i < NUM_KERNELS && (strlen(kernels[i].name) != len || strncasecmp(p, kernels[i].name, len) != 0)) i++;
    if (i == NUM_KERNELS) return false;
    bits |= kernels[i].bit;
    p += len + (p[len] == ',');
  }
  *out_bits = bits;
  return true;
}

/* Bytes per element of xla::PrimitiveType |t| (0: not one we pass). */
static size_t dtype_bytes(int t) {
  switch (t) {
    case 1: case 2: case 6: case 19: case 20: case 23: case 24: case 25: return 1; /* PRED, S8, U8, F8s */
    case 3: case 7: case 10: case 16: return 2;                                  /* S16, U16, F16, BF16 */
    case 4: case 8: case 11: return 4;                                           /* S32, U32, F32 */
    case 5: case 9: case 12: case 15: return 8;                                  /* S64, U64, F64, C64 */
    case 18: return 16;                                                          /* C128 */
    default: return 0;
  }
}

/* torchtpu_boundary: result i is operand i (XLA aliases them; where it
 * could not, a copy); the operands after the results are only kept alive. */
static XLA_FFI_Error *boundary(XLA_FFI_CallFrame *f) {
  if (answered_probe(f) || f->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  if (f->rets.size < 1 || f->args.size < f->rets.size)
    return ffi_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT, TPU_KERNEL_BOUNDARY_CALL ": bad operands");
  for (int64_t i = 0; i < f->rets.size; i++) {
    const XLA_FFI_Buffer *x = arg_buffer(f, i), *y = ret_buffer(f, i);
    size_t bytes = x != NULL ? dtype_bytes(x->dtype) : 0;
    if (x == NULL || y == NULL || bytes == 0 || x->dtype != y->dtype)
      return ffi_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT, TPU_KERNEL_BOUNDARY_CALL ": bad operands");
    if (y->data == x->data) continue;
    for (int64_t d = 0; d < x->rank; d++) bytes *= (size_t)x->dims[d];
    if (bytes > 0) memcpy(y->data, x->data, bytes);
  }
  return NULL;
}

unsigned tpu_kernels_register(tpu_runtime *rt, unsigned wanted) {
  if (strcmp(tpu_runtime_platform_name(rt), "cpu") != 0) return 0;
  unsigned bits = 0;
  tpu_status_t bst = tpu_runtime_register_ffi(rt, TPU_KERNEL_BOUNDARY_CALL, (void *)boundary);
  if (bst == NULL) bits |= TPU_KERNEL_BOUNDARY;
  else tpu_status_free(bst);
  for (int i = 0; i < NUM_KERNELS; i++) {
    const struct kernel *k = &kernels[i];
    if ((wanted & k->bit) == 0 || (k->isa != NULL && k->isa() == NULL)) continue;
    tpu_status_t st = NULL;
    for (int c = 0; c < k->calls && st == NULL; c++)
      st = tpu_runtime_register_ffi(rt, k->targets[c], (void *)k->handlers[c]);
    if (st == NULL)
      bits |= k->bit | (k->variants != NULL ? k->variants() : 0);
    else
      tpu_status_free(st);
  }
  return bits;
}
