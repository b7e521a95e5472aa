/* Element types shared by every C layer.
 *
 * The values equal PJRT_Buffer_Type's, so the runtime passes them to PJRT
 * unchanged; the HLO layer prints them as MLIR element types; the torch layer
 * maps at::ScalarType onto them. Nothing here knows PJRT or PyTorch. */
#ifndef TPU_BASE_DTYPE_H_
#define TPU_BASE_DTYPE_H_

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_dtype {
  TPU_INVALID = 0,
  TPU_BOOL = 1, /* PRED, one byte */
  TPU_S8 = 2,
  TPU_S16 = 3,
  TPU_S32 = 4,
  TPU_S64 = 5,
  TPU_U8 = 6,
  TPU_U16 = 7,
  TPU_U32 = 8,
  TPU_U64 = 9,
  TPU_F16 = 10,
  TPU_F32 = 11,
  TPU_F64 = 12,
  TPU_BF16 = 13,
  TPU_C64 = 14,
  TPU_C128 = 15,
  TPU_F8E5M2 = 16,
  TPU_F8E4M3FN = 17,
  TPU_F8E5M2FNUZ = 19,
  TPU_F8E4M3FNUZ = 20,
  TPU_DTYPE_END = 30,
} tpu_dtype_t;

/* Bytes per element; 0 for TPU_INVALID and unknown values. */
size_t tpu_dtype_size(tpu_dtype_t t);
/* The MLIR spelling ("f32", "i1", "ui8", "complex<f32>"); "?" if unknown. */
const char *tpu_dtype_mlir(tpu_dtype_t t);
/* PyTorch's spelling ("float32", "bool"), for error messages. */
const char *tpu_dtype_name(tpu_dtype_t t);
/* PyTorch's ScalarType name ("Float", "Long"), as its C++ errors spell it. */
const char *tpu_dtype_scalar_type(tpu_dtype_t t);

bool tpu_dtype_is_float(tpu_dtype_t t); /* real floating point, f8 included */
bool tpu_dtype_is_complex(tpu_dtype_t t);
bool tpu_dtype_is_signed_int(tpu_dtype_t t);
bool tpu_dtype_is_unsigned_int(tpu_dtype_t t); /* bool excluded */
bool tpu_dtype_is_int(tpu_dtype_t t);          /* signed or unsigned, bool excluded */
/* The real type of a complex type's parts; t itself otherwise. */
tpu_dtype_t tpu_dtype_real(tpu_dtype_t t);
/* The integer type with the same width (for bit manipulation); INVALID if none. */
tpu_dtype_t tpu_dtype_same_width_uint(tpu_dtype_t t);

#ifdef __cplusplus
}
#endif

#endif /* TPU_BASE_DTYPE_H_ */
