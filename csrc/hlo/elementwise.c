/* Elementwise ops: unary and binary arithmetic, comparisons, select, clamp,
 * conversions, bitcasts and the barrier that keeps XLA from fusing across. Part of the builder (builder.c). */
#include "hlo/builder_impl.h"

/* --- elementwise ----------------------------------------------------------------------- */

static const char *const binary_names[TPU_HLO_BINARY_COUNT_] = {
    [TPU_HLO_ADD] = "stablehlo.add",
    [TPU_HLO_SUB] = "stablehlo.subtract",
    [TPU_HLO_MUL] = "stablehlo.multiply",
    [TPU_HLO_DIV] = "stablehlo.divide",
    [TPU_HLO_REM] = "stablehlo.remainder",
    [TPU_HLO_MAX] = "stablehlo.maximum",
    [TPU_HLO_MIN] = "stablehlo.minimum",
    [TPU_HLO_POW] = "stablehlo.power",
    [TPU_HLO_ATAN2] = "stablehlo.atan2",
    [TPU_HLO_AND] = "stablehlo.and",
    [TPU_HLO_OR] = "stablehlo.or",
    [TPU_HLO_XOR] = "stablehlo.xor",
    [TPU_HLO_SHL] = "stablehlo.shift_left",
    [TPU_HLO_SHR_ARITH] = "stablehlo.shift_right_arithmetic",
    [TPU_HLO_SHR_LOGIC] = "stablehlo.shift_right_logical",
    [TPU_HLO_COMPLEX] = "stablehlo.complex",
    [TPU_HLO_NEXTAFTER] = "chlo.next_after",
    [TPU_HLO_POLYGAMMA] = "chlo.polygamma",
    [TPU_HLO_ZETA] = "chlo.zeta",
};

static const char *const unary_names[TPU_HLO_UNARY_COUNT_] = {
    [TPU_HLO_ABS] = "stablehlo.abs",
    [TPU_HLO_NEG] = "stablehlo.negate",
    [TPU_HLO_EXP] = "stablehlo.exponential",
    [TPU_HLO_EXPM1] = "stablehlo.exponential_minus_one",
    [TPU_HLO_LOG] = "stablehlo.log",
    [TPU_HLO_LOG1P] = "stablehlo.log_plus_one",
    [TPU_HLO_SQRT] = "stablehlo.sqrt",
    [TPU_HLO_RSQRT] = "stablehlo.rsqrt",
    [TPU_HLO_CBRT] = "stablehlo.cbrt",
    [TPU_HLO_TANH] = "stablehlo.tanh",
    [TPU_HLO_LOGISTIC] = "stablehlo.logistic",
    [TPU_HLO_SIN] = "stablehlo.sine",
    [TPU_HLO_COS] = "stablehlo.cosine",
    [TPU_HLO_TAN] = "stablehlo.tan",
    [TPU_HLO_FLOOR] = "stablehlo.floor",
    [TPU_HLO_CEIL] = "stablehlo.ceil",
    [TPU_HLO_ROUND_EVEN] = "stablehlo.round_nearest_even",
    [TPU_HLO_ROUND_AFZ] = "stablehlo.round_nearest_afz",
    [TPU_HLO_SIGN] = "stablehlo.sign",
    [TPU_HLO_NOT] = "stablehlo.not",
    [TPU_HLO_POPCNT] = "stablehlo.popcnt",
    [TPU_HLO_CLZ] = "stablehlo.count_leading_zeros",
    [TPU_HLO_REAL] = "stablehlo.real",
    [TPU_HLO_IMAG] = "stablehlo.imag",
    [TPU_HLO_ERF] = "chlo.erf",
    [TPU_HLO_ERF_INV] = "chlo.erf_inv",
    [TPU_HLO_ERFC] = "chlo.erfc",
    [TPU_HLO_LGAMMA] = "chlo.lgamma",
    [TPU_HLO_DIGAMMA] = "chlo.digamma",
    [TPU_HLO_ASIN] = "chlo.asin",
    [TPU_HLO_ACOS] = "chlo.acos",
    [TPU_HLO_ATAN] = "chlo.atan",
    [TPU_HLO_SINH] = "chlo.sinh",
    [TPU_HLO_COSH] = "chlo.cosh",
    [TPU_HLO_ASINH] = "chlo.asinh",
    [TPU_HLO_ACOSH] = "chlo.acosh",
    [TPU_HLO_ATANH] = "chlo.atanh",
    [TPU_HLO_IS_INF] = "chlo.is_inf",
    [TPU_HLO_IS_NEG_INF] = "chlo.is_neg_inf",
    [TPU_HLO_IS_POS_INF] = "chlo.is_pos_inf",
    [TPU_HLO_IS_FINITE] = "stablehlo.is_finite",
};

tpu_hlo_value tpu_hlo_unary(tpu_hlo_builder *b, tpu_hlo_unary_t op, tpu_hlo_value x) {
  if (!check_operands(b, "unary op", &x, 1)) return TPU_HLO_NONE;
  tpu_hlo_type t = b->values[x].type;
  if (op == TPU_HLO_REAL || op == TPU_HLO_IMAG || op == TPU_HLO_ABS) t.dtype = tpu_dtype_real(t.dtype);
  if (op == TPU_HLO_IS_INF || op == TPU_HLO_IS_NEG_INF || op == TPU_HLO_IS_POS_INF ||
      op == TPU_HLO_IS_FINITE)
    t.dtype = TPU_BOOL;
  return op1(b, unary_names[op], &x, 1, NULL, &t);
}

