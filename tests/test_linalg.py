"""Matrix products (mm, bmm, mv, dot, vdot, addmm, baddbmm, addbmm, addmv) and
the PyTorch composites built on them (matmul, @, F.linear, outer), against
PyTorch on CPU."""
import re

import pytest
import torch
import torch.nn.functional as F

from conftest import compare, compare_grad, make, to_tpu

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
ALL = FLOATS + [torch.int64, torch.int32, torch.complex64]


def tol(dtype):
    # CPU rounds half-type products once too, but sums in another order.
    return dict(rtol=2e-2, atol=2e-2) if dtype in (torch.bfloat16, torch.float16) else {}


PRODUCTS = [
    (torch.mm, [(3, 4), (4, 5)]),
    (torch.bmm, [(2, 3, 4), (2, 4, 5)]),
    (torch.mv, [(3, 4), (4,)]),
    (torch.dot, [(6,), (6,)]),
    (torch.vdot, [(6,), (6,)]),
]


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("fn,shapes", PRODUCTS, ids=lambda v: getattr(v, "__name__", ""))
def test_products(no_fallbacks, fn, shapes, dtype):
    got = compare(fn, *[make(s, dtype, i) for i, s in enumerate(shapes)], **tol(dtype))
    assert got.dtype == dtype


ADD_PRODUCTS = [
    (torch.addmm, [(3, 5), (3, 4), (4, 5)]),
    (torch.baddbmm, [(2, 3, 5), (2, 3, 4), (2, 4, 5)]),
    (torch.addbmm, [(3, 5), (2, 3, 4), (2, 4, 5)]),
    (torch.addmv, [(3,), (3, 4), (4,)]),
]
ADD_IDS = ["addmm", "baddbmm", "addbmm", "addmv"]


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, -2), (0, 3), (2, 0)])
@pytest.mark.parametrize("fn,shapes", ADD_PRODUCTS, ids=ADD_IDS)
def test_add_products(no_fallbacks, fn, shapes, beta, alpha, dtype):
    if not (dtype.is_floating_point or dtype.is_complex):
        beta, alpha = int(beta * 2), int(alpha)
    args = [make(s, dtype, i) for i, s in enumerate(shapes)]
    compare(lambda s, a, b: fn(s, a, b, beta=beta, alpha=alpha), *args, **tol(dtype))


@pytest.mark.parametrize("fn,shapes", ADD_PRODUCTS, ids=ADD_IDS)
def test_beta_zero_ignores_self(no_fallbacks, fn, shapes):
    # PyTorch: with beta == 0, NaN and inf in self do not propagate.
    s = make(shapes[0], torch.float32)
    s.view(-1)[0], s.view(-1)[-1] = float("nan"), float("inf")
    args = [s] + [make(sh, torch.float32, i + 1) for i, sh in enumerate(shapes[1:])]
    got = compare(lambda s, a, b: fn(s, a, b, beta=0), *args)
    assert torch.isfinite(got.cpu()).all()
    # with beta != 0 they do
    got = compare(lambda s, a, b: fn(s, a, b, beta=1e-3), *args)
    assert not torch.isfinite(got.cpu()).all()


@pytest.mark.parametrize("fn,shapes", ADD_PRODUCTS, ids=ADD_IDS)
def test_add_products_broadcast_self(no_fallbacks, fn, shapes):
    out_shape = shapes[0]
    for self_shape in [(), (out_shape[-1],), (1,) * len(out_shape)]:
        args = [make(self_shape, torch.float32)] + [make(s, torch.float32, i + 1) for i, s in enumerate(shapes[1:])]
        compare(lambda s, a, b: fn(s, a, b, beta=0.5, alpha=2), *args)


@pytest.mark.parametrize("fn,shapes", ADD_PRODUCTS, ids=ADD_IDS)
def test_add_products_inplace_and_out(no_fallbacks, fn, shapes):
    args = [make(s, torch.float32, i) for i, s in enumerate(shapes)]
    inplace = getattr(torch.Tensor, fn.__name__ + "_")

    def run_inplace(s, a, b):
        s = s.clone()
        inplace(s, a, b, beta=0.5, alpha=2)
        return s

    compare(run_inplace, *args)

    def run_out(s, a, b):
        out = torch.full_like(s, float("nan"))
        r = fn(s, a, b, beta=0.5, alpha=2, out=out)
        assert r is out
        return out

    compare(run_out, *args)


@pytest.mark.parametrize("fn,shapes", PRODUCTS, ids=lambda v: getattr(v, "__name__", ""))
def test_products_out(no_fallbacks, fn, shapes):
    args = [make(s, torch.float32, i) for i, s in enumerate(shapes)]

    def run_out(a, b):
        out = torch.empty(0, device=a.device)  # resized as PyTorch does
        r = fn(a, b, out=out)
        assert r is out
        return out

    compare(run_out, *args)


