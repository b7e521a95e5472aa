/* Resampling: the upsample (interpolate) ops and grid sampling, with their
 * backwards. Layouts are PyTorch's (N C spatial…); half types compute in
 * float32 and round once. */
#include <math.h>
#include <stdlib.h>

#include "lower/spatial.h"

/* --- resampling ------------------------------------------------------------------------- */

/* The interpolations of the upsample ops (c->data; BACKWARD marks their
 * backwards). Every one is separable: along each spatial dim, output o is a
 * weighted sum of a few input positions (taps), computed here on the host as
 * PyTorch's CPU kernels compute them (in float for float and half types), so
 * that indices agree exactly. */
enum { NEAREST, NEAREST_EXACT, LINEAR, CUBIC, LINEAR_AA, CUBIC_AA, BACKWARD = 8 };

/* Tap t of output o reads input index[t * out + o] with weight[t * out + o]. */
typedef struct taps {
  int n;
  int64_t out;
  int64_t *index;
  double *weight;
} taps;

/* |x| rounded to float unless the kernel computes in double. */
static double fl(bool dbl, double x) { return dbl ? x : (double)(float)x; }

/* PyTorch's area_pixel_compute_scale: the input step per output step. */
static double interp_scale(int64_t in, int64_t out, bool align_corners, double scale, bool dbl) {
  if (align_corners) return out > 1 ? fl(dbl, (double)(in - 1) / (double)(out - 1)) : 0.0;
  return scale > 0.0 ? fl(dbl, 1.0 / scale) : fl(dbl, fl(dbl, (double)in) / (double)out);
}

/* Keys' cubic convolution kernel with parameter |a| at |x| >= 0. */
static double cubic1(double x, double a) { return ((a + 2) * x - (a + 3)) * x * x + 1; }
static double cubic2(double x, double a) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; }

static double aa_filter(int mode, double x) {
  x = fabs(x);
  if (mode == LINEAR_AA) return x < 1.0 ? 1.0 - x : 0.0;
  return x < 1.0 ? cubic1(x, -0.5) : x < 2.0 ? cubic2(x, -0.5) : 0.0;
}

/* The taps of |mode| from |in| to |out| positions; false if out of memory. */
static bool make_taps(int mode, int64_t in, int64_t out, bool align_corners, double scale_arg, bool dbl, taps *t) {
  double scale = interp_scale(in, out, align_corners, scale_arg, dbl), support = 0.0;
  t->out = out;
  t->n = mode == NEAREST || mode == NEAREST_EXACT ? 1 : mode == LINEAR ? 2 : 4;
  if (mode == LINEAR_AA || mode == CUBIC_AA) {
    support = (mode == LINEAR_AA ? 1.0 : 2.0) * (scale >= 1.0 ? scale : 1.0);
    t->n = (int)ceil(support) * 2 + 1;
  }
  size_t count = (size_t)t->n * (size_t)(out > 0 ? out : 1);
  t->index = calloc(count, sizeof *t->index);
  t->weight = calloc(count, sizeof *t->weight);
  if (t->index == NULL || t->weight == NULL) return false;
  for (int64_t o = 0; o < out; o++) {
    int64_t *idx = &t->index[o];
    double *w = &t->weight[o];
    if (mode == NEAREST || mode == NEAREST_EXACT) {
      float s = (float)(scale_arg > 0.0 ? 1.0 / scale_arg : (double)((float)in / (float)out));
      int64_t i = mode == NEAREST_EXACT ? (int64_t)floorf((float)((o + 0.5) * s))
                  : out == in           ? o
                  : out == 2 * in       ? o >> 1
                                        : (int64_t)floorf((float)o * s);
      idx[0] = i < in - 1 ? i : in - 1;
      w[0] = 1.0;
    } else if (mode == LINEAR || mode == CUBIC) {
      /* area_pixel_compute_source_index, then guard_index_and_lambda */
      double real = align_corners ? fl(dbl, scale * (double)o) : fl(dbl, fl(dbl, scale * fl(dbl, o + 0.5)) - 0.5);
      if (mode == LINEAR && real < 0.0) real = 0.0;
      int64_t i = (int64_t)floor(real);
      if (i > in - 1) i = in - 1;
      double lambda = fl(dbl, fmin(fmax(fl(dbl, real - (double)i), 0.0), 1.0));
      if (mode == LINEAR) {
        idx[0] = i;
        idx[out] = i + (i < in - 1 ? 1 : 0);
        w[0] = fl(dbl, 1.0 - lambda);
        w[out] = lambda;
      } else {
        double x2 = fl(dbl, 1.0 - lambda);
        double k[4] = {cubic2(lambda + 1.0, -0.75), cubic1(lambda, -0.75), cubic1(x2, -0.75), cubic2(x2 + 1.0, -0.75)};
        for (int j = 0; j < 4; j++) {
          int64_t at = i - 1 + j;
          idx[j * out] = at < 0 ? 0 : at > in - 1 ? in - 1 : at;
          w[j * out] = fl(dbl, k[j]);
        }
      }
    } else {
      /* _compute_indices_min_size_weights_aa: a filter stretched by the
       * scale when downsampling, normalized to sum 1 */
      double center = fl(dbl, scale * (o + 0.5)), total = 0.0;
      double invscale = scale >= 1.0 ? fl(dbl, 1.0 / scale) : 1.0;
      int64_t lo = (int64_t)(center - support + 0.5), hi = (int64_t)(center + support + 0.5);
      if (lo < 0) lo = 0;
      if (hi > in) hi = in;
      int64_t size = hi - lo < 0 ? 0 : hi - lo < t->n ? hi - lo : t->n;
      for (int64_t j = 0; j < size; j++) {
        w[j * out] = fl(dbl, aa_filter(mode, fl(dbl, ((double)(j + lo) - center + 0.5) * invscale)));
        total = fl(dbl, total + w[j * out]);
      }
      for (int64_t j = 0; j < t->n; j++) {
        idx[j * out] = j < size ? lo + j : lo;
        w[j * out] = j < size && total != 0.0 ? fl(dbl, w[j * out] / total) : 0.0;
      }
    }
  }
  return true;
}

