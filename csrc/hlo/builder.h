/* A StableHLO builder that prints MLIR text in the generic op form.
 *
 * A builder holds one function, @main. Values are small integers; the builder
 * records each value's type and infers result types, so rules rarely spell a
 * type. Errors are sticky: an op given a bad operand (or after an earlier
 * failure) records the first error and returns TPU_HLO_NONE, so a rule checks
 * once, at the end, with tpu_hlo_status(). The generic form
 * (%r = "stablehlo.add"(%a, %b) : (...) -> ...) is fixed by MLIR itself, so the
 * text survives version skew between us and the plugin's StableHLO.
 *
 * Ownership: the builder owns every string it prints; tpu_hlo_finish returns
 * a malloc'ed module text owned by the caller. Not thread-safe; one builder
 * per thread at a time. */
#ifndef TPU_HLO_BUILDER_H_
#define TPU_HLO_BUILDER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most dims a tensor may have: PyTorch's own limit (its reductions and
 * meta functions refuse more than 64). Values inside a program may have a
 * few more (a gather's index vector, a rule's grid); every type holds
 * TPU_HLO_MAX_RANK dims and the builder refuses a value of more. */
#define TPU_MAX_TENSOR_RANK 64
#define TPU_HLO_MAX_RANK (TPU_MAX_TENSOR_RANK + 8)

typedef int32_t tpu_hlo_value;
#define TPU_HLO_NONE ((tpu_hlo_value)-1)

typedef struct tpu_hlo_type {
  tpu_dtype_t dtype;
  int rank;
  int64_t dims[TPU_HLO_MAX_RANK];
} tpu_hlo_type;

typedef struct tpu_hlo_builder tpu_hlo_builder;

/* --- lifetime --------------------------------------------------------------- */
tpu_status_t tpu_hlo_builder_create(tpu_hlo_builder **out_b) TPU_MUST_USE;
void tpu_hlo_builder_destroy(tpu_hlo_builder *b);
/* Forgets everything built so far; keeps allocations for reuse. */
void tpu_hlo_builder_reset(tpu_hlo_builder *b);

/* The first error recorded, as a new status owned by the caller (NULL if
 * none). The builder keeps failing until reset. */
tpu_status_t tpu_hlo_status(const tpu_hlo_builder *b) TPU_MUST_USE;
bool tpu_hlo_failed(const tpu_hlo_builder *b);
/* Records an error (the first one wins). Returns TPU_HLO_NONE for chaining. */
tpu_hlo_value tpu_hlo_fail(tpu_hlo_builder *b, tpu_code_t code, const char *fmt, ...)
    TPU_PRINTF(3, 4);

/* A new parameter of @main. |alias_output| >= 0 marks it donated into that
 * result (tf.aliasing_output); -1 for none. */
tpu_hlo_value tpu_hlo_param(tpu_hlo_builder *b, const tpu_hlo_type *t, int alias_output);
int tpu_hlo_num_params(const tpu_hlo_builder *b);
const tpu_hlo_type *tpu_hlo_param_type(const tpu_hlo_builder *b, int param_index);
/* Sets an existing parameter's alias; used when the result index is known late. */
void tpu_hlo_param_set_alias(tpu_hlo_builder *b, int param_index, int alias_output);

/* Ends @main returning |results| and hands back the module text (malloc'ed,
 * owned by the caller). Fails if any error was recorded. */
tpu_status_t tpu_hlo_finish(tpu_hlo_builder *b, const tpu_hlo_value *results, int num_results,
                            char **out_text) TPU_MUST_USE;

/* --- types ------------------------------------------------------------------ */
/* |v|'s type; the pointer is valid until the next value is added (copy the
 * type to keep it across builder calls). */
const tpu_hlo_type *tpu_hlo_type_of(const tpu_hlo_builder *b, tpu_hlo_value v);
tpu_dtype_t tpu_hlo_dtype(const tpu_hlo_builder *b, tpu_hlo_value v);
int tpu_hlo_rank(const tpu_hlo_builder *b, tpu_hlo_value v);
/* The most dims of any value built since the builder was made or reset. */
int tpu_hlo_max_rank(const tpu_hlo_builder *b);
tpu_hlo_type tpu_hlo_make_type(tpu_dtype_t dtype, int rank, const int64_t *dims);
int64_t tpu_hlo_type_numel(const tpu_hlo_type *t);
bool tpu_hlo_type_equal(const tpu_hlo_type *a, const tpu_hlo_type *b);

