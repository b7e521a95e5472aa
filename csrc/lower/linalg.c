/* Matrix products: mm, bmm, mv, dot, vdot and the add* forms addmm, baddbmm,
 * addbmm, addmv. torch.matmul, F.linear, outer and their backwards are
 * PyTorch composites of these. Next to them: conj_physical and angle (the
 * complex-number ops the products' composites use) and the pairwise
 * distances of cdist.
 *
 * Each product is one dot_general that accumulates in the output's opmath
 * type: half inputs give a float32 product that is rounded once at the end,
 * as PyTorch's CPU kernels do; float32 uses c->precision. The add* forms
 * compute beta * self + alpha * product in that type, and beta == 0 ignores
 * self entirely (NaN and inf in it do not propagate), as PyTorch documents;
 * beta is a runtime value, so that choice is a select. Where the matmul
 * kernel is registered, float32 mm and bmm with a transposed operand call it
 * instead (XLA's CPU dots run those at Eigen's speed, up to half the plain
 * ones'), handing it what the operand transposes; so do bfloat16 ones in
 * every layout where the kernel has its AVX-512 BF16 inner kernel (XLA's
 * CPU dots run bfloat16 no faster than float32). The kernel's float32
 * result is rounded once, as the dot's is. */
#include <math.h>
#include <stdio.h>

#include "kernels/kernels.h"
#include "lower/rules.h"

/* How the two operands contract, per product kind (data of the rules). */
enum { MM, BMM, BSUM, MV, DOT, VDOT };

static const tpu_hlo_dot_dims dims_of[] = {
    [MM] = {.num_contract = 1, .lhs_contract = {1}, .rhs_contract = {0}},
    [BMM] = {.num_batch = 1, .lhs_batch = {0}, .rhs_batch = {0}, .num_contract = 1, .lhs_contract = {2},
             .rhs_contract = {1}},
    /* addbmm: the batch is summed, so it is contracted too */
    [BSUM] = {.num_contract = 2, .lhs_contract = {0, 2}, .rhs_contract = {0, 1}},
    [MV] = {.num_contract = 1, .lhs_contract = {1}, .rhs_contract = {0}},
    [DOT] = {.num_contract = 1, .lhs_contract = {0}, .rhs_contract = {0}},
    [VDOT] = {.num_contract = 1, .lhs_contract = {0}, .rhs_contract = {0}},
};

/* The CPU kernel PyTorch's error names for bool operands. */
static const char *const cpu_kernel_of[] = {
    [MM] = "addmm_impl_cpu_", [BMM] = "bmm", [BSUM] = "addmm_impl_cpu_",
    [MV] = "addmv_impl_cpu",  [DOT] = "dot", [VDOT] = "dot",
};

static tpu_hlo_value conj_(tpu_lower_ctx *c, tpu_hlo_value x) {
  tpu_hlo_value im = tpu_hlo_unary(B, TPU_HLO_NEG, tpu_hlo_unary(B, TPU_HLO_IMAG, x));
  return tpu_hlo_binary(B, TPU_HLO_COMPLEX, tpu_hlo_unary(B, TPU_HLO_REAL, x), im);
}

/* PyTorch's CPU error for bool operands (its meta functions accept them). */
static tpu_status_t no_bool(tpu_lower_ctx *c) {
  return tpu_lower_not_implemented(cpu_kernel_of[c->data], TPU_BOOL);
}

/* The C++ type names PyTorch's mm spells dtypes with in its dtype check. */
static const char *cpp_type(tpu_dtype_t t) {
  static const char *const names[TPU_DTYPE_END] = {
      [TPU_BOOL] = "bool",        [TPU_S8] = "signed char",       [TPU_S16] = "short int",
      [TPU_S32] = "int",          [TPU_S64] = "long int",         [TPU_U8] = "unsigned char",
      [TPU_F16] = "c10::Half",    [TPU_BF16] = "c10::BFloat16",   [TPU_F32] = "float",
      [TPU_F64] = "double",       [TPU_C64] = "c10::complex<float>", [TPU_C128] = "c10::complex<double>"};
  return names[t] ? names[t] : tpu_dtype_name(t);
}

