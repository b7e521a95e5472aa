"""The float64 referee the sweeps share (the OpInfo and ModuleInfo sweeps,
the Hugging Face architectures): where tpu and the CPU differ beyond
torch.testing's tolerances, a float64 run of the same computation decides,
and tpu passes when it is as close to it as the CPU (RMSE at most twice the
CPU's, the rule of PyTorch's benchmark harness) with NaNs where the CPU has
them. (The fuzzer compares element by element: fuzz/compare.py.)"""
import torch


def rmse(a, b):
    """The root mean square of a - b over the elements finite in both."""
    wide = torch.complex128 if a.is_complex() or b.is_complex() else torch.float64
    a, b = a.to(wide), b.to(wide)
    finite = torch.isfinite(a) & torch.isfinite(b)
    if not finite.any():
        return 0.0
    return float(((a - b)[finite].abs() ** 2).mean().sqrt())


def as_close(got, want, ref):
    """Whether tpu's |got| is as close to the float64 |ref| as the CPU's
    |want| is, NaNs where the CPU's are."""
    return torch.equal(torch.isnan(got), torch.isnan(want)) and rmse(got, ref) <= 2 * rmse(want, ref) + 1e-12


class Mismatch(Exception):
    """What differs, for the report."""


def compare(got, want, ref, tol, path="output"):
    """Raises Mismatch unless |got| matches |want| (or |ref|, the float64
    reference, arbitrates in its favour)."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise Mismatch(f"{path}: expected a tensor, got {type(got).__name__}")
        got = got.detach().cpu()
        want = want.detach()
        if got.shape != want.shape or got.dtype != want.dtype:
            raise Mismatch(f"{path}: {got.dtype}{list(got.shape)} vs CPU's {want.dtype}{list(want.shape)}")
        try:
            torch.testing.assert_close(got, want, equal_nan=True, **tol)
        except AssertionError as e:
            if ref is None or not (want.is_floating_point() or want.is_complex()):
                raise Mismatch(f"{path}: {str(e).splitlines()[0]} {worst(got, want)}") from None
            ref = ref.detach().to(torch.complex128 if want.is_complex() else torch.float64)
            if not as_close(got, want, ref):
                raise Mismatch(f"{path}: {str(e).splitlines()[0]} {worst(got, want)} "
                               f"(float64 reference: tpu RMSE {rmse(got, ref):.3g}, CPU {rmse(want, ref):.3g})") from None
        return
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            raise Mismatch(f"{path}: structure differs")
        refs = ref if isinstance(ref, (list, tuple)) and len(ref) == len(want) else [None] * len(want)
        for i, (g, w, r) in enumerate(zip(got, want, refs)):
            compare(g, w, r, tol, f"{path}[{i}]")
        return
    if isinstance(want, float) and isinstance(got, float):
        if not (abs(got - want) <= 1e-5 + 1e-5 * abs(want) or (got != got and want != want)):
            raise Mismatch(f"{path}: {got} vs CPU's {want}")
        return
    if got != want:
        raise Mismatch(f"{path}: {got!r} vs CPU's {want!r}")


def worst(got, want):
    diff = (got.double() - want.double()).abs()
    diff = torch.where(torch.isnan(diff), torch.zeros_like(diff), diff)
    if diff.numel() == 0:
        return ""
    i = int(diff.argmax())
    return f"(worst at flat index {i}: {got.reshape(-1)[i].item()!r} vs {want.reshape(-1)[i].item()!r})"



def compare_grads(got, want, refs):
    """None, or ("grad-mismatch", reason): gradients (None where unused) against
    the CPU's, float64 ones arbitrating."""
    try:
        if got is None or len(got) != len(want):
            raise Mismatch("gradients: structure differs")
        for i, (a, b) in enumerate(zip(got, want)):
            if (a is None) != (b is None):
                raise Mismatch(f"grad[{i}] defined on one side only")
            if b is not None:
                compare(a, b, refs[i] if refs else None, {"rtol": 1e-4, "atol": 1e-5}, f"grad[{i}]")
    except Mismatch as e:
        return "grad-mismatch", str(e)[:500]
    return None