static void free_taps(taps *t) {
  free(t->index);
  free(t->weight);
}

/* |x|'s type with dim |d| of size |size| (and |t| > 0 taps inserted before it). */
static tpu_hlo_type tapped_type(const tpu_hlo_type *x, int d, int ntaps, int64_t size) {
  tpu_hlo_type r = *x;
  if (ntaps > 0) {
    for (int i = r.rank; i > d; i--) r.dims[i] = r.dims[i - 1];
    r.rank++;
    r.dims[d++] = ntaps;
  }
  r.dims[d] = size;
  return r;
}

/* The taps' weights as a [taps, out] value broadcast into |to| at |d|. */
static tpu_hlo_value tap_weights(tpu_lower_ctx *c, const taps *t, const tpu_hlo_type *to, int d) {
  int64_t dims[2] = {d, d + 1}, shape[2] = {t->n, t->out};
  tpu_hlo_value w = tpu_hlo_const_f64_list(B, to->dtype, t->weight, (int64_t)t->n * t->out);
  return tpu_hlo_broadcast_in_dim(B, tpu_hlo_reshape(B, w, 2, shape), to, dims);
}

/* The taps' input positions as [taps * out, 1] index vectors. */
static tpu_hlo_value tap_indices(tpu_lower_ctx *c, const taps *t) {
  int64_t dims[2] = {(int64_t)t->n * t->out, 1};
  return tpu_hlo_reshape(B, tpu_hlo_const_i64_list(B, t->index, (int)dims[0]), 2, dims);
}

/* |x| resampled along dim |d|: every tap gathered, weighted and summed
 * (nearest's single tap is the gather itself). */
static tpu_hlo_value resample(tpu_lower_ctx *c, tpu_hlo_value x, int d, const taps *t, bool weighted) {
  const tpu_hlo_type xt = *tpu_hlo_type_of(B, x);
  tpu_hlo_type gt = tapped_type(&xt, d, 0, (int64_t)t->n * t->out);
  if (tpu_hlo_type_numel(&gt) == 0 || xt.dims[d] == 0) return tpu_hlo_const_f64(B, &gt, 0.0);
  tpu_hlo_gather_dims g = {.num_offset = xt.rank - 1, .num_collapsed = 1, .num_start_map = 1,
                           .collapsed_slice_dims = {d}, .start_index_map = {d}, .index_vector_dim = 1};
  int64_t slice[TPU_HLO_MAX_RANK];
  for (int i = 0, k = 0; i < xt.rank; i++) {
    slice[i] = i == d ? 1 : xt.dims[i];
    if (i != d) g.offset_dims[k++] = i;
  }
  tpu_hlo_value r = tpu_hlo_gather(B, x, tap_indices(c, t), &g, slice, &gt);
  if (!weighted) return r;
  tpu_hlo_type wt = tapped_type(&xt, d, t->n, t->out);
  r = bin(c, TPU_HLO_MUL, tpu_hlo_reshape(B, r, wt.rank, wt.dims), tap_weights(c, t, &wt, d));
  int64_t tap_dim = d;
  return tpu_lower_reduce(B, r, TPU_HLO_ADD, &tap_dim, 1);
}