/* PyTorch's CPU error for operands of different dtypes (the meta functions
 * of mm, addmm, addbmm and mv do not check); NULL if they agree. |add|: the
 * operands follow self. */
static tpu_status_t mixed_dtypes(tpu_lower_ctx *c, bool add) {
  tpu_dtype_t a = c->args[add].dtype, b = c->args[add + 1].dtype;
  if (add && c->args[0].dtype != b)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "self and mat2 must have the same dtype, but got %s and %s",
                           tpu_dtype_scalar_type(c->args[0].dtype), tpu_dtype_scalar_type(b));
  if (a == b) return NULL;
  if (add)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "mat1 and mat2 must have the same dtype, but got %s and %s",
                           tpu_dtype_scalar_type(a), tpu_dtype_scalar_type(b));
  if (c->data == MV) /* mv runs as addmv into a result of the vector's dtype */
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "addmv input tensors must have the same dtype, but got %s, %s, and %s",
                           tpu_dtype_scalar_type(b), tpu_dtype_scalar_type(a), tpu_dtype_scalar_type(b));
  return tpu_lower_error(c, TPU_ERR_RUNTIME, "expected m1 and m2 to have the same dtype, but got: %s != %s",
                         cpp_type(a), cpp_type(b));
}

/* Products of fewer multiply-adds than this stay with XLA: the kernel's
 * fixed cost (about 15 us: scratch, packing, waking a helper thread) makes
 * it 2x slower at 64^3 and even at about 100^3 (eager, this VM). */
enum { KERNEL_MIN_WORK = 1 << 21 };

static const int64_t swap2[2] = {1, 0}, swap3[3] = {0, 2, 1};

/* Whether the matmul kernel is registered and takes operands |x| and |y|:
 * both float32, or both bfloat16 where the CPU has the bfloat16 kernel. */
static bool kernel_takes(const tpu_lower_ctx *c, const tpu_lower_arg *x, const tpu_lower_arg *y) {
  const bool bf16 = x->dtype == TPU_BF16 && (c->kernels & TPU_KERNEL_MATMUL_BF16) != 0;
  return (c->kernels & TPU_KERNEL_MATMUL) != 0 && (x->dtype == TPU_F32 || bf16) && y->dtype == x->dtype;
}

/* The matmul kernel's product of |a| and |b| (arguments |lhs| and |lhs| +
 * 1), in float32, plus argument |bias| ([N], added to every row; -1 for
 * none), or TPU_HLO_NONE where XLA's dot is as fast: other dtypes and kinds,
 * small products, and plain float32 layouts (XLA sends those to YNNPACK; it
 * is the products with a transposed operand that it runs slowly). A
 * transposed operand reaches the kernel as the value it transposes (lhs_t,
 * rhs_t). */
static tpu_hlo_value kernel_product(tpu_lower_ctx *c, int lhs, tpu_hlo_value a, tpu_hlo_value b, int bias) {
  const tpu_lower_arg *x = &c->args[lhs], *y = &c->args[lhs + 1];
  const bool bf16 = x->dtype == TPU_BF16;
  if (!kernel_takes(c, x, y) || (c->data != MM && c->data != BMM)) return TPU_HLO_NONE;
  const int r = x->rank;
  const int64_t *swap = r == 2 ? swap2 : swap3;
  const bool lt = tpu_hlo_is_transpose(B, a, swap), rt = tpu_hlo_is_transpose(B, b, swap);
  const double work = (r == 3 ? (double)x->sizes[0] : 1.0) * (double)x->sizes[r - 2] * (double)x->sizes[r - 1] *
                      (double)y->sizes[r - 1];
  /* Plain float32 layouts stay with XLA, as fast there; bfloat16 ones not */
  if ((!lt && !rt && !bf16) || work < KERNEL_MIN_WORK) return TPU_HLO_NONE;
  int64_t dims[3] = {x->sizes[0], x->sizes[1], 0};
  dims[r - 1] = y->sizes[r - 1];
  const tpu_hlo_type t = tpu_hlo_make_type(TPU_F32, r, dims);
  tpu_hlo_value ops[3] = {lt ? tpu_hlo_transpose(B, a, swap) : a, rt ? tpu_hlo_transpose(B, b, swap) : b,
                          bias >= 0 ? tpu_lower_tensor(c, bias) : TPU_HLO_NONE},
                res;
  char attrs[224];
  snprintf(attrs, sizeof attrs,
           "call_target_name = \"%s\", api_version = 4 : i32, backend_config = {has_bias = %d : i32, "
           "lhs_t = %d : i32, rhs_t = %d : i32}",
           TPU_KERNEL_MATMUL_CALL, bias >= 0, lt, rt);
  tpu_hlo_op(B, "stablehlo.custom_call", ops, 2 + (bias >= 0), NULL, 0, attrs, &t, 1, &res);
  return res;
}