def test_mm_empty(no_fallbacks):
    compare(torch.mm, make((3, 0), torch.float32), make((0, 4), torch.float32))
    compare(torch.mm, make((0, 3), torch.float32), make((3, 4), torch.float32))
    compare(torch.bmm, make((0, 3, 2), torch.float32), make((0, 2, 4), torch.float32))
    compare(torch.dot, make((0,), torch.float32), make((0,), torch.float32))
    s = make((3, 4), torch.float32)
    compare(lambda s, a, b: torch.addmm(s, a, b, beta=2), s, make((3, 0), torch.float32), make((0, 4), torch.float32))


def test_non_contiguous(no_fallbacks):
    a, b = make((5, 4), torch.float32), make((6, 5), torch.float32)
    compare(lambda a, b: torch.mm(a.t(), b.t()), a, b)
    compare(lambda a, b: torch.mm(a[::2], b[1:5, ::2]), a, b)
    c = make((3, 5, 4), torch.float32)
    compare(lambda c, b: torch.bmm(c.transpose(1, 2), c[:, :, ::2]), c, b)
    compare(lambda a: torch.mv(a.t(), a[:, 1]), a)
    compare(lambda a: torch.dot(a[:, 0], a[:, 3]), a)
    compare(lambda a, b: torch.addmm(a[:4, :4], a.t(), a, beta=0.5), a, b)


def test_bool_is_refused(no_fallbacks):
    a = torch.ones(2, 2, dtype=torch.bool)
    for fn, args in [(torch.mm, (a, a)), (torch.dot, (a[0], a[1])), (torch.addmm, (a, a, a))]:
        with pytest.raises(NotImplementedError) as cpu:
            fn(*args)
        with pytest.raises(NotImplementedError) as tpu:
            fn(*to_tpu(args))
        assert str(cpu.value) == str(tpu.value)


@pytest.mark.parametrize("fn,args", [
    (torch.mm, [(2, 3), (3, 2, torch.float64)]),
    (torch.mv, [(2, 3, torch.float64), (3,)]),
    (torch.addmm, [(2, 2), (2, 3), (3, 2, torch.float64)]),
    (torch.addmm, [(2, 2, torch.float64), (2, 3), (3, 2)]),
    (torch.addmm, [(2, 2), (2, 3, torch.float64), (3, 2)]),
    (torch.addbmm, [(2, 2), (2, 2, 3, torch.float64), (2, 3, 2)]),
], ids=["mm", "mv", "addmm-mat2", "addmm-self", "addmm-mat1", "addbmm"])
def test_mixed_dtypes_are_refused(fn, args):
    ts = [torch.ones(a[:-1], dtype=a[-1]) if isinstance(a[-1], torch.dtype) else torch.ones(a) for a in args]
    with pytest.raises(RuntimeError) as cpu:
        fn(*ts)
    with pytest.raises(RuntimeError) as tpu:
        fn(*to_tpu(ts))
    assert str(cpu.value) == str(tpu.value)


MATMUL_SHAPES = [
    ((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 5)), ((3, 4), (4, 5)),
    ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((2, 3, 4), (2, 4, 5)), ((4,), (2, 4, 5)),
    ((2, 3, 4), (4,)), ((2, 1, 3, 4), (5, 4, 2)), ((1, 2, 3, 4), (3, 1, 4, 2)),
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=str)
def test_matmul(no_fallbacks, sa, sb):
    a, b = make(sa, torch.float32), make(sb, torch.float32, 1)
    compare(torch.matmul, a, b)
    compare(lambda a, b: a @ b, a, b)


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=str)
def test_matmul_backward(no_fallbacks, sa, sb):
    compare_grad(torch.matmul, make(sa, requires_grad=True), make(sb, seed=1, requires_grad=True))


def test_matmul_bfloat16(no_fallbacks):
    compare(torch.matmul, make((2, 3, 8), torch.bfloat16), make((8, 5), torch.bfloat16, 1), **tol(torch.bfloat16))