/* The adjoint of resample: every output gradient, weighted per tap, added
 * at its tap's input position (|in| of them along |d|). */
static tpu_hlo_value resample_backward(tpu_lower_ctx *c, tpu_hlo_value g, int d, const taps *t, int64_t in) {
  const tpu_hlo_type gt = *tpu_hlo_type_of(B, g);
  tpu_hlo_type xt = tapped_type(&gt, d, 0, in), wt = tapped_type(&gt, d, t->n, t->out);
  tpu_hlo_value zeros = tpu_hlo_const_f64(B, &xt, 0.0);
  if (tpu_hlo_type_numel(&gt) == 0 || in == 0) return zeros;
  int64_t kept[TPU_HLO_MAX_RANK];
  for (int i = 0; i < gt.rank; i++) kept[i] = i < d ? i : i + 1;
  tpu_hlo_value u = bin(c, TPU_HLO_MUL, tpu_hlo_broadcast_in_dim(B, g, &wt, kept), tap_weights(c, t, &wt, d));
  tpu_hlo_type ut = tapped_type(&gt, d, 0, (int64_t)t->n * t->out);
  u = tpu_hlo_reshape(B, u, ut.rank, ut.dims);
  tpu_hlo_scatter_dims s = {.num_update_window = gt.rank - 1, .num_inserted = 1, .num_to_operand = 1,
                            .inserted_window_dims = {d}, .scatter_dims_to_operand_dims = {d}, .index_vector_dim = 1};
  for (int i = 0, k = 0; i < gt.rank; i++)
    if (i != d) s.update_window_dims[k++] = i;
  tpu_hlo_region add;
  tpu_hlo_region_binary(B, TPU_HLO_ADD, gt.dtype, &add);
  return tpu_hlo_scatter(B, zeros, tap_indices(c, t), u, &s, &add, false);
}

/* upsample_<mode>(self, output_size, [align_corners,] scales…) and
 * upsample_<mode>_backward(grad_output, output_size, input_size,
 * [align_corners,] scales…): one resampling per spatial dim (the last
 * len(output_size) dims), in float for half types. */
