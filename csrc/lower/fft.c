/* Discrete Fourier transforms: _fft_c2c, _fft_r2c and _fft_c2r, the ATen ops
 * every torch.fft function (fft, rfft, irfft, hfft, the 2-D and n-D forms)
 * reduces to.
 *
 * stablehlo.fft transforms the innermost 1 to 3 dims, so the transformed dims
 * are moved last, transformed, and moved back; more than 3 dims go through in
 * groups (a multi-dim DFT is separable). The real-input group is the last
 * one, holding the dim PyTorch halves (the last of |dim|), and the
 * real-output group runs after the complex ones. XLA's inverse transforms
 * divide by the signal size and PyTorch's do not, so the result is scaled
 * once at the end by that size times the normalization PyTorch asked for
 * (0: none, 1: 1/sqrt(n), 2: 1/n). */
#include <math.h>
#include <stdio.h>

#include "lower/rules.h"

enum { FFT, IFFT, RFFT, IRFFT };
static const char *const fft_type_name[] = {"FFT", "IFFT", "RFFT", "IRFFT"};

/* |x| transformed by |type| over |dims[0..n)| (n <= 3, wrapped), whose
 * signal lengths are |lengths|. */
static tpu_hlo_value fft_dims(tpu_lower_ctx *c, tpu_hlo_value x, int type, const int64_t *dims, int n,
                              const int64_t *lengths) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, x);
  int rank = t.rank;
  int64_t perm[TPU_HLO_MAX_RANK], inverse[TPU_HLO_MAX_RANK];
  bool moved[TPU_HLO_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) moved[dims[i]] = true;
  int k = 0;
  for (int d = 0; d < rank; d++)
    if (!moved[d]) perm[k++] = d;
  for (int i = 0; i < n; i++) perm[k++] = dims[i];
  for (int d = 0; d < rank; d++) inverse[perm[d]] = d;
  tpu_hlo_value moved_x = tpu_hlo_transpose(B, x, perm);
  tpu_hlo_type r = *tpu_hlo_type_of(B, moved_x);
  if (type == RFFT) {
    r.dtype = t.dtype == TPU_F64 ? TPU_C128 : TPU_C64;
    r.dims[rank - 1] = lengths[n - 1] / 2 + 1;
  } else if (type == IRFFT) {
    r.dtype = t.dtype == TPU_C128 ? TPU_F64 : TPU_F32;
    r.dims[rank - 1] = lengths[n - 1];
  }
  char lens[128], attrs[192];
  tpu_hlo_format_i64_array(lens, sizeof lens, lengths, n);
  snprintf(attrs, sizeof attrs, "fft_type = #stablehlo<fft_type %s>, fft_length = %s", fft_type_name[type], lens);
  tpu_hlo_value y;
  tpu_hlo_op(B, "stablehlo.fft", &moved_x, 1, NULL, 0, attrs, &r, 1, &y);
  return tpu_hlo_transpose(B, y, inverse);
}

/* |x| transformed by complex FFTs over |dims[0..n)|, 3 at a time. */
static tpu_hlo_value fft_complex(tpu_lower_ctx *c, tpu_hlo_value x, bool forward, const int64_t *dims, int n) {
  for (int i = 0; i < n; i += 3) {
    int64_t lengths[3];
    int m = n - i < 3 ? n - i : 3;
    for (int j = 0; j < m; j++) lengths[j] = tpu_hlo_type_of(B, x)->dims[dims[i + j]];
    x = fft_dims(c, x, forward ? FFT : IFFT, dims + i, m, lengths);
  }
  return x;
}

/* The transformed dims of argument 1, wrapped, and their count. */
static int fft_dim_list(tpu_lower_ctx *c, int64_t *out_dims) {
  const tpu_lower_arg *d = &c->args[1];
  for (int i = 0; i < d->n; i++) out_dims[i] = tpu_lower_wrap_dim(c, d->ints[i], c->args[0].rank);
  return d->n;
}