/* --- constants -------------------------------------------------------------- */
/* A constant of |t| with every element equal to |v| (converted to t's dtype). */
tpu_hlo_value tpu_hlo_const_f64(tpu_hlo_builder *b, const tpu_hlo_type *t, double v);
tpu_hlo_value tpu_hlo_const_i64(tpu_hlo_builder *b, const tpu_hlo_type *t, int64_t v);
/* Scalar (rank 0) shorthands. */
tpu_hlo_value tpu_hlo_scalar_f64(tpu_hlo_builder *b, tpu_dtype_t dtype, double v);
/* A rank-0 complex constant re + i im (|dtype| C64 or C128). */
tpu_hlo_value tpu_hlo_scalar_complex(tpu_hlo_builder *b, tpu_dtype_t dtype, double re, double im);
tpu_hlo_value tpu_hlo_scalar_i64(tpu_hlo_builder *b, tpu_dtype_t dtype, int64_t v);
/* The dtype's largest/smallest value (inf for floats), as a scalar. */
tpu_hlo_value tpu_hlo_scalar_max(tpu_hlo_builder *b, tpu_dtype_t dtype);
tpu_hlo_value tpu_hlo_scalar_min(tpu_hlo_builder *b, tpu_dtype_t dtype);
/* A 1-D i64 constant. */
tpu_hlo_value tpu_hlo_const_i64_list(tpu_hlo_builder *b, const int64_t *v, int n);
/* A 1-D constant of |n| values of float type |dtype| (rounded to it). */
tpu_hlo_value tpu_hlo_const_f64_list(tpu_hlo_builder *b, tpu_dtype_t dtype, const double *v, int64_t n);

/* --- elementwise -------------------------------------------------------------
 * Operands of binary ops must have equal types; results keep that type
 * (compare and is_finite give i1). */
typedef enum tpu_hlo_unary {
  TPU_HLO_ABS, TPU_HLO_NEG, TPU_HLO_EXP, TPU_HLO_EXPM1, TPU_HLO_LOG, TPU_HLO_LOG1P,
  TPU_HLO_SQRT, TPU_HLO_RSQRT, TPU_HLO_CBRT, TPU_HLO_TANH, TPU_HLO_LOGISTIC, TPU_HLO_SIN,
  TPU_HLO_COS, TPU_HLO_TAN, TPU_HLO_FLOOR, TPU_HLO_CEIL, TPU_HLO_ROUND_EVEN, TPU_HLO_ROUND_AFZ,
  TPU_HLO_SIGN, TPU_HLO_NOT, TPU_HLO_POPCNT, TPU_HLO_CLZ, TPU_HLO_REAL, TPU_HLO_IMAG,
  /* CHLO ops, legalized by the plugin */
  TPU_HLO_ERF, TPU_HLO_ERF_INV, TPU_HLO_ERFC, TPU_HLO_LGAMMA, TPU_HLO_DIGAMMA, TPU_HLO_ASIN,
  TPU_HLO_ACOS, TPU_HLO_ATAN, TPU_HLO_SINH, TPU_HLO_COSH, TPU_HLO_ASINH, TPU_HLO_ACOSH,
  TPU_HLO_ATANH, TPU_HLO_IS_INF, TPU_HLO_IS_NEG_INF, TPU_HLO_IS_POS_INF, TPU_HLO_IS_FINITE,
  TPU_HLO_UNARY_COUNT_
} tpu_hlo_unary_t;

typedef enum tpu_hlo_binary {
  TPU_HLO_ADD, TPU_HLO_SUB, TPU_HLO_MUL, TPU_HLO_DIV, TPU_HLO_REM, TPU_HLO_MAX, TPU_HLO_MIN,
  TPU_HLO_POW, TPU_HLO_ATAN2, TPU_HLO_AND, TPU_HLO_OR, TPU_HLO_XOR, TPU_HLO_SHL,
  TPU_HLO_SHR_ARITH, TPU_HLO_SHR_LOGIC, TPU_HLO_COMPLEX, TPU_HLO_NEXTAFTER, TPU_HLO_POLYGAMMA,
  TPU_HLO_ZETA,
  TPU_HLO_BINARY_COUNT_
} tpu_hlo_binary_t;

typedef enum tpu_hlo_cmp { TPU_HLO_EQ, TPU_HLO_NE, TPU_HLO_LT, TPU_HLO_LE, TPU_HLO_GT, TPU_HLO_GE } tpu_hlo_cmp_t;