static tpu_status_t upsample_rule(tpu_lower_ctx *c) {
  int mode = (int)(c->data & ~BACKWARD);
  bool backward = (c->data & BACKWARD) != 0, nearest = mode == NEAREST || mode == NEAREST_EXACT;
  int n = c->args[1].n, align_arg = backward ? 3 : 2, first_scale = align_arg + (nearest ? 0 : 1);
  bool align_corners = !nearest && tpu_lower_bool(c, align_arg, false);
  static const char *const kernels[] = {
      [NEAREST] = "compute_indices_weights_nearest", [NEAREST_EXACT] = "compute_indices_weights_nearest",
      [LINEAR] = "compute_indices_weights_linear",   [CUBIC] = "compute_indices_weights_cubic",
      [LINEAR_AA] = "compute_index_ranges_weights",  [CUBIC_AA] = "compute_index_ranges_weights"};
  tpu_dtype_t dt = c->args[0].dtype;
  bool aa = mode == LINEAR_AA || mode == CUBIC_AA;
  if (!backward && ((!is_float(dt) && dt != TPU_U8) || (aa && (dt == TPU_BF16 || dt == TPU_F16))))
    return tpu_lower_not_implemented(kernels[mode], dt);
  tpu_hlo_type t = opmath_type(OUT);
  if (nearest && !backward) t.dtype = OUT->dtype; /* a gather: exact in any dtype */
  tpu_hlo_value x = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t.dtype);
  const int64_t *in_sizes = backward ? c->args[2].ints : c->args[0].sizes;
  int lead = t.rank - n;
  for (int i = 0; i < n; i++) {
    int d = lead + i;
    int64_t in = in_sizes[d], out = c->args[1].ints[i];
    taps tp;
    if (!make_taps(mode, in, out, align_corners, tpu_lower_float(c, first_scale + i, 0.0), t.dtype == TPU_F64, &tp)) {
      free_taps(&tp);
      return tpu_lower_error(c, TPU_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    x = backward ? resample_backward(c, x, d, &tp, in) : resample(c, x, d, &tp, !nearest);
    free_taps(&tp);
  }
  tpu_lower_set_output(c, 0, x);
  return NULL;
}

/* --- grid sampling ------------------------------------------------------------------ */

/* grid_sampler_{2,3}d: output position p of sample n reads input n at the
 * point grid[n, p] (x, y[, z] in [-1, 1], x along the last dim). Each
 * spatial dim contributes a few taps (input positions with weights, and
 * the weights' derivatives with respect to the grid coordinate); every
 * combination of one tap per dim is gathered, as PyTorch's CPU kernels
 * compute it: the coordinate padded (bilinear, nearest) or each tap padded
 * (bicubic), taps outside the input reading 0. */
enum { GRID_BILINEAR, GRID_NEAREST, GRID_BICUBIC };
enum { PAD_ZEROS, PAD_BORDER, PAD_REFLECTION };

typedef struct grid_axis {
  int n;
  tpu_hlo_value pos[4]; /* s64, clamped into the input */
  tpu_hlo_value ok[4];  /* the tap lies inside the input */
  tpu_hlo_value w[4], dw[4];
} grid_axis;


/* clip_coordinates: into [0, size - 1]; |grad| (if given) is scaled by
 * 0 where clipped. */
static tpu_hlo_value clip_coord(tpu_lower_ctx *c, tpu_hlo_value x, int64_t size, tpu_hlo_value *grad) {
  tpu_hlo_value hi = const_like(c, x, (double)(size - 1)), lo = const_like(c, x, 0.0);
  if (grad != NULL)
    *grad = sel(c, and_(c, cmp(c, TPU_HLO_GT, x, lo), cmp(c, TPU_HLO_LT, x, hi)), *grad, lo);
  return bin(c, TPU_HLO_MIN, hi, bin(c, TPU_HLO_MAX, x, lo));
}

/* reflect_coordinates over [twice_lo / 2, twice_hi / 2]; |grad| flips sign
 * with every reflection. */
static tpu_hlo_value reflect_coord(tpu_lower_ctx *c, tpu_hlo_value x, int64_t twice_lo, int64_t twice_hi,
                                   tpu_hlo_value *grad) {
  if (twice_lo == twice_hi) {
    if (grad != NULL) *grad = const_like(c, x, 0.0);
    return const_like(c, x, 0.0);
  }
  double lo = (double)twice_lo / 2, span = (double)(twice_hi - twice_lo) / 2;
  tpu_hlo_value d = bin(c, TPU_HLO_SUB, x, const_like(c, x, lo));
  tpu_hlo_value below = cmp(c, TPU_HLO_LT, d, const_like(c, x, 0.0));
  d = un(c, TPU_HLO_ABS, d);
  tpu_hlo_value extra = bin(c, TPU_HLO_REM, d, const_like(c, x, span));
  tpu_hlo_value flips = un(c, TPU_HLO_FLOOR, bin(c, TPU_HLO_DIV, d, const_like(c, x, span)));
  tpu_hlo_value even = cmp(c, TPU_HLO_EQ, bin(c, TPU_HLO_REM, flips, const_like(c, x, 2.0)), const_like(c, x, 0.0));
  if (grad != NULL) *grad = sel(c, tpu_hlo_binary(B, TPU_HLO_XOR, below, even), *grad, neg(c, *grad));
  return sel(c, even, bin(c, TPU_HLO_ADD, extra, const_like(c, x, lo)),
             bin(c, TPU_HLO_ADD, bin(c, TPU_HLO_SUB, const_like(c, x, span), extra), const_like(c, x, lo)));
}

/* compute_coordinates: |x| padded as |pad| asks. */
static tpu_hlo_value pad_coord(tpu_lower_ctx *c, tpu_hlo_value x, int64_t size, int pad, bool align,
                               tpu_hlo_value *grad) {
  if (pad == PAD_BORDER) return clip_coord(c, x, size, grad);
  if (pad == PAD_REFLECTION) {
    x = align ? reflect_coord(c, x, 0, 2 * (size - 1), grad) : reflect_coord(c, x, -1, 2 * size - 1, grad);
    return clip_coord(c, x, size, grad);
  }
  return x;
}

/* A tap at float position |x| (integral): its clamped s64 position and
 * whether it is inside. */
static void grid_tap(tpu_lower_ctx *c, tpu_hlo_value x, int64_t size, grid_axis *a, int t) {
  a->ok[t] = and_(c, cmp(c, TPU_HLO_GE, x, const_like(c, x, 0.0)), cmp(c, TPU_HLO_LE, x, const_like(c, x, (double)(size - 1))));
  a->pos[t] = tpu_hlo_convert(B, clip_coord(c, x, size, NULL), TPU_S64);
}


/* Keys' cubic coefficients (A = -0.75) of the 4 taps at offset t in [0, 1)
 * (distances 1 + t, t, 1 - t, 2 - t), and their derivatives by t. */
static void cubic_coeffs(tpu_lower_ctx *c, tpu_hlo_value t, tpu_hlo_value *w, tpu_hlo_value *dw) {
  const double A = -0.75;
  static const double sign[4] = {1, 1, -1, -1};
  const double outer[4] = {A, -5 * A, 8 * A, -4 * A}, inner[4] = {A + 2, -(A + 3), 0, 1};
  const double d_outer[3] = {3 * A, -10 * A, 8 * A}, d_inner[3] = {3 * (A + 2), -2 * (A + 3), 0};
  for (int i = 0; i < 4; i++) {
    bool out = i == 0 || i == 3;
    tpu_hlo_value x = bin(c, TPU_HLO_MUL, const_like(c, t, sign[i]), t);
    x = bin(c, TPU_HLO_ADD, const_like(c, t, i < 2 ? 1.0 - i : i - 1.0), x);
    w[i] = horner(c, x, out ? outer : inner, 4);
    dw[i] = bin(c, TPU_HLO_MUL, const_like(c, t, sign[i]), horner(c, x, out ? d_outer : d_inner, 3));
  }
}

/* The taps along one spatial dim of size |size| for grid coordinates |g|. */
static void grid_axis_of(tpu_lower_ctx *c, tpu_hlo_value g, int64_t size, int mode, int pad, bool align,
                         grid_axis *a) {
  /* grid_sampler_unnormalize and its derivative */
  double mult = align ? (double)(size - 1) / 2 : (double)size / 2;
  tpu_hlo_value x = bin(c, TPU_HLO_ADD, g, const_like(c, g, 1.0)); /* ((g + 1) * size - 1) / 2 unaligned */
  if (align) x = bin(c, TPU_HLO_MUL, x, const_like(c, g, mult));
  else x = bin(c, TPU_HLO_DIV, bin(c, TPU_HLO_SUB, bin(c, TPU_HLO_MUL, x, const_like(c, g, (double)size)), const_like(c, g, 1.0)),
               const_like(c, g, 2.0));
  tpu_hlo_value gm = const_like(c, g, mult);
  if (mode == GRID_BICUBIC) {
    tpu_hlo_value x0 = un(c, TPU_HLO_FLOOR, x);
    a->n = 4;
    cubic_coeffs(c, bin(c, TPU_HLO_SUB, x, x0), a->w, a->dw);
    for (int t = 0; t < 4; t++) {
      a->dw[t] = bin(c, TPU_HLO_MUL, a->dw[t], gm);
      tpu_hlo_value at = pad_coord(c, bin(c, TPU_HLO_ADD, x0, const_like(c, x, t - 1.0)), size, pad, align, NULL);
      grid_tap(c, un(c, TPU_HLO_FLOOR, at), size, a, t); /* PyTorch truncates; padded taps are >= 0 or out */
    }
    return;
  }
  x = pad_coord(c, x, size, pad, align, &gm);
  if (mode == GRID_NEAREST) {
    a->n = 1;
    a->w[0] = const_like(c, x, 1.0);
    a->dw[0] = const_like(c, x, 0.0);
    grid_tap(c, un(c, TPU_HLO_ROUND_EVEN, x), size, a, 0);
    return;
  }
  tpu_hlo_value x0 = un(c, TPU_HLO_FLOOR, x), x1 = bin(c, TPU_HLO_ADD, x0, const_like(c, x, 1.0));
  a->n = 2;
  a->w[0] = bin(c, TPU_HLO_SUB, x1, x);
  a->w[1] = bin(c, TPU_HLO_SUB, x, x0);
  a->dw[0] = neg(c, gm);
  a->dw[1] = gm;
  grid_tap(c, x0, size, a, 0);
  grid_tap(c, x1, size, a, 1);
}

/* The sampling of one grid_sampler call: input |x| as [N, spatial…, C],
 * the axes in input dim order (z, y, x). */
typedef struct grid_plan {
  int n;               /* spatial dims */
  tpu_hlo_type pt;     /* [N, out spatial…] in the compute type */
  tpu_hlo_type vt;     /* [N, out spatial…, C] */
  grid_axis axes[3];
} grid_plan;

static tpu_status_t grid_plan_of(tpu_lower_ctx *c, int input, int grid, int args, tpu_dtype_t dt, grid_plan *p) {
  const tpu_lower_arg *in = &c->args[input], *gr = &c->args[grid];
  int mode = (int)tpu_lower_int(c, args, 0), pad = (int)tpu_lower_int(c, args + 1, 0);
  bool align = tpu_lower_bool(c, args + 2, false);
  p->n = in->rank - 2;
  if (mode == GRID_BICUBIC && p->n == 3)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "grid_sampler(): bicubic interpolation only supports 4D input");
  p->pt = tpu_hlo_make_type(dt, gr->rank - 1, gr->sizes);
  p->vt = tpu_hlo_make_type(dt, gr->rank, gr->sizes);
  p->vt.dims[gr->rank - 1] = in->sizes[1];
  tpu_hlo_value g = tpu_hlo_convert(B, tpu_lower_tensor(c, grid), dt);
  for (int i = 0; i < p->n; i++) {
    /* grid component i runs along input dim rank - 1 - i */
    tpu_hlo_value gi = tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, g, gr->rank - 1, i, i + 1, 1), p->pt.rank, p->pt.dims);
    grid_axis_of(c, gi, in->sizes[in->rank - 1 - i], mode, pad, align, &p->axes[p->n - 1 - i]);
  }
  return NULL;
}