@pytest.mark.parametrize("x_shape", [(4,), (3, 4), (2, 3, 4)], ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_linear(no_fallbacks, x_shape, bias):
    x, w = make(x_shape, requires_grad=True), make((5, 4), seed=1, requires_grad=True)
    compare_grad(F.linear, x, w, make((5,), seed=2, requires_grad=True) if bias else None)


def test_linear_module(no_fallbacks):
    torch.manual_seed(0)
    compare_grad(lambda m, x: m(x).pow(2).sum(), torch.nn.Linear(6, 3), make((4, 6)))


def test_outer(no_fallbacks):
    compare(torch.outer, make((3,), torch.float32), make((4,), torch.float32, 1))


# --- factorizations and solves (factor.c) ------------------------------------

def spd(shape, dtype, seed=0):
    a = make(shape, dtype, seed)
    return a @ a.mH + shape[-1] * torch.eye(shape[-1], dtype=dtype)


FACTOR_DTYPES = [torch.float32, torch.float64, torch.complex64]


@pytest.mark.parametrize("dtype", FACTOR_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 3), (0, 2, 2), (1, 1)], ids=str)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(no_fallbacks, shape, dtype, upper):
    a = spd(shape, dtype)
    compare(lambda x: torch.linalg.cholesky(x, upper=upper), a, rtol=1e-4, atol=1e-4)
    compare(lambda x: torch.linalg.cholesky_ex(x, upper=upper), a, rtol=1e-4, atol=1e-4)
    compare(lambda x: torch.cholesky_inverse(torch.linalg.cholesky(x, upper=upper), upper=upper), a,
            rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_broadcasts(no_fallbacks, upper):
    f = torch.linalg.cholesky(spd((2, 1, 3, 3), torch.float32), upper=upper)
    compare(lambda b, f: torch.cholesky_solve(b, f, upper=upper), make((4, 3, 2), torch.float32), f,
            rtol=1e-4, atol=1e-4)


def test_cholesky_not_positive_definite():
    a = spd((2, 3, 3), torch.float32)
    a[1, 2, 2] = -100.0
    l, info = torch.linalg.cholesky_ex(a.to("tpu"))
    assert info.dtype == torch.int32 and info.cpu().tolist() == [0, 3]  # LAPACK's: the first failing minor
    with pytest.raises(torch.linalg.LinAlgError, match="not positive-definite"):
        torch.linalg.cholesky(a.to("tpu"))
    with pytest.raises(RuntimeError, match="not positive-definite"):
        torch.linalg.cholesky_ex(a.to("tpu"), check_errors=True)
    compare(lambda x: torch.cholesky(x, upper=True), spd((0, 3, 3), torch.float32))  # checks nothing when empty


@pytest.mark.parametrize("dtype", FACTOR_DTYPES, ids=str)
@pytest.mark.parametrize("upper,left,unit", [(True, True, False), (False, True, True), (False, False, False),
                                             (True, False, True)])
def test_solve_triangular(no_fallbacks, dtype, upper, left, unit):
    a = spd((2, 4, 4), dtype)
    b = make((4, 3) if left else (3, 4), dtype, 1)  # broadcast against a's batch
    compare(lambda a, b: torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit), a, b,
            rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("upper,transpose,unit", [(True, False, False), (False, True, True)])
def test_triangular_solve(no_fallbacks, upper, transpose, unit):
    a, b = spd((4, 4), torch.float32), make((2, 4, 3), torch.float32, 1)
    compare(lambda b, a: torch.triangular_solve(b, a, upper, transpose, unit), b, a, rtol=1e-4, atol=1e-4)


LU_OPS = [
    ("lu_factor_ex", lambda a, b: torch.linalg.lu_factor_ex(a)),
    ("lu", lambda a, b: torch.linalg.lu(a)),
    ("lu_unpack", lambda a, b: torch.lu_unpack(*torch.linalg.lu_factor(a))),
    ("det", lambda a, b: torch.linalg.det(a)),
    ("det_noncontiguous", lambda a, b: torch.ops.aten._linalg_det(a.mT)),
    ("slogdet", lambda a, b: torch.ops.aten._linalg_slogdet(a)),
    ("inv", lambda a, b: torch.linalg.inv_ex(a)),
    ("solve", lambda a, b: torch.ops.aten._linalg_solve_ex(a, b)),
    ("solve_vector", lambda a, b: torch.linalg.solve(a, b[..., 0])),
    ("solve_right", lambda a, b: torch.linalg.solve(a, b.mT, left=False)),
    ("lu_solve", lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b)),
    ("lu_solve_adjoint", lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, adjoint=True)),
    ("lu_solve_right", lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b.mT, left=False)),
    ("lu_solve_right_adjoint",
     lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b.mT, left=False, adjoint=True)),
]


@pytest.mark.parametrize("dtype", FACTOR_DTYPES, ids=str)
@pytest.mark.parametrize("name,fn", LU_OPS, ids=[n for n, _ in LU_OPS])
def test_lu_family(no_fallbacks, name, fn, dtype):
    compare(fn, make((2, 4, 4), dtype), make((2, 4, 3), dtype, 1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (0, 0), (2, 0, 3)], ids=str)
def test_lu_shapes(no_fallbacks, shape):
    compare(torch.linalg.lu, make(shape, torch.float32))
    compare(torch.linalg.det if shape[-1] == shape[-2] else torch.linalg.lu_factor, make(shape, torch.float32))


def test_lu_singular(no_fallbacks):
    a = torch.tensor([[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 0.0, 1.0]], [[0.0, 0.0, 0.0]] * 3])
    compare(lambda x: torch.linalg.lu_factor_ex(x), a)  # info: the first zero pivot, as LAPACK
    compare(lambda x: torch.linalg.slogdet(x), a)       # sign 0, logabsdet -inf
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        torch.linalg.inv(a.to("tpu"))
    with pytest.raises(RuntimeError, match="singular"):
        torch.linalg.solve_ex(a.to("tpu"), a.to("tpu"), check_errors=True)