/* The product of arguments |lhs| and |lhs| + 1, in the output's opmath type. */
static tpu_hlo_value product(tpu_lower_ctx *c, int lhs) {
  tpu_hlo_value a = tpu_lower_tensor(c, lhs), b = tpu_lower_tensor(c, lhs + 1);
  tpu_hlo_value k = kernel_product(c, lhs, a, b, -1);
  if (k != TPU_HLO_NONE) return k;
  if (c->data == VDOT && tpu_dtype_is_complex(c->args[lhs].dtype)) a = conj_(c, a);
  return tpu_hlo_dot_general(B, a, b, &dims_of[c->data], tpu_lower_opmath(OUT->dtype), c->precision);
}

/* mm, bmm, mv, dot, vdot (self, other) */
static tpu_status_t product_rule(tpu_lower_ctx *c) {
  tpu_status_t st = mixed_dtypes(c, false);
  if (st != NULL) return st;
  if (c->args[0].dtype == TPU_BOOL) return no_bool(c);
  tpu_lower_set_output(c, 0, product(c, 0));
  return NULL;
}

/* Whether scalar argument |arg| is a constant 1 (absent: its default, 1). */
static bool is_one(const tpu_lower_ctx *c, int arg) {
  const tpu_lower_arg *a = &c->args[arg];
  return tpu_lower_is_none(c, arg) || (a->kind == TPU_ARG_SCALAR && a->is_const && a->f == 1.0 && a->fi == 0.0);
}

/* addmm, baddbmm, addbmm, addmv (self, a, b, *, beta, alpha). F.linear's
 * addmm (a float32 [N] self, beta and alpha constants 1, as compiled graphs
 * have them) hands self to the kernel as its bias. */
static tpu_status_t add_product_rule(tpu_lower_ctx *c) {
  tpu_status_t st = mixed_dtypes(c, true);
  if (st != NULL) return st;
  if (c->args[1].dtype == TPU_BOOL) return no_bool(c);
  const bool linear = c->data == MM && c->args[0].rank == 1 && c->args[0].sizes[0] == c->args[2].sizes[1] &&
                      c->args[0].dtype == TPU_F32 && is_one(c, 3) && is_one(c, 4);
  if (linear) { /* the kernel adds self, if it takes the product (reading a tensor twice is free) */
    tpu_hlo_value k = kernel_product(c, 1, tpu_lower_tensor(c, 1), tpu_lower_tensor(c, 2), 0);
    if (k != TPU_HLO_NONE) return done(c, k);
  }
  tpu_hlo_type t = *OUT;
  t.dtype = tpu_lower_opmath(OUT->dtype);
  tpu_hlo_value beta = tpu_lower_operand(c, 3, t.dtype, &t), alpha = tpu_lower_operand(c, 4, t.dtype, &t);
  tpu_hlo_value scaled = tpu_hlo_binary(B, TPU_HLO_MUL, alpha, product(c, 1));
  tpu_hlo_value self = tpu_hlo_binary(B, TPU_HLO_MUL, beta, tpu_lower_operand(c, 0, t.dtype, &t));
  tpu_hlo_value ignore_self = tpu_hlo_compare(B, TPU_HLO_EQ, beta, tpu_hlo_const_f64(B, &t, 0.0));
  tpu_lower_set_output(c, 0, tpu_hlo_select(B, ignore_self, scaled, tpu_hlo_binary(B, TPU_HLO_ADD, self, scaled)));
  return NULL;
}