/* Tap combination |k| (one tap per axis, mixed radix): its gather indices
 * [N, out…, 1 + n], validity, weight, and (if |dws|) each axis' weight
 * derivative times the other axes' weights. */
static tpu_hlo_value grid_combo(tpu_lower_ctx *c, const grid_plan *p, int k, tpu_hlo_value *out_ok,
                                tpu_hlo_value *out_w, tpu_hlo_value *dws) {
  int tap[3];
  for (int i = p->n - 1; i >= 0; i--) {
    tap[i] = k % p->axes[i].n;
    k /= p->axes[i].n;
  }
  tpu_hlo_type it = p->pt;
  it.dtype = TPU_S64;
  it.dims[it.rank++] = 1;
  tpu_hlo_value parts[4] = {tpu_hlo_iota(B, &it, 0)}, ok = TPU_HLO_NONE, w = TPU_HLO_NONE;
  for (int i = 0; i < p->n; i++) {
    const grid_axis *a = &p->axes[i];
    parts[1 + i] = tpu_hlo_reshape(B, a->pos[tap[i]], it.rank, it.dims);
    ok = i == 0 ? a->ok[tap[i]] : and_(c, ok, a->ok[tap[i]]);
    w = i == 0 ? a->w[tap[i]] : bin(c, TPU_HLO_MUL, w, a->w[tap[i]]);
    if (dws == NULL) continue;
    for (int j = 0; j < p->n; j++) {
      tpu_hlo_value f = i == j ? a->dw[tap[i]] : a->w[tap[i]];
      dws[j] = i == 0 ? f : bin(c, TPU_HLO_MUL, dws[j], f);
    }
  }
  *out_ok = ok;
  *out_w = w;
  return tpu_hlo_concatenate(B, parts, 1 + p->n, it.rank - 1);
}