tpu_hlo_value tpu_hlo_binary(tpu_hlo_builder *b, tpu_hlo_binary_t op, tpu_hlo_value x,
                             tpu_hlo_value y) {
  tpu_hlo_value xy[2] = {x, y};
  if (!check_operands(b, binary_names[op], xy, 2)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type, *ty = &b->values[y].type;
  if (!tpu_hlo_type_equal(tx, ty))
    return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: %s operands differ in type (%s[%d] vs %s[%d])",
                        binary_names[op], tpu_dtype_name(tx->dtype), tx->rank,
                        tpu_dtype_name(ty->dtype), ty->rank);
  tpu_hlo_type t = *tx;
  if (op == TPU_HLO_COMPLEX) t.dtype = t.dtype == TPU_F64 ? TPU_C128 : TPU_C64;
  return op1(b, binary_names[op], xy, 2, NULL, &t);
}

tpu_hlo_value tpu_hlo_compare(tpu_hlo_builder *b, tpu_hlo_cmp_t dir, tpu_hlo_value x,
                              tpu_hlo_value y) {
  static const char *const dirs[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  tpu_hlo_value xy[2] = {x, y};
  if (!check_operands(b, "stablehlo.compare", xy, 2)) return TPU_HLO_NONE;
  const tpu_hlo_type *tx = &b->values[x].type;
  if (!tpu_hlo_type_equal(tx, &b->values[y].type))
    return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: compare operands differ in type");
  const char *ct = "FLOAT";
  if (tpu_dtype_is_signed_int(tx->dtype)) ct = "SIGNED";
  else if (tpu_dtype_is_unsigned_int(tx->dtype) || tx->dtype == TPU_BOOL) ct = "UNSIGNED";
  char attrs[160];
  snprintf(attrs, sizeof attrs,
           "comparison_direction = #stablehlo<comparison_direction %s>, "
           "compare_type = #stablehlo<comparison_type %s>",
           dirs[dir], ct);
  tpu_hlo_type t = *tx;
  t.dtype = TPU_BOOL;
  return op1(b, "stablehlo.compare", xy, 2, attrs, &t);
}

tpu_hlo_value tpu_hlo_select(tpu_hlo_builder *b, tpu_hlo_value pred, tpu_hlo_value on_true,
                             tpu_hlo_value on_false) {
  tpu_hlo_value ops[3] = {pred, on_true, on_false};
  if (!check_operands(b, "stablehlo.select", ops, 3)) return TPU_HLO_NONE;
  const tpu_hlo_type *tp = &b->values[pred].type, *tt = &b->values[on_true].type;
  if (!tpu_hlo_type_equal(tt, &b->values[on_false].type) || tp->dtype != TPU_BOOL ||
      (tp->rank != 0 && !same_shape(tp, tt)))
    return tpu_hlo_fail(b, TPU_ERR_RUNTIME, "internal: select operands do not match");
  return op1(b, "stablehlo.select", ops, 3, NULL, tt);
}

tpu_hlo_value tpu_hlo_clamp(tpu_hlo_builder *b, tpu_hlo_value lo, tpu_hlo_value x,
                            tpu_hlo_value hi) {
  tpu_hlo_value ops[3] = {lo, x, hi};
  if (!check_operands(b, "stablehlo.clamp", ops, 3)) return TPU_HLO_NONE;
  return op1(b, "stablehlo.clamp", ops, 3, NULL, &b->values[x].type);
}

tpu_hlo_value tpu_hlo_convert(tpu_hlo_builder *b, tpu_hlo_value x, tpu_dtype_t to) {
  if (!check_operands(b, "stablehlo.convert", &x, 1)) return TPU_HLO_NONE;
  tpu_hlo_type t = b->values[x].type;
  if (t.dtype == to) return x;
  tpu_dtype_t from = t.dtype;
  t.dtype = to;
  if (to == TPU_BOOL) { /* PyTorch: nonzero -> true (NaN too) */
    tpu_hlo_value zero = tpu_hlo_const_f64(b, &b->values[x].type, 0.0);
    return tpu_hlo_compare(b, TPU_HLO_NE, x, zero);
  }
  if (tpu_dtype_is_complex(from) && !tpu_dtype_is_complex(to)) /* drops the imaginary part */
    return tpu_hlo_convert(b, tpu_hlo_unary(b, TPU_HLO_REAL, x), to);
  return op1(b, "stablehlo.convert", &x, 1, NULL, &t);
}

tpu_hlo_value tpu_hlo_barrier(tpu_hlo_builder *b, tpu_hlo_value x) {
  if (!check_operands(b, "stablehlo.optimization_barrier", &x, 1)) return TPU_HLO_NONE;
  tpu_hlo_type t = b->values[x].type;
  return op1(b, "stablehlo.optimization_barrier", &x, 1, NULL, &t);
}

tpu_hlo_value tpu_hlo_bitcast(tpu_hlo_builder *b, tpu_hlo_value x, const tpu_hlo_type *to) {
  if (!check_operands(b, "stablehlo.bitcast_convert", &x, 1)) return TPU_HLO_NONE;
  if (tpu_hlo_type_equal(&b->values[x].type, to)) return x;
  return op1(b, "stablehlo.bitcast_convert", &x, 1, NULL, to);
}