/* Which of |n| positions (rows, columns or the contraction, by the case)
 * each of the G groups of _grouped_mm owns: [G, n], true where group g's
 * offsets hold the position, offs[g - 1] <= i < offs[g] (offs[-1] = 0). */
static tpu_hlo_value group_mask(tpu_lower_ctx *c, int64_t n) {
  const int64_t g = c->args[2].sizes[0], dims[2] = {g, n}, groups_dim = 0;
  const int64_t shift = 1, drop_last = -1, interior = 0;
  tpu_hlo_value ends = tpu_hlo_convert(B, tpu_lower_tensor(c, 2), TPU_S64);
  tpu_hlo_value starts = tpu_hlo_pad(B, ends, tpu_hlo_scalar_i64(B, TPU_S64, 0), &shift, &drop_last, &interior);
  const tpu_hlo_type t = tpu_hlo_make_type(TPU_S64, 2, dims);
  tpu_hlo_value at = tpu_hlo_iota(B, &t, 1);
  return and_(c, cmp(c, TPU_HLO_GE, at, tpu_hlo_broadcast_in_dim(B, starts, &t, &groups_dim)),
              cmp(c, TPU_HLO_LT, at, tpu_hlo_broadcast_in_dim(B, ends, &t, &groups_dim)));
}

/* Where |mask| ([G, n], put at dims |mdims| of |t|'s shape) holds, |x|;
 * zero elsewhere. A select: a NaN or inf that belongs to another group does
 * not reach this one. */
static tpu_hlo_value keep_group(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value mask, const int64_t *mdims) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, x);
  const tpu_dtype_t dtype = t.dtype;
  t.dtype = TPU_BOOL;
  tpu_hlo_value keep = tpu_hlo_broadcast_in_dim(B, mask, &t, mdims);
  t.dtype = dtype;
  return sel(c, keep, x, tpu_hlo_const_f64(B, &t, 0.0));
}

/* 2d |x| [n, m] spread over the G groups as [G, n, m], kept where |mask|
 * (over dim |dim| of the result) gives the position to the group. */
static tpu_hlo_value spread_groups(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value mask, int dim) {
  const tpu_hlo_type *xt = tpu_hlo_type_of(B, x);
  const int64_t dims[3] = {tpu_hlo_type_of(B, mask)->dims[0], xt->dims[0], xt->dims[1]}, xdims[2] = {1, 2},
                mdims[2] = {0, dim};
  const tpu_hlo_type t = tpu_hlo_make_type(xt->dtype, 3, dims);
  return keep_group(c, tpu_hlo_broadcast_in_dim(B, x, &t, xdims), mask, mdims);
}

/* The matmul kernel's grouped product (kernels.h) for the 2d x 3d and 2d x 2d
 * cases of _grouped_mm, in float32, or TPU_HLO_NONE where the kernel is not
 * registered, lacks the dtype, or the product is small. It does each group's
 * multiply-adds only; A reaches it row-major for groups of rows, and
 * transposed (as a weight gradient has it) for groups of the contraction. */