/* |x| [N, C, spatial…] as [N, spatial…, C] in |dt|, and back. */
static tpu_hlo_value channels_last(tpu_lower_ctx *c, tpu_hlo_value x, bool back) {
  int rank = tpu_hlo_rank(B, x);
  int64_t perm[TPU_HLO_MAX_RANK];
  for (int i = 0; i < rank; i++) {
    if (back) perm[i] = i == 0 ? 0 : i == 1 ? rank - 1 : i - 1;
    else perm[i] = i == 0 ? 0 : i == rank - 1 ? 1 : i + 1;
  }
  return tpu_hlo_transpose(B, x, perm);
}

static tpu_hlo_value grid_gather(tpu_lower_ctx *c, const grid_plan *p, tpu_hlo_value xl, tpu_hlo_value idx) {
  const tpu_hlo_type xt = *tpu_hlo_type_of(B, xl);
  tpu_hlo_gather_dims g = {.num_offset = 1, .offset_dims = {p->vt.rank - 1}, .num_collapsed = 1 + p->n,
                           .num_start_map = 1 + p->n, .index_vector_dim = p->vt.rank - 1};
  int64_t slice[TPU_HLO_MAX_RANK];
  for (int i = 0; i < xt.rank; i++) slice[i] = i == xt.rank - 1 ? xt.dims[i] : 1;
  for (int i = 0; i <= p->n; i++) g.collapsed_slice_dims[i] = g.start_index_map[i] = i;
  return tpu_hlo_gather(B, xl, idx, &g, slice, &p->vt);
}