tpu_hlo_value tpu_hlo_unary(tpu_hlo_builder *b, tpu_hlo_unary_t op, tpu_hlo_value x);
tpu_hlo_value tpu_hlo_binary(tpu_hlo_builder *b, tpu_hlo_binary_t op, tpu_hlo_value x,
                             tpu_hlo_value y);
/* Compares with the order PyTorch uses (IEEE for floats: NaN compares false,
 * != true); the result is i1 of the operands' shape. */
tpu_hlo_value tpu_hlo_compare(tpu_hlo_builder *b, tpu_hlo_cmp_t dir, tpu_hlo_value x,
                              tpu_hlo_value y);
tpu_hlo_value tpu_hlo_select(tpu_hlo_builder *b, tpu_hlo_value pred, tpu_hlo_value on_true,
                             tpu_hlo_value on_false);
/* clamp(lo, x, hi); lo/hi may be rank 0. */
tpu_hlo_value tpu_hlo_clamp(tpu_hlo_builder *b, tpu_hlo_value lo, tpu_hlo_value x,
                            tpu_hlo_value hi);
tpu_hlo_value tpu_hlo_convert(tpu_hlo_builder *b, tpu_hlo_value x, tpu_dtype_t to);
/* Same-width reinterpretation; a width change adds or drops a minor dim. */
tpu_hlo_value tpu_hlo_bitcast(tpu_hlo_builder *b, tpu_hlo_value x, const tpu_hlo_type *to);

/* --- shapes ------------------------------------------------------------------- */
tpu_hlo_value tpu_hlo_reshape(tpu_hlo_builder *b, tpu_hlo_value x, int rank, const int64_t *dims);
/* |bdims[i]| is the result dim of operand dim i. */
tpu_hlo_value tpu_hlo_broadcast_in_dim(tpu_hlo_builder *b, tpu_hlo_value x, const tpu_hlo_type *to,
                                       const int64_t *bdims);
/* Broadcasts |x| to |to|'s shape by NumPy rules (trailing dims aligned) and
 * converts to |to|'s dtype. The common case of every elementwise rule. */
tpu_hlo_value tpu_hlo_broadcast_to(tpu_hlo_builder *b, tpu_hlo_value x, const tpu_hlo_type *to);
/* A transpose of a transpose becomes one transpose of the first operand
 * (none when they cancel). */
tpu_hlo_value tpu_hlo_transpose(tpu_hlo_builder *b, tpu_hlo_value x, const int64_t *perm);
/* True when |v| is a transpose by |perm| (a layout a rule may undo for
 * free). */
bool tpu_hlo_is_transpose(const tpu_hlo_builder *b, tpu_hlo_value v, const int64_t *perm);
tpu_hlo_value tpu_hlo_slice(tpu_hlo_builder *b, tpu_hlo_value x, const int64_t *start,
                            const int64_t *limit, const int64_t *stride);
/* Slice of one dimension; the others are kept whole. */
tpu_hlo_value tpu_hlo_slice_dim(tpu_hlo_builder *b, tpu_hlo_value x, int dim, int64_t start,
                                int64_t limit, int64_t stride);
/* |starts| are rank-0 integer values, one per dim. */
tpu_hlo_value tpu_hlo_dynamic_slice(tpu_hlo_builder *b, tpu_hlo_value x, const tpu_hlo_value *starts,
                                    const int64_t *sizes);
tpu_hlo_value tpu_hlo_dynamic_update_slice(tpu_hlo_builder *b, tpu_hlo_value x, tpu_hlo_value update,
                                           const tpu_hlo_value *starts);
tpu_hlo_value tpu_hlo_concatenate(tpu_hlo_builder *b, const tpu_hlo_value *xs, int n, int dim);
/* |pad_value| is rank 0. Negative low/high padding slices. */
tpu_hlo_value tpu_hlo_pad(tpu_hlo_builder *b, tpu_hlo_value x, tpu_hlo_value pad_value,
                          const int64_t *low, const int64_t *high, const int64_t *interior);
tpu_hlo_value tpu_hlo_iota(tpu_hlo_builder *b, const tpu_hlo_type *t, int dim);
tpu_hlo_value tpu_hlo_reverse(tpu_hlo_builder *b, tpu_hlo_value x, const int64_t *dims, int n);

