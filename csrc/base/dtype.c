/* Element type properties, one table. */
#include "base/dtype.h"

typedef struct {
  size_t size;
  const char *mlir;
  const char *name;
  const char *scalar_type;
} dtype_info;

static const dtype_info table[TPU_DTYPE_END] = {
    [TPU_BOOL] = {1, "i1", "bool", "Bool"},
    [TPU_S8] = {1, "i8", "int8", "Char"},
    [TPU_S16] = {2, "i16", "int16", "Short"},
    [TPU_S32] = {4, "i32", "int32", "Int"},
    [TPU_S64] = {8, "i64", "int64", "Long"},
    [TPU_U8] = {1, "ui8", "uint8", "Byte"},
    [TPU_U16] = {2, "ui16", "uint16", "UInt16"},
    [TPU_U32] = {4, "ui32", "uint32", "UInt32"},
    [TPU_U64] = {8, "ui64", "uint64", "UInt64"},
    [TPU_F16] = {2, "f16", "float16", "Half"},
    [TPU_F32] = {4, "f32", "float32", "Float"},
    [TPU_F64] = {8, "f64", "float64", "Double"},
    [TPU_BF16] = {2, "bf16", "bfloat16", "BFloat16"},
    [TPU_C64] = {8, "complex<f32>", "complex64", "ComplexFloat"},
    [TPU_C128] = {16, "complex<f64>", "complex128", "ComplexDouble"},
    [TPU_F8E5M2] = {1, "f8E5M2", "float8_e5m2", "Float8_e5m2"},
    [TPU_F8E4M3FN] = {1, "f8E4M3FN", "float8_e4m3fn", "Float8_e4m3fn"},
    [TPU_F8E5M2FNUZ] = {1, "f8E5M2FNUZ", "float8_e5m2fnuz", "Float8_e5m2fnuz"},
    [TPU_F8E4M3FNUZ] = {1, "f8E4M3FNUZ", "float8_e4m3fnuz", "Float8_e4m3fnuz"},
};

static const dtype_info *info(tpu_dtype_t t) {
  if ((int)t <= 0 || t >= TPU_DTYPE_END || table[t].size == 0) return NULL;
  return &table[t];
}

size_t tpu_dtype_size(tpu_dtype_t t) {
  const dtype_info *i = info(t);
  return i ? i->size : 0;
}

const char *tpu_dtype_mlir(tpu_dtype_t t) {
  const dtype_info *i = info(t);
  return i ? i->mlir : "?";
}

const char *tpu_dtype_name(tpu_dtype_t t) {
  const dtype_info *i = info(t);
  return i ? i->name : "invalid";
}

const char *tpu_dtype_scalar_type(tpu_dtype_t t) {
  const dtype_info *i = info(t);
  return i ? i->scalar_type : "invalid";
}

bool tpu_dtype_is_float(tpu_dtype_t t) {
  switch (t) {
    case TPU_F16: case TPU_F32: case TPU_F64: case TPU_BF16:
    case TPU_F8E5M2: case TPU_F8E4M3FN: case TPU_F8E5M2FNUZ: case TPU_F8E4M3FNUZ:
      return true;
    default:
      return false;
  }
}

bool tpu_dtype_is_complex(tpu_dtype_t t) { return t == TPU_C64 || t == TPU_C128; }

bool tpu_dtype_is_signed_int(tpu_dtype_t t) {
  return t == TPU_S8 || t == TPU_S16 || t == TPU_S32 || t == TPU_S64;
}

bool tpu_dtype_is_unsigned_int(tpu_dtype_t t) {
  return t == TPU_U8 || t == TPU_U16 || t == TPU_U32 || t == TPU_U64;
}

bool tpu_dtype_is_int(tpu_dtype_t t) {
  return tpu_dtype_is_signed_int(t) || tpu_dtype_is_unsigned_int(t);
}

tpu_dtype_t tpu_dtype_real(tpu_dtype_t t) {
  if (t == TPU_C64) return TPU_F32;
  if (t == TPU_C128) return TPU_F64;
  return t;
}

tpu_dtype_t tpu_dtype_same_width_uint(tpu_dtype_t t) {
  switch (tpu_dtype_size(t)) {
    case 1: return TPU_U8;
    case 2: return TPU_U16;
    case 4: return TPU_U32;
    case 8: return TPU_U64;
    default: return TPU_INVALID;
  }
}