static int grid_combos(const grid_plan *p) {
  int n = 1;
  for (int i = 0; i < p->n; i++) n *= p->axes[i].n;
  return n;
}

/* A [N, out…] value broadcast over the channels. */
static tpu_hlo_value per_channel(tpu_lower_ctx *c, const grid_plan *p, tpu_hlo_value v) {
  int64_t dims[TPU_HLO_MAX_RANK];
  for (int i = 0; i < p->pt.rank; i++) dims[i] = i;
  tpu_hlo_type t = p->vt;
  t.dtype = tpu_hlo_dtype(B, v);
  return tpu_hlo_broadcast_in_dim(B, v, &t, dims);
}

/* grid_sampler_{2,3}d(input, grid, interpolation_mode, padding_mode, align_corners) */
static tpu_status_t grid_sampler_rule(tpu_lower_ctx *c) {
  tpu_hlo_type t = opmath_type(OUT);
  grid_plan p;
  tpu_status_t st = grid_plan_of(c, 0, 1, 2, t.dtype, &p);
  if (st != NULL) return st;
  tpu_hlo_type xt = tpu_hlo_make_type(t.dtype, c->args[0].rank, c->args[0].sizes);
  if (tpu_hlo_type_numel(&t) == 0 || tpu_hlo_type_numel(&xt) == 0) return done(c, tpu_hlo_const_f64(B, &t, 0.0));
  tpu_hlo_value xl = channels_last(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t.dtype), false);
  tpu_hlo_value y = tpu_hlo_const_f64(B, &p.vt, 0.0);
  for (int k = 0; k < grid_combos(&p); k++) {
    tpu_hlo_value ok, w;
    tpu_hlo_value v = grid_gather(c, &p, xl, grid_combo(c, &p, k, &ok, &w, NULL));
    tpu_hlo_value term = bin(c, TPU_HLO_MUL, per_channel(c, &p, w), v);
    y = bin(c, TPU_HLO_ADD, y, sel(c, per_channel(c, &p, ok), term, tpu_hlo_const_f64(B, &p.vt, 0.0)));
  }
  return done(c, channels_last(c, y, true));
}

/* grid_sampler_{2,3}d_backward(grad_output, input, grid, interpolation_mode,
 *     padding_mode, align_corners, output_mask) -> (grad_input, grad_grid):
 * every tap's weighted gradient added at its input position; the grid
 * gradient sums gradient * input value * the weight's derivative. */