/* --- linear algebra ----------------------------------------------------------- */
typedef struct tpu_hlo_dot_dims {
  int num_batch, num_contract;
  int64_t lhs_batch[TPU_HLO_MAX_RANK], rhs_batch[TPU_HLO_MAX_RANK];
  int64_t lhs_contract[TPU_HLO_MAX_RANK], rhs_contract[TPU_HLO_MAX_RANK];
} tpu_hlo_dot_dims;

typedef enum tpu_hlo_precision {
  TPU_HLO_PRECISION_DEFAULT, TPU_HLO_PRECISION_HIGH, TPU_HLO_PRECISION_HIGHEST
} tpu_hlo_precision_t;

/* Result: batch dims, lhs free dims, rhs free dims, of dtype |out| (which may
 * be wider than the operands, e.g. bf16 x bf16 -> f32). */
tpu_hlo_value tpu_hlo_dot_general(tpu_hlo_builder *b, tpu_hlo_value lhs, tpu_hlo_value rhs,
                                  const tpu_hlo_dot_dims *dims, tpu_dtype_t out,
                                  tpu_hlo_precision_t precision);

typedef struct tpu_hlo_conv {
  int spatial; /* number of spatial dims */
  int64_t stride[TPU_HLO_MAX_RANK];
  int64_t pad_lo[TPU_HLO_MAX_RANK], pad_hi[TPU_HLO_MAX_RANK];
  int64_t lhs_dilation[TPU_HLO_MAX_RANK], rhs_dilation[TPU_HLO_MAX_RANK];
  int64_t feature_groups, batch_groups;
  /* Layout letters: operand dims as [b, f, 0, 1, ...] etc. The defaults
   * (zeroed struct + spatial) mean NCHW x OIHW -> NCHW. */
  int64_t lhs_batch, lhs_feature, lhs_spatial[TPU_HLO_MAX_RANK];
  int64_t rhs_out, rhs_in, rhs_spatial[TPU_HLO_MAX_RANK];
  int64_t out_batch, out_feature, out_spatial[TPU_HLO_MAX_RANK];
} tpu_hlo_conv;

/* Fills |c| with NCHW/OIHW defaults, unit strides/dilations, no padding. */
void tpu_hlo_conv_init(tpu_hlo_conv *c, int spatial);
tpu_hlo_value tpu_hlo_convolution(tpu_hlo_builder *b, tpu_hlo_value lhs, tpu_hlo_value rhs,
                                  const tpu_hlo_conv *c, const tpu_hlo_type *out,
                                  tpu_hlo_precision_t precision);

/* --- regions -----------------------------------------------------------------
 * Ops with bodies (reduce, sort, scatter, while …) take regions. Build one
 * between region_begin and region_end; the ops emitted in between belong to
 * it. Regions nest. */
typedef struct tpu_hlo_region {
  char *text; /* owned; consumed by the op that takes the region */
} tpu_hlo_region;

/* Opens a region with |n| block arguments of the given types; their values
 * are written to |out_args|. */
void tpu_hlo_region_begin(tpu_hlo_builder *b, int n, const tpu_hlo_type *arg_types,
                          tpu_hlo_value *out_args);
/* Closes the innermost region with a stablehlo.return of |results|. */
void tpu_hlo_region_end(tpu_hlo_builder *b, const tpu_hlo_value *results, int n,
                        tpu_hlo_region *out_region);
void tpu_hlo_region_release(tpu_hlo_region *r);

/* A region computing |op| of two scalars of |dtype| (for reductions). */
void tpu_hlo_region_binary(tpu_hlo_builder *b, tpu_hlo_binary_t op, tpu_dtype_t dtype,
                           tpu_hlo_region *out_region);

/* The generic form of any op: name, operands, regions (consumed), attribute
 * dictionary text without braces (may be NULL), result types. Results are
 * written to |out| (|num_results| values). */
void tpu_hlo_op(tpu_hlo_builder *b, const char *name, const tpu_hlo_value *operands, int n,
                tpu_hlo_region *regions, int num_regions, const char *attrs,
                const tpu_hlo_type *result_types, int num_results, tpu_hlo_value *out);

/* reduce over |dims| of |n| operands with |n| rank-0 inits; |body| consumed.
 * Results (n values) have the reduced dims removed. */
void tpu_hlo_reduce(tpu_hlo_builder *b, const tpu_hlo_value *xs, const tpu_hlo_value *inits, int n,
                    const int64_t *dims, int num_dims, tpu_hlo_region *body, tpu_hlo_value *out);
/* |x| as it is, a value XLA may not fuse or rewrite across
 * (stablehlo.optimization_barrier). */
