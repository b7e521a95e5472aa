/* Constants: splats of a scalar in any dtype (f8, f16 and bf16 bits written
 * exactly), the dtype's limits, dense lists. Part of the builder (builder.c). */
#include "hlo/builder_impl.h"

/* --- constants ---------------------------------------------------------------------- */

static uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)((u + rounding) >> 16);
}

static uint16_t f32_to_f16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow to inf */
  if (absu < 0x33000001u) return (uint16_t)sign;              /* underflow to zero */
  int exp = (int)(absu >> 23) - 127;
  uint32_t mant = (absu & 0x7fffffu) | 0x800000u;
  if (exp < -14) { /* subnormal half */
    int shift = -14 - exp + 13;
    uint32_t r = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ((uint32_t)(exp + 15) << 10) | ((mant >> 13) & 0x3ffu);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
  return (uint16_t)(sign | r);
}

/* Prints one element of |dtype| equal to |v| (or |iv| for integers; |im|
 * the imaginary part of a complex one). Floats are printed as their exact
 * bit pattern. */
static void put_element(tpu_strbuf *sb, tpu_dtype_t dtype, double v, double im, int64_t iv, bool is_int) {
  if (dtype == TPU_BOOL) {
    tpu_strbuf_puts(sb, (is_int ? iv != 0 : v != 0) ? "true" : "false");
  } else if (tpu_dtype_is_int(dtype)) {
    int64_t x = is_int ? iv : (int64_t)v;
    if (tpu_dtype_is_unsigned_int(dtype)) {
      uint64_t mask = tpu_dtype_size(dtype) == 8 ? ~0ULL : ((1ULL << (8 * tpu_dtype_size(dtype))) - 1);
      tpu_strbuf_printf(sb, "%llu", (unsigned long long)((uint64_t)x & mask));
    } else {
      int bits = 8 * (int)tpu_dtype_size(dtype);
      if (bits < 64) { /* wrap like a C cast */
        uint64_t m = (1ULL << bits) - 1;
        uint64_t ux = (uint64_t)x & m;
        if (ux >> (bits - 1)) x = (int64_t)(ux | ~m);
        else x = (int64_t)ux;
      }
      tpu_strbuf_printf(sb, "%lld", (long long)x);
    }
  } else {
    double d = is_int ? (double)iv : v;
    tpu_dtype_t real = tpu_dtype_real(dtype);
    bool cplx = tpu_dtype_is_complex(dtype);
    if (cplx) tpu_strbuf_puts(sb, "(");
    for (int part = 0; part < (cplx ? 2 : 1); part++) {
      double x = part == 0 ? d : im;
      if (part) tpu_strbuf_puts(sb, ", ");
      if (real == TPU_F64) {
        uint64_t u;
        memcpy(&u, &x, 8);
        tpu_strbuf_printf(sb, "0x%016llX", (unsigned long long)u);
      } else if (real == TPU_F32) {
        float f = (float)x;
        uint32_t u;
        memcpy(&u, &f, 4);
        tpu_strbuf_printf(sb, "0x%08X", u);
      } else if (real == TPU_BF16) {
        /* Round f64 -> bf16 without double rounding through f32 where it
         * matters: values are exact in f32 for all constants we emit. */
        tpu_strbuf_printf(sb, "0x%04X", f32_to_bf16_bits((float)x));
      } else if (real == TPU_F16) {
        tpu_strbuf_printf(sb, "0x%04X", f32_to_f16_bits((float)x));
      } else {
        tpu_strbuf_printf(sb, "%.17g", x); /* f8 types: the plugin rounds */
        if (isfinite(x) && floor(x) == x) tpu_strbuf_puts(sb, ".0");
      }
    }
    if (cplx) tpu_strbuf_puts(sb, ")");
  }
}

static tpu_hlo_value constant(tpu_hlo_builder *b, const tpu_hlo_type *t, double v, double im, int64_t iv,
                              bool is_int) {
  if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
  if (t->dtype == TPU_F8E5M2 || t->dtype == TPU_F8E4M3FN || t->dtype == TPU_F8E5M2FNUZ ||
      t->dtype == TPU_F8E4M3FNUZ) {
    /* f8 literals: build in f32 and convert, which rounds like PyTorch. */
    tpu_hlo_type t32 = *t;
    t32.dtype = TPU_F32;
    return tpu_hlo_convert(b, constant(b, &t32, v, 0.0, iv, is_int), t->dtype);
  }
  tpu_strbuf attr = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&attr, "value = dense<");
  put_element(&attr, t->dtype, v, im, iv, is_int);
  tpu_strbuf_puts(&attr, "> : ");
  put_type(&attr, t);
  tpu_hlo_value out = TPU_HLO_NONE;
  if (attr.failed) tpu_hlo_fail(b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  else out = op1(b, "stablehlo.constant", NULL, 0, attr.data, t);
  tpu_strbuf_release(&attr);
  return out;
}