static tpu_status_t grid_sampler_backward_rule(tpu_lower_ctx *c) {
  tpu_dtype_t dt = tpu_lower_opmath(c->args[1].dtype);
  grid_plan p;
  tpu_status_t st = grid_plan_of(c, 1, 2, 3, dt, &p);
  if (st != NULL) return st;
  tpu_hlo_type xt = tpu_hlo_make_type(dt, c->args[1].rank, c->args[1].sizes);
  tpu_hlo_value xl = channels_last(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 1), dt), false);
  const tpu_hlo_type lt = *tpu_hlo_type_of(B, xl);
  tpu_hlo_value gy = channels_last(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 0), dt), false);
  tpu_hlo_value zero_v = tpu_hlo_const_f64(B, &p.vt, 0.0), gx = tpu_hlo_const_f64(B, &lt, 0.0);
  tpu_hlo_value gg[3];
  for (int i = 0; i < 3; i++) gg[i] = tpu_hlo_const_f64(B, &p.pt, 0.0);
  bool empty = tpu_hlo_type_numel(&p.vt) == 0 || tpu_hlo_type_numel(&xt) == 0;
  int64_t channel = p.vt.rank - 1;
  for (int k = 0; !empty && k < grid_combos(&p); k++) {
    tpu_hlo_value ok, w, dws[3];
    tpu_hlo_value idx = grid_combo(c, &p, k, &ok, &w, dws);
    tpu_hlo_value okc = per_channel(c, &p, ok);
    if (c->out_types[0].dtype != TPU_INVALID) {
      tpu_hlo_value upd = sel(c, okc, bin(c, TPU_HLO_MUL, gy, per_channel(c, &p, w)), zero_v);
      tpu_hlo_scatter_dims sd = {.num_update_window = 1, .update_window_dims = {channel}, .num_inserted = 1 + p.n,
                                 .num_to_operand = 1 + p.n, .index_vector_dim = channel};
      for (int i = 0; i <= p.n; i++) sd.inserted_window_dims[i] = sd.scatter_dims_to_operand_dims[i] = i;
      tpu_hlo_region add;
      tpu_hlo_region_binary(B, TPU_HLO_ADD, dt, &add);
      gx = tpu_hlo_scatter(B, gx, idx, upd, &sd, &add, false);
    }
    if (c->out_types[1].dtype != TPU_INVALID) {
      tpu_hlo_value gv = tpu_lower_reduce(B, sel(c, okc, bin(c, TPU_HLO_MUL, gy, grid_gather(c, &p, xl, idx)), zero_v),
                                          TPU_HLO_ADD, &channel, 1);
      for (int i = 0; i < p.n; i++) gg[i] = bin(c, TPU_HLO_ADD, gg[i], bin(c, TPU_HLO_MUL, gv, dws[i]));
    }
  }
  tpu_lower_set_output(c, 0, channels_last(c, gx, true));
  if (c->out_types[1].dtype != TPU_INVALID) {
    tpu_hlo_type one = p.vt;
    one.dims[channel] = 1;
    tpu_hlo_value parts[3];
    for (int i = 0; i < p.n; i++) parts[i] = tpu_hlo_reshape(B, gg[p.n - 1 - i], one.rank, one.dims);
    tpu_lower_set_output(c, 1, tpu_hlo_concatenate(B, parts, p.n, (int)channel));
  }
  return NULL;
}

#define UPSAMPLE(name, mode)                                                                   \
  {{name, name ".out"}, upsample_rule, 0, mode}, {                                             \
    {name "_backward", name "_backward.grad_input"}, upsample_rule, 0, (mode) | BACKWARD       \
  }

const tpu_lower_rule tpu_rules_resample[] = {
    {{"grid_sampler_2d", "grid_sampler_2d.out"}, grid_sampler_rule, 0, 0},
    {{"grid_sampler_3d", "grid_sampler_3d.out"}, grid_sampler_rule, 0, 0},
    {{"grid_sampler_2d_backward", "grid_sampler_2d_backward.out"}, grid_sampler_backward_rule, 0, 0},
    {{"grid_sampler_3d_backward", "grid_sampler_3d_backward.out"}, grid_sampler_backward_rule, 0, 0},
    UPSAMPLE("upsample_nearest1d", NEAREST),
    UPSAMPLE("upsample_nearest2d", NEAREST),
    UPSAMPLE("upsample_nearest3d", NEAREST),
    UPSAMPLE("_upsample_nearest_exact1d", NEAREST_EXACT),
    UPSAMPLE("_upsample_nearest_exact2d", NEAREST_EXACT),
    UPSAMPLE("_upsample_nearest_exact3d", NEAREST_EXACT),
    UPSAMPLE("upsample_linear1d", LINEAR),
    UPSAMPLE("upsample_bilinear2d", LINEAR),
    UPSAMPLE("upsample_trilinear3d", LINEAR),
    UPSAMPLE("upsample_bicubic2d", CUBIC),
    UPSAMPLE("_upsample_bilinear2d_aa", LINEAR_AA),
    UPSAMPLE("_upsample_bicubic2d_aa", CUBIC_AA),
};
TPU_COUNT_RULES(resample);