static tpu_hlo_value grouped_kernel(tpu_lower_ctx *c, tpu_hlo_value a, tpu_hlo_value b) {
  const tpu_lower_arg *x = &c->args[0], *y = &c->args[1];
  const bool rows = y->rank == 3;
  if (!kernel_takes(c, x, y) || x->rank != 2 ||
      (double)x->sizes[0] * (double)x->sizes[1] * (double)y->sizes[y->rank - 1] < KERNEL_MIN_WORK)
    return TPU_HLO_NONE;
  bool rt = false;
  if (rows) {
    rt = tpu_hlo_is_transpose(B, b, swap3);
    if (rt) b = tpu_hlo_transpose(B, b, swap3);
  } else {
    a = tpu_hlo_transpose(B, a, swap2);
  }
  tpu_hlo_value ops[3] = {a, b, tpu_lower_tensor(c, 2)}, res;
  tpu_hlo_type t = *OUT;
  t.dtype = TPU_F32;
  char attrs[160];
  snprintf(attrs, sizeof attrs,
           "call_target_name = \"%s\", api_version = 4 : i32, backend_config = {rhs_t = %d : i32, rows = %d : i32}",
           TPU_KERNEL_GROUPED_MATMUL_CALL, rt, rows);
  tpu_hlo_op(B, "stablehlo.custom_call", ops, 3, NULL, 0, attrs, &t, 1, &res);
  return res;
}

/* _grouped_mm(self, mat2, offs, bias, out_dtype): a product per group, the
 * groups delimited at run time by the int32 offsets (where each group's rows,
 * columns or contraction slice ends), as MoE layers route tokens to experts:
 *   2d x 3d: rows of self by group, times mat2[g]          -> [M, N]
 *   3d x 2d: self[g] times columns of mat2 by group        -> [M, N]
 *   2d x 2d: the contraction by group, one product each    -> [G, M, N]
 *   3d x 3d: bmm (no offsets).
 * Where the matmul kernel serves the case (2d x 3d, 2d x 2d), it computes
 * each group's product alone. Otherwise, in static shapes: every group's
 * product is made and each position keeps its own group's (2d x 2d: both
 * operands are spread over the groups, zero outside each group's slice), so
 * it costs G times the multiply-adds of the plain product, and values of one
 * group never meet another's. Positions past the last offset are zero (CPU
 * leaves them unwritten). The checks (dtypes, dims, offsets) are the meta
 * function's (torchtpu/_meta.py), as in PyTorch's kernels. */
static tpu_status_t grouped_mm_rule(tpu_lower_ctx *c) {
  const tpu_lower_arg *x = &c->args[0], *y = &c->args[1];
  tpu_hlo_value k = grouped_kernel(c, tpu_lower_tensor(c, 0), tpu_lower_tensor(c, 1));
  if (k != TPU_HLO_NONE) return done(c, k);
  /* Half operands are widened first (their products are exact in float32):
   * XLA's CPU dots refuse some half layouts with a float32 result. */
  const tpu_dtype_t acc = tpu_lower_opmath(OUT->dtype);
  tpu_hlo_value a = tensor_as(c, 0, acc), b = tensor_as(c, 1, acc);
  if (x->rank == 3 && y->rank == 3) return done(c, tpu_hlo_dot_general(B, a, b, &dims_of[BMM], acc, c->precision));
  if (x->rank == 2 && y->rank == 2) { /* the contraction by group (its length checked equal by the meta) */
    tpu_hlo_value steps = group_mask(c, x->sizes[1]);
    return done(c, tpu_hlo_dot_general(B, spread_groups(c, a, steps, 2), spread_groups(c, b, steps, 1),
                                       &dims_of[BMM], acc, c->precision));
  }
  int64_t groups;
  tpu_hlo_value kept;
  if (x->rank == 2) { /* rows of self: [M, G, N] */
    static const tpu_hlo_dot_dims d = {.num_contract = 1, .lhs_contract = {1}, .rhs_contract = {1}};
    static const int64_t rows[2] = {1, 0};
    groups = 1;
    kept = keep_group(c, tpu_hlo_dot_general(B, a, b, &d, acc, c->precision), group_mask(c, x->sizes[0]), rows);
  } else { /* columns of mat2: [G, M, N] */
    static const tpu_hlo_dot_dims d = {.num_contract = 1, .lhs_contract = {2}, .rhs_contract = {0}};
    static const int64_t cols[2] = {0, 2};
    groups = 0;
    kept = keep_group(c, tpu_hlo_dot_general(B, a, b, &d, acc, c->precision), group_mask(c, y->sizes[1]), cols);
  }
  return done(c, tpu_lower_reduce(B, kept, TPU_HLO_ADD, &groups, 1));
}

