"""The fuzzer's comparison after each step: every live tensor, gradient and
optimizer state of tpu against the CPU's, float64 deciding where they differ
(tpu must be as close to it as the CPU: max error within 4x, mean within 2x,
plus what an elementwise op's input error carries), and errors against the
CPU's."""
import math
import re

import torch

def _first_line(exc):
    msg = str(exc).strip().splitlines()
    return msg[0] if msg else ""


def _same_error(a, b):
    """tpu refused as the CPU did: the same exception type and first line
    (device names aside)."""
    if type(a) is not type(b):
        return False
    # autograd names a tensor's type "tpuFloatType" where the CPU's is "torch.FloatTensor"
    norm = [re.sub(r"\btpu(\w+)Type\b", r"torch.\1Tensor", _first_line(e)) for e in (a, b)]
    norm = [m.replace("tpu:0", "cpu").replace("tpu", "cpu").replace("CPU", "cpu") for m in norm]
    return norm[0] == norm[1]


# Elementwise ops of one input and the most their output's error grows by
# per unit of their input's error (the largest slope).
_SLOPES = {"torch.tanh({0})": 1.0, "torch.sigmoid({0})": 0.25, "torch.sin({0})": 1.0, "torch.atan({0})": 1.0,
           "torch.erf({0})": 1.13, "F.gelu({0})": 1.13, "F.silu({0})": 1.1, "F.softplus({0})": 1.0,
           "F.relu({0})": 1.0, "torch.relu({0})": 1.0, "-{0}": 1.0, "{0}.abs()": 1.0, "{0} * 2": 2.0,
           "{0} * -0.5": 0.5, "{0} + 1.5": 1.0, "{0} - 3": 1.0, "{0}.clamp(-0.5, 0.7)": 1.0}


def _compare_tensor(name, got, want, ref, inherited=None, device="tpu"):
    """None if |got| (tpu's, or |device|'s) agrees with CPU's |want| (float64
    run's |ref| referee), else the reason. |inherited|: the error, element
    by element, that |got| may carry from its input (an elementwise op of
    slope at most L passes on L times its input's error)."""
    if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor):
        if (got is None) != (want is None):
            return f"{name}: {type(got).__name__} on {device}, {type(want).__name__} on the CPU"
        return None
    if got.device.type != device:
        return f"{name}: on {got.device}, not {device}"
    if got.shape != want.shape:
        return f"{name}: shape {tuple(got.shape)} on {device}, {tuple(want.shape)} on the CPU"
    if got.dtype != want.dtype:
        return f"{name}: dtype {got.dtype} on {device}, {want.dtype} on the CPU"
    # a dim of size 1 may have any stride (is_contiguous() looks past it)
    if [st for st, n in zip(got.stride(), got.shape) if n > 1] != \
            [st for st, n in zip(want.stride(), want.shape) if n > 1] and got.numel() > 1:
        return f"{name}: strides {got.stride()} on {device}, {want.stride()} on the CPU"
    g = got.detach().cpu()
    w = want.detach()
    if not g.is_floating_point():
        if torch.equal(g, w):
            return None
        bad = (g != w).nonzero()[0].tolist()
        return f"{name}: differs at {bad}: {g[tuple(bad)].item()} on {device}, {w[tuple(bad)].item()} on the CPU"
    if torch.allclose(g, w, rtol=1.3e-6, atol=1e-5, equal_nan=True):
        return None
    r = ref.detach().double() if isinstance(ref, torch.Tensor) else None
    if r is not None and r.shape == g.shape:
        gd, wd = g.double(), w.double()
        same_nan = torch.equal(gd.isnan(), wd.isnan())
        finite = ~(gd.isnan() | wd.isnan() | r.isnan())
        e_t = (gd - r).abs()[finite]
        e_c = (wd - r).abs()[finite]
        tiny = 1e-6 * (r[finite].abs().max().item() if finite.any() else 0.0) + 1e-12
        inf_ok = torch.equal(gd.isinf() & finite, wd.isinf() & finite)
        e_t, e_c = e_t.nan_to_num(posinf=0), e_c.nan_to_num(posinf=0)
        if same_nan and inf_ok and e_t.numel():
            if inherited is not None and inherited.shape == g.shape:
                carried = inherited.double()[finite].nan_to_num(nan=0, posinf=0)
                ok = bool((e_t <= carried + 4 * e_c.max() + tiny).all()) and \
                    e_t.mean() <= carried.mean() + 2 * e_c.mean() + tiny
            else:
                # the mean's test is for a bias over many elements: for a few
                # (a sum's one number) it would be the max's on one sample
                ok = e_t.max() <= 4 * e_c.max() + tiny and (e_t.numel() < 16 or e_t.mean() <= 2 * e_c.mean() + tiny)
            if ok:
                return None
    diff = (g.double() - w.double()).abs().nan_to_num(nan=math.inf)
    idx = tuple(int(v) for v in torch.unravel_index(diff.argmax(), g.shape)) if g.dim() else ()
    return (f"{name}: max difference {diff.max().item():.3g} at {list(idx)}: "
            f"{g[idx].item():.8g} on {device}, {w[idx].item():.8g} on the CPU"
            + (f", {r[idx].item():.8g} in float64" if r is not None and r.shape == g.shape else ""))


def _carried_error(i, tpu, ref, slopes):
    """The error tensor |i| may carry from its input (None if unknown)."""
    if i not in slopes:
        return None
    slope, j = slopes[i]
    a, b = tpu.t.get(j), ref.t.get(j)
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != tpu.t[i].shape:
        return None
    return slope * (a.detach().cpu().double() - b.detach().double()).abs()


def _compare_envs(tpu, cpu, ref, slopes=None, explained=None):
    """The first disagreement of |tpu|'s tensors, gradients and optimizer
    state with |cpu|'s, or None. |slopes|: {tensor: (slope, input)} of the
    elementwise ops that made them; |explained|: {tensor: error} accepted
    for tensors whose op was arbitrated on tpu's own inputs."""
    slopes = slopes or {}
    explained = explained or {}
    for i in sorted(cpu.t):
        if i not in tpu.t:
            return f"t{i}: missing on {tpu.device}"
        carried = explained.get(i)
        if carried is None:
            carried = _carried_error(i, tpu, ref, slopes)
        why = _compare_tensor(f"t{i}", tpu.t[i], cpu.t[i], ref.t.get(i), carried, tpu.device)
        if why:
            return why
    for n, (p, q, r) in enumerate(zip(tpu.params, cpu.params, ref.params)):
        why = _compare_tensor(f"param {n} .grad", p.grad, q.grad, r.grad, device=tpu.device)
        if why:
            return why
    for n, (a, b, c) in enumerate(zip(*(e.opt_state() for e in (tpu, cpu, ref)))):
        why = _compare_tensor(f"optimizer state {a[0]} of param {n}", a[1], b[1], c[1],
                              device=a[1].device.type)
        if why:
            return why
    return None