tpu_hlo_value tpu_hlo_const_f64(tpu_hlo_builder *b, const tpu_hlo_type *t, double v) {
  return constant(b, t, v, 0.0, 0, false);
}

tpu_hlo_value tpu_hlo_const_i64(tpu_hlo_builder *b, const tpu_hlo_type *t, int64_t v) {
  return constant(b, t, 0.0, 0.0, v, true);
}

tpu_hlo_value tpu_hlo_scalar_f64(tpu_hlo_builder *b, tpu_dtype_t dtype, double v) {
  tpu_hlo_type t = tpu_hlo_make_type(dtype, 0, NULL);
  return constant(b, &t, v, 0.0, 0, false);
}

tpu_hlo_value tpu_hlo_scalar_complex(tpu_hlo_builder *b, tpu_dtype_t dtype, double re, double im) {
  tpu_hlo_type t = tpu_hlo_make_type(dtype, 0, NULL);
  return constant(b, &t, re, im, 0, false);
}

tpu_hlo_value tpu_hlo_scalar_i64(tpu_hlo_builder *b, tpu_dtype_t dtype, int64_t v) {
  tpu_hlo_type t = tpu_hlo_make_type(dtype, 0, NULL);
  return constant(b, &t, 0.0, 0.0, v, true);
}

static tpu_hlo_value scalar_limit(tpu_hlo_builder *b, tpu_dtype_t dtype, bool max) {
  if (tpu_dtype_is_float(dtype)) return tpu_hlo_scalar_f64(b, dtype, max ? INFINITY : -INFINITY);
  if (dtype == TPU_BOOL) return tpu_hlo_scalar_i64(b, dtype, max ? 1 : 0);
  int bits = 8 * (int)tpu_dtype_size(dtype);
  if (tpu_dtype_is_unsigned_int(dtype))
    return tpu_hlo_scalar_i64(b, dtype, max ? (int64_t)(bits == 64 ? ~0ULL : (1ULL << bits) - 1) : 0);
  int64_t hi = bits == 64 ? INT64_MAX : (int64_t)((1ULL << (bits - 1)) - 1);
  return tpu_hlo_scalar_i64(b, dtype, max ? hi : -hi - 1);
}

tpu_hlo_value tpu_hlo_scalar_max(tpu_hlo_builder *b, tpu_dtype_t dtype) {
  return scalar_limit(b, dtype, true);
}

tpu_hlo_value tpu_hlo_scalar_min(tpu_hlo_builder *b, tpu_dtype_t dtype) {
  return scalar_limit(b, dtype, false);
}

/* Emits "|attr| > : type" as a stablehlo.constant of type |t| (|attr| holds
 * "value = dense<" and the elements) and releases |attr|. */
static tpu_hlo_value dense_constant(tpu_hlo_builder *b, tpu_strbuf *attr, const tpu_hlo_type *t) {
  tpu_strbuf_puts(attr, "> : ");
  put_type(attr, t);
  tpu_hlo_value out = TPU_HLO_NONE;
  if (attr->failed) tpu_hlo_fail(b, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
  else out = op1(b, "stablehlo.constant", NULL, 0, attr->data, t);
  tpu_strbuf_release(attr);
  return out;
}

tpu_hlo_value tpu_hlo_const_i64_list(tpu_hlo_builder *b, const int64_t *v, int n) {
  if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
  int64_t dim = n;
  tpu_hlo_type t = tpu_hlo_make_type(TPU_S64, 1, &dim);
  tpu_strbuf attr = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&attr, "value = dense<");
  put_i64_list(&attr, v, n);
  return dense_constant(b, &attr, &t);
}

tpu_hlo_value tpu_hlo_const_f64_list(tpu_hlo_builder *b, tpu_dtype_t dtype, const double *v, int64_t n) {
  if (tpu_hlo_failed(b)) return TPU_HLO_NONE;
  tpu_hlo_type t = tpu_hlo_make_type(dtype, 1, &n);
  tpu_strbuf attr = TPU_STRBUF_INIT;
  tpu_strbuf_puts(&attr, "value = dense<[");
  for (int64_t i = 0; i < n; i++) {
    if (i) tpu_strbuf_puts(&attr, ", ");
    put_element(&attr, dtype, v[i], 0.0, 0, false);
  }
  tpu_strbuf_puts(&attr, "]");
  return dense_constant(b, &attr, &t);
}