/* _conj_physical(self), conj_physical_ and conj_physical.out (conj_physical
 * itself is a composite that returns a real tensor unchanged) */
static tpu_status_t conj_physical_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  return done(c, tpu_dtype_is_complex(c->args[0].dtype) ? conj_(c, x) : x);
}

/* angle(self): atan2(imag, real); a real x gives pi below zero, else 0
 * (NaN stays NaN), in the output's float type. */
static tpu_status_t angle_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  if (tpu_dtype_is_complex(c->args[0].dtype))
    return done(c, tpu_hlo_binary(B, TPU_HLO_ATAN2, un(c, TPU_HLO_IMAG, x), un(c, TPU_HLO_REAL, x)));
  tpu_hlo_type t = *OUT;
  t.dtype = tpu_lower_opmath(OUT->dtype);
  x = tpu_hlo_convert(B, x, t.dtype);
  tpu_hlo_value zero = tpu_hlo_const_f64(B, &t, 0.0);
  tpu_hlo_value r = sel(c, cmp(c, TPU_HLO_LT, x, zero), tpu_hlo_const_f64(B, &t, M_PI), zero);
  return done(c, sel(c, is_nan(c, x), x, r));
}

/* Tensor argument |arg| with a size-1 dim inserted before dim |at| counted
 * from the end, broadcast to |t|. */
static tpu_hlo_value spread_rows(tpu_lower_ctx *c, int arg, int at, const tpu_hlo_type *t) {
  const tpu_lower_arg *a = &c->args[arg];
  int64_t dims[TPU_HLO_MAX_RANK];
  int k = a->rank - at;
  for (int d = 0, j = 0; d <= a->rank; d++) dims[d] = d == k ? 1 : a->sizes[j++];
  return tpu_hlo_broadcast_to(B, tpu_hlo_reshape(B, tpu_lower_tensor(c, arg), a->rank + 1, dims), t);
}

/* _cdist_forward(x1, x2, p, compute_mode): the p-norm distance of every
 * pair of rows, from their differences (PyTorch's matrix-product shortcut
 * for p = 2 is a speed trade that loses accuracy). */
static tpu_status_t cdist_rule(tpu_lower_ctx *c) {
  double p = tpu_lower_float(c, 2, 2.0);
  int r = OUT->rank;
  tpu_hlo_type t = *OUT;
  t.rank = r + 1;
  t.dims[r] = c->args[0].sizes[c->args[0].rank - 1];
  t.dtype = tpu_lower_opmath(OUT->dtype);
  tpu_hlo_value d = un(c, TPU_HLO_ABS, sub(c, spread_rows(c, 0, 1, &t), spread_rows(c, 1, 2, &t)));
  int64_t last = r;
  if (p == 0.0)
    return done(c, tpu_lower_reduce(B, tpu_hlo_convert(B, cmp(c, TPU_HLO_NE, d, tpu_hlo_const_f64(B, &t, 0.0)), t.dtype),
                                    TPU_HLO_ADD, &last, 1));
  if (isinf(p)) return done(c, tpu_lower_reduce(B, d, TPU_HLO_MAX, &last, 1));
  if (p == 1.0) return done(c, tpu_lower_reduce(B, d, TPU_HLO_ADD, &last, 1));
  if (p == 2.0) return done(c, un(c, TPU_HLO_SQRT, tpu_lower_reduce(B, mul(c, d, d), TPU_HLO_ADD, &last, 1)));
  tpu_hlo_value sum = tpu_lower_reduce(B, tpu_hlo_binary(B, TPU_HLO_POW, d, tpu_hlo_const_f64(B, &t, p)), TPU_HLO_ADD,
                                       &last, 1);
  tpu_hlo_type st = *tpu_hlo_type_of(B, sum);
  return done(c, tpu_hlo_binary(B, TPU_HLO_POW, sum, tpu_hlo_const_f64(B, &st, 1.0 / p)));
}

/* _cdist_backward(grad, x1, x2, p, cdist): the gradient for x1, summed over
 * the rows of x2; pairs at distance 0 contribute nothing, and p = inf
 * sends it to the coordinates that reach the maximum, as PyTorch's kernel. */