/* The output scaled for PyTorch's normalization (argument 2) of a transform
 * whose signal has |numel| points; |inverse|: XLA divided by |numel| already. */
static tpu_status_t fft_done(tpu_lower_ctx *c, tpu_hlo_value y, double numel, bool inverse) {
  static const double power[] = {0.0, 0.5, 1.0};
  int64_t norm = tpu_lower_int(c, 2, 0);
  double scale = (inverse ? numel : 1.0) / pow(numel, power[norm >= 0 && norm <= 2 ? norm : 0]);
  if (scale != 1.0) y = mul(c, y, const_like(c, y, scale));
  return done(c, y);
}

static double signal_numel(const tpu_hlo_type *t, const int64_t *dims, int n) {
  double numel = 1.0;
  for (int i = 0; i < n; i++) numel *= (double)t->dims[dims[i]];
  return numel;
}

/* _fft_c2c(self, dim, normalization, forward) */
static tpu_status_t fft_c2c_rule(tpu_lower_ctx *c) {
  int64_t dims[TPU_HLO_MAX_RANK] = {0};
  int n = fft_dim_list(c, dims);
  bool forward = tpu_lower_bool(c, 3, true);
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  double numel = signal_numel(tpu_hlo_type_of(B, x), dims, n);
  return fft_done(c, fft_complex(c, x, forward, dims, n), numel, !forward);
}

/* _fft_r2c(self, dim, normalization, onesided) */
static tpu_status_t fft_r2c_rule(tpu_lower_ctx *c) {
  int64_t dims[TPU_HLO_MAX_RANK] = {0};
  int n = fft_dim_list(c, dims);
  tpu_hlo_value x = tpu_lower_tensor(c, 0);
  double numel = signal_numel(tpu_hlo_type_of(B, x), dims, n);
  if (!tpu_lower_bool(c, 3, true)) /* the full spectrum: a complex FFT of the real input */
    return fft_done(c, fft_complex(c, tpu_hlo_convert(B, x, OUT->dtype), true, dims, n), numel, false);
  int m = n < 3 ? n : 3;
  int64_t lengths[3];
  for (int j = 0; j < m; j++) lengths[j] = tpu_hlo_type_of(B, x)->dims[dims[n - m + j]];
  x = fft_dims(c, x, RFFT, dims + n - m, m, lengths);
  return fft_done(c, fft_complex(c, x, true, dims, n - m), numel, false);
}

/* _fft_c2r(self, dim, normalization, last_dim_size) */
static tpu_status_t fft_c2r_rule(tpu_lower_ctx *c) {
  int64_t dims[TPU_HLO_MAX_RANK] = {0};
  int n = fft_dim_list(c, dims);
  int m = n < 3 ? n : 3;
  tpu_hlo_value x = fft_complex(c, tpu_lower_tensor(c, 0), false, dims, n - m);
  int64_t lengths[3];
  for (int j = 0; j < m; j++) lengths[j] = OUT->dims[dims[n - m + j]];
  double numel = signal_numel(OUT, dims, n);
  /* IRFFT reads exactly length / 2 + 1 points of the halved dim */
  int64_t last = dims[n - 1], half = lengths[m - 1] / 2 + 1;
  const tpu_hlo_type *t = tpu_hlo_type_of(B, x);
  if (t->dims[last] > half) x = tpu_hlo_slice_dim(B, x, (int)last, 0, half, 1);
  x = fft_dims(c, x, IRFFT, dims + n - m, m, lengths);
  return fft_done(c, x, numel, true);
}

const tpu_lower_rule tpu_rules_fft[] = {
    {{"_fft_c2c", "_fft_c2c.out"}, fft_c2c_rule, 0, 0},
    {{"_fft_r2c", "_fft_r2c.out"}, fft_r2c_rule, 0, 0},
    {{"_fft_c2r", "_fft_c2r.out"}, fft_c2r_rule, 0, 0},
};
TPU_COUNT_RULES(fft);