def test_lu_nan_pivots_stay_in_range(no_fallbacks):
    a = make((3, 3), torch.float32)
    a[:, 0] = float("nan")
    lu, piv = torch.linalg.lu_factor(a.to("tpu"))
    assert ((piv.cpu() >= 1) & (piv.cpu() <= 3)).all() and lu.cpu().isnan().any()


@pytest.mark.parametrize("name", ["solve", "inv", "matrix_exp"])
def test_high_rank_batches(no_fallbacks, name):
    """Matrices in a batch of 7 dims, 9 in all: the factorizations' products
    over the batch are dots of 9-d operands, which crashed XLA's YNNPACK
    (programs with values of more than 8 dims now compile without it)."""
    a = make((2,) * 7 + (16, 16), torch.float32) / 16 + torch.eye(16)
    b = make((2,) * 7 + (16, 4), torch.float32, 1)
    fn = {"solve": torch.linalg.solve, "inv": lambda a, b: torch.linalg.inv(a),
          "matrix_exp": lambda a, b: torch.linalg.matrix_exp(a)}[name]
    compare(fn, a, b, rtol=1e-4, atol=1e-4)


def test_lu_without_pivoting_error():
    with pytest.raises(RuntimeError, match="LU without pivoting is not implemented on the CPU"):
        torch.linalg.lu_factor(make((3, 3), torch.float32).to("tpu"), pivot=False)


def test_angle(no_fallbacks):
    compare(torch.angle, torch.tensor([-1.0, 0.0, -0.0, 2.0, float("nan"), float("-inf")]))
    compare(torch.angle, make((3, 4), torch.complex64))
    compare(torch.angle, torch.tensor([-3, 0, 2]))  # integers give the default float type
    compare(torch.angle, make((2, 3), torch.bfloat16))


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.5, float("inf")])
def test_cdist(no_fallbacks, p):
    compare(lambda a, b: torch.cdist(a, b, p=p), make((2, 5, 3), torch.float32), make((1, 4, 3), torch.float32, 1),
            rtol=1e-5, atol=1e-5)
    compare(lambda a, b: torch.cdist(a, b, p=p), make((0, 3), torch.float32), make((4, 3), torch.float32))


def test_cdist_bad_input():
    with pytest.raises(RuntimeError, match="X1 and X2 must have the same number of columns"):
        torch.cdist(make((2, 3), torch.float32).to("tpu"), make((2, 4), torch.float32).to("tpu"))


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 1.5, 3.5, float("inf")])
def test_cdist_backward(no_fallbacks, p):
    a, b = make((2, 5, 3), torch.float32), make((1, 4, 3), torch.float32, 1)
    b[0, 1] = a[1, 2]  # a pair at distance 0 contributes nothing

    def fn(x1, x2):
        return torch.cdist(x1, x2, p=p).sin().sum()
    compare_grad(fn, a.requires_grad_(), b.requires_grad_(), rtol=1e-5, atol=1e-5)
    compare_grad(fn, make((0, 4, 3), requires_grad=True), make((5, 3), requires_grad=True))  # x2's gradient: zeros


@pytest.mark.parametrize("dtype", FACTOR_DTYPES, ids=str)
@pytest.mark.parametrize("scale", [0.0, 0.01, 1.0, 30.0])  # 0: no squaring; 30: several, per matrix
def test_matrix_exp(no_fallbacks, dtype, scale):
    # The normal entries the tolerance was set for: the scaled exponential
    # squares several times, and float32's error grows with the norm.
    a = torch.randn(3, 4, 4, generator=torch.Generator().manual_seed(32)).to(dtype)
    a = a * torch.tensor([scale, scale / 10, 1.0]).to(dtype).view(3, 1, 1)
    compare(torch.linalg.matrix_exp, a, rtol=1e-4, atol=1e-4)


def test_matrix_exp_edges(no_fallbacks):
    a = make((2, 3, 3), torch.float32)
    a[1, 0, 0] = float("nan")
    compare(torch.linalg.matrix_exp, a)
    compare(torch.linalg.matrix_exp, make((0, 3, 3), torch.float32))
    compare(torch.linalg.matrix_exp, make((2, 0, 0), torch.float32))
    with pytest.raises(RuntimeError, match="must be batches of square matrices"):
        torch.linalg.matrix_exp(make((2, 3), torch.float32).to("tpu"))