tpu_hlo_value tpu_hlo_barrier(tpu_hlo_builder *b, tpu_hlo_value x);
/* Single-operand reduce with a binary op body. */
tpu_hlo_value tpu_hlo_reduce_simple(tpu_hlo_builder *b, tpu_hlo_value x, tpu_hlo_value init,
                                    tpu_hlo_binary_t op, const int64_t *dims, int num_dims);

typedef struct tpu_hlo_window {
  int64_t dims[TPU_HLO_MAX_RANK], strides[TPU_HLO_MAX_RANK];
  int64_t base_dilations[TPU_HLO_MAX_RANK], window_dilations[TPU_HLO_MAX_RANK];
  int64_t pad_lo[TPU_HLO_MAX_RANK], pad_hi[TPU_HLO_MAX_RANK];
} tpu_hlo_window;
void tpu_hlo_window_init(tpu_hlo_window *w, int rank);
void tpu_hlo_reduce_window(tpu_hlo_builder *b, const tpu_hlo_value *xs, const tpu_hlo_value *inits,
                           int n, const tpu_hlo_window *w, tpu_hlo_region *body,
                           tpu_hlo_value *out);
/* select_and_scatter (max-pool backward): |select| and |scatter| consumed. */
tpu_hlo_value tpu_hlo_select_and_scatter(tpu_hlo_builder *b, tpu_hlo_value operand,
                                         tpu_hlo_value source, tpu_hlo_value init,
                                         const tpu_hlo_window *w, tpu_hlo_region *select,
                                         tpu_hlo_region *scatter);

typedef struct tpu_hlo_gather_dims {
  int num_offset, num_collapsed, num_start_map, num_operand_batch, num_indices_batch;
  int64_t offset_dims[TPU_HLO_MAX_RANK];
  int64_t collapsed_slice_dims[TPU_HLO_MAX_RANK];
  int64_t start_index_map[TPU_HLO_MAX_RANK];
  int64_t operand_batching_dims[TPU_HLO_MAX_RANK];
  int64_t start_indices_batching_dims[TPU_HLO_MAX_RANK];
  int64_t index_vector_dim;
} tpu_hlo_gather_dims;
tpu_hlo_value tpu_hlo_gather(tpu_hlo_builder *b, tpu_hlo_value operand, tpu_hlo_value indices,
                             const tpu_hlo_gather_dims *d, const int64_t *slice_sizes,
                             const tpu_hlo_type *out);

typedef struct tpu_hlo_scatter_dims {
  int num_update_window, num_inserted, num_to_operand, num_input_batch, num_indices_batch;
  int64_t update_window_dims[TPU_HLO_MAX_RANK];
  int64_t inserted_window_dims[TPU_HLO_MAX_RANK];
  int64_t scatter_dims_to_operand_dims[TPU_HLO_MAX_RANK];
  int64_t input_batching_dims[TPU_HLO_MAX_RANK];
  int64_t scatter_indices_batching_dims[TPU_HLO_MAX_RANK];
  int64_t index_vector_dim;
} tpu_hlo_scatter_dims;
/* |body| consumed; NULL body means "replace" (the update wins). */
tpu_hlo_value tpu_hlo_scatter(tpu_hlo_builder *b, tpu_hlo_value operand, tpu_hlo_value indices,
                              tpu_hlo_value updates, const tpu_hlo_scatter_dims *d,
                              tpu_hlo_region *body, bool unique_indices);

/* sort along |dim|; |cmp| (consumed) gets 2 scalars per operand. */
void tpu_hlo_sort(tpu_hlo_builder *b, const tpu_hlo_value *xs, int n, int dim, bool stable,
                  tpu_hlo_region *cmp, tpu_hlo_value *out);

/* rng_bit_generator: |state| is ui64[2] (THREE_FRY); returns the new state
 * and random bits of |bits_type|. */
void tpu_hlo_rng_bits(tpu_hlo_builder *b, tpu_hlo_value state, const tpu_hlo_type *bits_type,
                      tpu_hlo_value *out_state, tpu_hlo_value *out_bits);

/* --- text helpers for rules that emit rare ops through tpu_hlo_op -------------- */
/* Writes "array<i64: a, b, c>" into |buf| (|cap| bytes). */
void tpu_hlo_format_i64_array(char *buf, size_t cap, const int64_t *v, int n);

#ifdef __cplusplus
}
#endif

#endif /* TPU_HLO_BUILDER_H_ */