static tpu_status_t cdist_backward_rule(tpu_lower_ctx *c) {
  double p = tpu_lower_float(c, 3, 2.0);
  const tpu_lower_arg *g = &c->args[0];
  tpu_hlo_type t = *OUT;
  t.rank = g->rank + 1;
  for (int d = 0; d < g->rank; d++) t.dims[d] = g->sizes[d];
  t.dims[g->rank] = OUT->dims[OUT->rank - 1];
  t.dtype = tpu_lower_opmath(OUT->dtype);
  if (tpu_hlo_type_numel(&t) == 0) return done(c, tpu_hlo_const_f64(B, OUT, 0.0)); /* zeros like x1, as PyTorch */
  tpu_hlo_value diff = sub(c, spread_rows(c, 1, 1, &t), spread_rows(c, 2, 2, &t));
  tpu_hlo_value dist = tpu_hlo_broadcast_to(B, spread_rows(c, 4, 0, &t), &t);
  tpu_hlo_value zero = tpu_hlo_const_f64(B, &t, 0.0), sign = un(c, TPU_HLO_SIGN, diff), d;
  if (p == 0.0) d = zero;
  else if (p == 1.0) d = sign;
  else if (isinf(p)) d = sel(c, cmp(c, TPU_HLO_EQ, un(c, TPU_HLO_ABS, diff), dist), sign, zero);
  else if (p == 2.0) d = dvd(c, diff, dist);
  else d = dvd(c, mul(c, sign, tpu_hlo_binary(B, TPU_HLO_POW, un(c, TPU_HLO_ABS, diff), tpu_hlo_const_f64(B, &t, p - 1))),
               tpu_hlo_binary(B, TPU_HLO_POW, dist, tpu_hlo_const_f64(B, &t, p - 1)));
  d = sel(c, cmp(c, TPU_HLO_EQ, dist, zero), zero, d);
  int64_t rows = g->rank - 1;
  tpu_hlo_value sum = tpu_lower_reduce(B, mul(c, spread_rows(c, 0, 0, &t), d), TPU_HLO_ADD, &rows, 1);
  return done(c, tpu_hlo_reshape(B, sum, OUT->rank, OUT->dims));
}

const tpu_lower_rule tpu_rules_linalg[] = {
    {{"mm", "mm.out"}, product_rule, TPU_RULE_MATMUL_PRECISION, MM},
    {{"bmm", "bmm.out"}, product_rule, TPU_RULE_MATMUL_PRECISION, BMM},
    {{"mv", "mv.out"}, product_rule, TPU_RULE_MATMUL_PRECISION, MV},
    {{"dot", "dot.out"}, product_rule, TPU_RULE_MATMUL_PRECISION, DOT},
    {{"vdot", "vdot.out"}, product_rule, TPU_RULE_MATMUL_PRECISION, VDOT},
    {{"addmm", "addmm_", "addmm.out"}, add_product_rule, TPU_RULE_MATMUL_PRECISION, MM},
    {{"baddbmm", "baddbmm_", "baddbmm.out"}, add_product_rule, TPU_RULE_MATMUL_PRECISION, BMM},
    {{"addbmm", "addbmm_", "addbmm.out"}, add_product_rule, TPU_RULE_MATMUL_PRECISION, BSUM},
    {{"addmv", "addmv_", "addmv.out"}, add_product_rule, TPU_RULE_MATMUL_PRECISION, MV},
    {{"_conj_physical", "conj_physical_", "conj_physical.out"}, conj_physical_rule, 0, 0},
    {{"angle", "angle.out"}, angle_rule, 0, 0},
    {{"_cdist_forward", "_cdist_forward.out"}, cdist_rule, 0, 0},
    {{"_cdist_backward", "_cdist_backward.out"}, cdist_backward_rule, 0, 0},
    {{"_grouped_mm"}, grouped_mm_rule, TPU_RULE_MATMUL_PRECISION, 0},
};
TPU_COUNT_RULES(linalg);