def check_svd(a, full):
    """U, S, Vh on tpu: S as on CPU, U and Vh orthonormal, U S Vh == a (the
    vectors' signs/phases are not unique, so they are not compared to CPU)."""
    u, s, vh = (t.cpu() for t in torch.ops.aten._linalg_svd(a.to("tpu"), full_matrices=full))
    expected = torch.linalg.svd(a, full_matrices=full)
    assert u.shape == expected.U.shape and vh.shape == expected.Vh.shape and s.dtype == expected.S.dtype
    torch.testing.assert_close(s, expected.S, rtol=1e-4, atol=1e-4)
    k = s.shape[-1]
    torch.testing.assert_close((u[..., :k] * s.unsqueeze(-2).to(u.dtype)) @ vh[..., :k, :], a, rtol=1e-4, atol=1e-4)
    for q in (u.mH @ u, vh @ vh.mH):
        torch.testing.assert_close(q, torch.eye(q.shape[-1], dtype=q.dtype).expand_as(q), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", FACTOR_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 6, 4), (0, 3), (3, 0)], ids=str)
@pytest.mark.parametrize("full", [False, True])
def test_svd(no_fallbacks, shape, dtype, full):
    check_svd(make(shape, dtype), full)


@pytest.mark.parametrize("full", [False, True])
def test_svd_rank_deficient(no_fallbacks, full):
    # zero singular values: U is completed to orthonormal columns all the same
    check_svd(make((5, 2), torch.float32) @ make((2, 4), torch.float32, 1), full)
    check_svd(torch.zeros(3, 3), full)


def test_svd_composites(no_fallbacks):
    a = make((2, 5, 3), torch.float32)
    for fn in (torch.linalg.svdvals, torch.linalg.pinv, lambda x: torch.linalg.matrix_norm(x, "nuc"),
               lambda x: torch.linalg.matrix_norm(x, 2), torch.linalg.matrix_rank):
        compare(fn, a, rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError, match="input matrix contained non-finite values"):
        torch.linalg.svdvals(torch.tensor([[float("nan"), 1.0], [0.0, 1.0]], device="tpu"))


@pytest.mark.parametrize("dtype", FACTOR_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 4), (2, 5, 5), (1, 1), (0, 3, 3)], ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(no_fallbacks, shape, dtype, uplo):
    """Eigenvalues as on CPU; eigenvectors orthonormal and V diag(w) V^H equal to
    the Hermitian matrix of the UPLO triangle (their signs/phases are not unique)."""
    a = make(shape, dtype)
    compare(lambda x: torch.linalg.eigvalsh(x, UPLO=uplo), a, rtol=1e-4, atol=1e-4)
    w, v = (t.cpu() for t in torch.linalg.eigh(a.to("tpu"), UPLO=uplo))
    ew, ev = torch.linalg.eigh(a, UPLO=uplo)
    torch.testing.assert_close(w, ew, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close((v * w.unsqueeze(-2).to(v.dtype)) @ v.mH, (ev * ew.unsqueeze(-2).to(v.dtype)) @ ev.mH,
                               rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(v.mH @ v, torch.eye(shape[-1], dtype=dtype).expand_as(v), rtol=1e-4, atol=1e-4)


def test_eigh_composites(no_fallbacks):
    a = make((2, 4, 4), torch.float32)
    a = a + a.mT
    compare(lambda x: torch.linalg.matrix_rank(x, hermitian=True), a)
    compare(lambda x: torch.linalg.pinv(x, hermitian=True), a, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", FACTOR_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 4, 3), (0, 3)], ids=str)
def test_qr(no_fallbacks, shape, dtype):
    a = make(shape, dtype)
    for mode in ("reduced", "complete", "r"):  # Householder with LAPACK's signs: Q and R as on CPU
        compare(lambda x: torch.linalg.qr(x, mode=mode), a, rtol=1e-4, atol=1e-4)
    refl, tau = torch.geqrf(a)
    got = compare(torch.geqrf, a, rtol=1e-4, atol=1e-4)
    assert got[0].stride() == refl.stride()  # LAPACK's column-major matrices
    if shape[-2] >= shape[-1]:
        compare(torch.linalg.householder_product, refl, tau, rtol=1e-4, atol=1e-4)
    for left, c in ((True, make((*shape[:-2], shape[-2], 2), dtype, 1)), (False, make((*shape[:-2], 2, shape[-2]), dtype, 1))):
        for transpose in (False, True):
            compare(lambda r, t, c: torch.ormqr(r, t, c, left, transpose), refl, tau, c, rtol=1e-4, atol=1e-4)


LSTSQ_SHAPES = [((5, 3), (5, 2)), ((3, 5), (3, 2)), ((2, 4, 4), (2, 4, 3)), ((6, 3), (6,)), ((1, 6, 3), (3, 6, 2)),
                ((2, 0, 3), (2, 0, 1))]


@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelsd", "gelss"])
@pytest.mark.parametrize("dtype", FACTOR_DTYPES, ids=str)
@pytest.mark.parametrize("shapes", LSTSQ_SHAPES, ids=str)
def test_lstsq(no_fallbacks, shapes, dtype, driver):
    """Solution, and what each driver returns beside it, as on CPU: residuals
    for tall matrices (gels; gelsd and gelss when of full rank), the rank of
    each matrix of A's own batch, its singular values."""
    a, b = make(shapes[0], dtype), make(shapes[1], dtype, 1)
    compare(lambda a, b: tuple(torch.linalg.lstsq(a, b, driver=driver)), a, b, rtol=1e-4, atol=1e-4)


def test_lstsq_rank_deficient_rcond_and_gradients(no_fallbacks):
    a = make((6, 3), torch.float64)
    a[:, 2] = a[:, 1]  # rank 2: no residuals from gelsd, the minimum-norm solution
    b = make((6, 2), torch.float64, 1)
    for driver in ("gelsy", "gelsd", "gelss"):
        compare(lambda a, b: tuple(torch.linalg.lstsq(a, b, driver=driver)), a, b)
    compare(lambda a, b: tuple(torch.linalg.lstsq(a, b, rcond=0.5, driver="gelsd")), make((5, 3), torch.float32),
            make((5, 2), torch.float32, 1), rtol=1e-4, atol=1e-4)
    x, y = make((5, 3), torch.float32).requires_grad_(), make((5, 2), torch.float32, 1).requires_grad_()
    compare(lambda x, y: torch.autograd.grad(torch.linalg.lstsq(x, y).solution.sum(), (x, y)), x, y,
            rtol=1e-4, atol=1e-4)


def test_lstsq_errors():
    cases = [(make((3,), torch.float32), make((3,), torch.float32), {}),
             (make((3, 2), torch.float32), make((3, 1), torch.float64), {}),
             (make((3, 2), torch.float32), make((4, 1), torch.float32), {}),
             (make((3, 2), torch.float32), make((2, 2, 3, 1), torch.float32), {}),
             (make((3, 2), torch.float32).bfloat16(), make((3, 1), torch.float32).bfloat16(), {}),
             (make((3, 2), torch.float32), make((3, 1), torch.float32), {"driver": "qr"})]
    for a, b, kw in cases:
        with pytest.raises(RuntimeError) as cpu_err:
            torch.linalg.lstsq(a, b, **kw)
        with pytest.raises(RuntimeError, match=re.escape(str(cpu_err.value))):
            torch.linalg.lstsq(a.to("tpu"), b.to("tpu"), **kw)


def test_qr_reduced_column():
    # a column with nothing below the diagonal gets no reflection (tau 0), as LAPACK
    a = torch.tensor([[-2.0, 1.0], [0.0, 3.0], [0.0, 4.0]])
    compare(torch.linalg.qr, a)


def test_factorizations_compiled(no_fallbacks):
    # the graph path has no strides: _linalg_det factors A^T there, as PyTorch does for contiguous A
    def f(a, b):
        return (torch.linalg.det(a), torch.linalg.svdvals(a), torch.linalg.solve(a, b), torch.linalg.qr(a).R,
                torch.linalg.eigvalsh(a), torch.linalg.matrix_exp(a), torch.linalg.cholesky(a @ a.mT + 4 * torch.eye(4, device=a.device)))
    a, b = make((3, 4, 4), torch.float32), make((3, 4, 2), torch.float32, 1)
    got = torch.compile(f, backend="tpu")(a.to("tpu"), b.to("tpu"))
    torch.testing.assert_close([t.cpu() for t in got], list(f(a, b)), rtol=1e-4, atol=1e-4)


# --- general eigendecomposition (eig.c) -----------------------------------------

def check_eig(a, rtol=1e-4, atol=1e-4, vectors_exact=False, same_order=True):
    """Eigenvalues in the CPU's (LAPACK's) order; eigenvectors of unit norm
    with the CPU's magnitudes (the comparison PyTorch's OpInfo makes: their
    phase is LAPACK's convention up to a sign where the iterations converged
    at another step), and A V = V diag(w). Without |same_order|, each of the
    CPU's eigenvalues is paired with the nearest of ours first: the order
    LAPACK deflates a larger matrix in follows MKL's code path for the CPU
    (a float32 16x16 matrix's differed between an AMD and an Intel CPU)."""
    w, v = (t.cpu() for t in torch.linalg.eig(a.to("tpu")))
    ew, ev = torch.linalg.eig(a)
    if not same_order:
        nearest = (w.unsqueeze(-2) - ew.unsqueeze(-1)).abs().argmin(-1)  # ours for each of the CPU's
        assert (nearest.sort(-1).values == torch.arange(w.shape[-1])).all(), "not a pairing"
        w = w.gather(-1, nearest)
        v = v.gather(-1, nearest.unsqueeze(-2).expand_as(v))
    torch.testing.assert_close(w, ew, rtol=rtol, atol=atol)
    torch.testing.assert_close(v.abs(), ev.abs(), rtol=rtol, atol=atol)
    if vectors_exact:
        torch.testing.assert_close(v, ev, rtol=rtol, atol=atol)
    torch.testing.assert_close(a.to(v.dtype) @ v, v * w.unsqueeze(-2), rtol=rtol, atol=atol)
    norms = torch.linalg.vector_norm(v, dim=-2)
    torch.testing.assert_close(norms, torch.ones_like(norms), rtol=rtol, atol=atol)
    eigvals = torch.linalg.eigvals(a.to("tpu")).cpu()
    if not same_order:
        eigvals = eigvals.gather(-1, nearest)
    torch.testing.assert_close(eigvals, ew, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", FACTOR_DTYPES + [torch.complex128], ids=str)
@pytest.mark.parametrize("shape", [(5, 5), (2, 4, 4), (1, 1), (0, 3, 3), (16, 16)], ids=str)
def test_eig(no_fallbacks, shape, dtype):
    # complex matrices: zgeev's convention (largest element real positive) makes the vectors unique
    check_eig(make(shape, dtype), **({} if dtype in (torch.float32, torch.complex64) else dict(rtol=1e-9, atol=1e-9)),
              vectors_exact=dtype.is_complex, same_order=shape[-1] <= 5)


def test_eig_64(no_fallbacks):
    a = make((2, 64, 64), torch.float64)
    check_eig(a, rtol=1e-8, atol=1e-8)
    # float32: the order of nearly converged eigenvalues follows rounding (the
    # CPU's own float32 and float64 orders differ here); as a set, against float64
    a32 = make((64, 64), torch.float32, 1)
    w, v = (t.cpu() for t in torch.linalg.eig(a32.to("tpu")))
    ew = torch.linalg.eigvals(a32.double())
    nearest = (w.unsqueeze(-1).to(ew.dtype) - ew.unsqueeze(-2)).abs().argmin(-1)
    assert sorted(nearest.tolist()) == list(range(64))
    torch.testing.assert_close(w.to(ew.dtype), ew[nearest], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(a32.to(v.dtype) @ v, v * w, rtol=1e-4, atol=1e-4)


EIG_SPECIAL = {
    "identity": torch.eye(4),
    "zero": torch.zeros(3, 3),
    "upper": torch.triu(make((5, 5), torch.float32)),    # eigenvalues isolated by gebal's permutations
    "lower": torch.tril(make((5, 5), torch.float32)),
    "jordan": torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]]),  # defective
    "rotation": torch.tensor([[0.0, -1.0], [1.0, 0.0]]),
    "scaled": torch.tensor([[1.0, 1e6, 0.0], [1e-6, 2.0, 1e6], [0.0, 1e-6, 3.0]]),  # balanced by scaling
    "blocks": torch.block_diag(torch.tensor([[0.0, 2.0], [-3.0, 0.0]]), torch.tensor([[5.0]]),
                               torch.tensor([[1.0, 4.0], [-1.0, 1.0]])),
}


@pytest.mark.parametrize("name", list(EIG_SPECIAL), ids=str)
def test_eig_special(no_fallbacks, name):
    check_eig(EIG_SPECIAL[name].double(), rtol=1e-9, atol=1e-9, vectors_exact=True)


def test_eig_backward_and_out(no_fallbacks):
    x = make((2, 5, 5), torch.float64)
    compare(lambda x: torch.autograd.grad(
        [(lambda w, v: w.real.sum() + 2 * w.imag.sum() + v.abs().sum())(*torch.linalg.eig(x))], x),
        x.requires_grad_(), rtol=1e-8, atol=1e-8)
    a = make((2, 4, 4), torch.float32)
    w, v = torch.empty(0, dtype=torch.complex64, device="tpu"), torch.empty(0, dtype=torch.complex64, device="tpu")
    torch.linalg.eig(a.to("tpu"), out=(w, v))
    torch.testing.assert_close(w.cpu(), torch.linalg.eigvals(a), rtol=1e-4, atol=1e-4)
    torch.linalg.eigvals(a.to("tpu"), out=w)
    torch.testing.assert_close(w.cpu(), torch.linalg.eigvals(a), rtol=1e-4, atol=1e-4)


def test_eig_non_finite_and_errors(no_fallbacks):
    nan = torch.tensor([[1.0, float("nan")], [0.0, 1.0]])
    with pytest.raises(RuntimeError, match="input tensor should not contain infs or NaNs"):
        torch.linalg.eig(nan.to("tpu"))
    compare(torch.linalg.eigvals, nan)  # the CPU answers; the NaN lies in an isolated part
    for bad, err in ((make((2, 3), torch.float32), RuntimeError), (make((3, 3), torch.float16), NotImplementedError),
                     (make((3, 3), torch.int64), RuntimeError)):
        for fn in (torch.linalg.eig, torch.linalg.eigvals):
            with pytest.raises(err) as cpu_err:
                fn(bad)
            with pytest.raises(err, match=re.escape(str(cpu_err.value).splitlines()[0])):
                fn(bad.to("tpu"))


# --- LDL (Bunch-Kaufman) ---------------------------------------------------------

def symmetric(shape, dtype, seed=0, hermitian=False, zero_diagonal=False):
    a = make(shape, dtype, seed)
    a = a + (a.mH if hermitian else a.mT)
    return a - torch.diag_embed(torch.diagonal(a, dim1=-2, dim2=-1)) if zero_diagonal else a


@pytest.mark.parametrize("dtype", FACTOR_DTYPES + [torch.complex128], ids=str)
@pytest.mark.parametrize("shape", [(5, 5), (2, 6, 6), (1, 1), (0, 3, 3), (16, 16)], ids=str)
@pytest.mark.parametrize("hermitian", [False, True])
@pytest.mark.parametrize("zero_diagonal", [False, True])  # 2x2 pivots
def test_ldl(no_fallbacks, shape, dtype, hermitian, zero_diagonal):
    """sytrf's (hetrf's) compact LD, pivots and info as on CPU, and the solve."""
    a = symmetric(shape, dtype, hermitian=hermitian, zero_diagonal=zero_diagonal)
    if not hermitian:
        a = a.tril() + make(shape, dtype, 2).triu(1)  # only the lower triangle counts
    ld, piv, info = compare(lambda x: torch.linalg.ldl_factor_ex(x, hermitian=hermitian), a, rtol=1e-4, atol=1e-4)
    if zero_diagonal and a.numel() > 1:
        assert (piv.cpu() < 0).any()
    b = make((*shape[:-1], 3), dtype, 1)
    f = torch.linalg.ldl_factor_ex(a, hermitian=hermitian)
    compare(lambda ld, p, b: torch.linalg.ldl_solve(ld, p, b, hermitian=hermitian), f.LD, f.pivots, b,
            rtol=1e-4, atol=1e-4)
    if len(shape) > 2 and shape[0] > 0:
        compare(lambda ld, p, b: torch.linalg.ldl_solve(ld, p, b, hermitian=hermitian), f.LD, f.pivots, b[0],
                rtol=1e-4, atol=1e-4)  # b broadcast against LD's batch


def test_ldl_64(no_fallbacks):
    for zero_diagonal in (False, True):
        a = symmetric((2, 64, 64), torch.float64, zero_diagonal=zero_diagonal)
        compare(torch.linalg.ldl_factor_ex, a)
        f = torch.linalg.ldl_factor(a)
        compare(torch.linalg.ldl_solve, f.LD, f.pivots, make((2, 64, 3), torch.float64, 1))
    compare(torch.linalg.ldl_factor_ex, symmetric((64, 64), torch.float32), rtol=1e-4, atol=1e-4)


def test_ldl_singular_and_errors(no_fallbacks):
    a = torch.zeros(2, 3, 3)
    a[0] = symmetric((3, 3), torch.float32)
    a[1, 0, 0] = 1.0  # the second column is zero: info 2
    compare(torch.linalg.ldl_factor_ex, a)
    for fn in (lambda x: torch.linalg.ldl_factor(x), lambda x: torch.linalg.ldl_factor_ex(x, check_errors=True)):
        with pytest.raises(RuntimeError) as cpu_err:
            fn(a)
        with pytest.raises(RuntimeError, match=re.escape(str(cpu_err.value).splitlines()[0])):
            fn(a.to("tpu"))
    f = torch.linalg.ldl_factor(symmetric((4, 4), torch.float32))
    cases = [(torch.linalg.ldl_factor_ex, (make((3, 4), torch.float32),), {}),
             (torch.linalg.ldl_factor_ex, (make((3, 3), torch.int64),), {}),
             (torch.linalg.ldl_factor_ex, (make((3, 3), torch.float16),), {}),
             (torch.linalg.ldl_factor_ex, (make((3, 3), torch.float32),),
              {"out": (torch.empty(0, dtype=torch.float64), torch.empty(0, dtype=torch.int32),
                       torch.empty(0, dtype=torch.int32))}),
             (torch.linalg.ldl_solve, (f.LD, f.pivots, make((3, 2), torch.float32)), {}),
             (torch.linalg.ldl_solve, (f.LD, f.pivots.float(), make((4, 2), torch.float32)), {}),
             (torch.linalg.ldl_solve, (f.LD, f.pivots, make((4, 2), torch.float64)), {}),
             (torch.linalg.ldl_solve, (f.LD.half(), f.pivots, make((4, 2), torch.float16)), {}),
             (torch.linalg.ldl_solve, (f.LD, f.pivots, make((4, 2), torch.float32)),
              {"out": torch.empty(0, dtype=torch.float64)})]
    for fn, args, kw in cases:
        with pytest.raises((RuntimeError, NotImplementedError)) as cpu_err:
            fn(*args, **kw)
        with pytest.raises(cpu_err.type, match=re.escape(str(cpu_err.value).splitlines()[0])):
            fn(*to_tpu(args), **to_tpu(kw))
    ld, piv, info = (torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.int32, device="tpu"),
                     torch.empty(0, dtype=torch.int32, device="tpu"))
    a = symmetric((2, 4, 4), torch.float32, zero_diagonal=True)
    torch.linalg.ldl_factor_ex(a.to("tpu"), out=(ld, piv, info))
    torch.testing.assert_close([ld.cpu(), piv.cpu(), info.cpu()], list(torch.linalg.ldl_factor_ex(a)),
                               rtol=1e-4, atol=1e-4)
