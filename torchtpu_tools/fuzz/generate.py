"""Generating fuzz programs: a seed gives one program, made instruction by
instruction on a CPU shadow that keeps only what the CPU accepts."""
import json
import math
import random

import torch

from .run import OPTIMIZERS, Env, Refused, _cpu_random


_SMALL = [1, 2, 3, 4, 5, 7, 8, 16, 31]
_WIDE = [128, 256, 384, 512, 768, 1024]


class Gen:
    """Makes a program instruction by instruction, running each on a CPU
    shadow to know the tensors' shapes and to keep what the CPU accepts."""

    def __init__(self, seed, mode, steps):
        self.rng = random.Random(seed)
        self.seed, self.mode, self.steps = seed, mode, steps
        self.shadow = Env("cpu")
        self.instrs = []
        self.next_id = 0
        self.exact = {}  # id -> the value is bit-identical across devices (no rounding-order differences)
        self.opt = self.rng.choice(OPTIMIZERS)
        self.blk = 0
        self.in_block = 0

    # tensors
    def live(self, pred=lambda t: True):
        return [i for i, t in self.shadow.t.items() if isinstance(t, torch.Tensor) and _holds(pred, t)]

    def floats(self, pred=lambda t: True):
        return self.live(lambda t: t.is_floating_point() and pred(t))

    def pick(self, ids):
        return self.rng.choice(ids) if ids else None

    def fresh(self):
        self.next_id += 1
        return self.next_id - 1

    def emit(self, ins, exact=None, allow_error=False):
        """Runs |ins| on the shadow; keeps it if the CPU accepts it (or,
        sometimes in eager and fused modes, as an error both must raise)."""
        if self.mode == "compiled" and ins["k"] == "op" and not ins.get("nograd"):
            if self.in_block <= 0:
                self.blk += 1
                self.in_block = self.rng.randint(1, 6)
            ins["blk"] = self.blk
        try:
            self.shadow.run(ins, None if ins["k"] != "random" else self._shadow_random(ins))
        except Refused:
            for o in ins.get("outs", []):
                self.shadow.t.pop(o, None)
            if not (allow_error and self.mode in ("eager", "fused") and ins["k"] == "op" and self.rng.random() < 0.3):
                if "blk" in ins:
                    self.in_block = 0
                return False
            ins.pop("blk", None)
            self.instrs.append(ins)
            return False
        if "blk" in ins:
            self.in_block -= 1
        elif self.mode == "compiled":
            self.in_block = 0
        self.instrs.append(ins)
        for o in ins.get("outs", []):
            self.exact[o] = bool(exact)
        return True

    def _shadow_random(self, ins):
        """Numbers of the right kind for the shadow (the CPU's own draws)."""
        return _cpu_random(ins, self.shadow)

    def shape(self, rank=None, big=False):
        rank = self.rng.choice([0, 1, 1, 2, 2, 2, 3, 3, 4]) if rank is None else rank
        if big and rank <= 2:
            return [self.rng.choice(_WIDE + _SMALL) for _ in range(rank)]
        shape = [self.rng.choice(_SMALL) for _ in range(rank)]
        while math.prod(shape) > 1 << 16:
            shape[self.rng.randrange(rank)] = 2
        return shape

    def new(self, shape=None, dtype="float", grad=False, scale=1.0, transposed=False, maybe_tiny=False, **kw):
        o = self.fresh()
        ins = {"k": "new", "ins": [], "outs": [o], "shape": self.shape() if shape is None else list(shape),
               "dtype": dtype, "seed": self.rng.randrange(1 << 30)}
        if maybe_tiny and dtype == "float" and (ins["seed"] >> 17) % 16 == 0 and math.prod(ins["shape"]) <= 1 << 15:
            # one in 16 of g_new's: values near float32's smallest normal
            # (1.18e-38), many of them subnormal, chosen by the tensor's own
            # seed (no draw: other programs stay as they were); the run
            # compares them as the platform defines subnormals
            # (run._cpu_as_the_device)
            scale = 1e-38
        if grad:
            ins["grad"] = True
        if scale != 1.0:
            ins["scale"] = scale
        if transposed and len(ins["shape"]) >= 2:
            ins["transposed"] = True
        ins.update(kw)
        self.emit(ins, exact=True)
        return o

    def op(self, src, ins, n_out=1, exact=False, nograd=False, allow_error=True, undo=False):
        outs = [self.fresh() for _ in range(n_out)]
        d = {"k": "op", "src": src, "ins": list(ins), "outs": outs}
        if nograd:
            d["nograd"] = True
        if undo:
            d["undo"] = True
        ok = self.emit(d, exact=exact, allow_error=allow_error)
        return outs if ok else None

    def taint(self, i):
        """|i| was written with rounding that may differ by device: it and
        every tensor sharing its storage are no longer exact."""
        ptr = self.shadow.t[i].untyped_storage().data_ptr()
        for j, t in self.shadow.t.items():
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == ptr:
                self.exact[j] = False

    def is_exact(self, i):
        return self.exact.get(i, False) or not self.shadow.t[i].is_floating_point()

    def shape_of(self, i):
        return list(self.shadow.t[i].shape)

    # the instruction mix
    def generate(self):
        for _ in range(self.rng.randint(1, 3)):
            self.new(grad=True, shape=self.shape(rank=self.rng.choice([1, 2, 2])))
        for _ in range(self.rng.randint(1, 3)):
            self.new()
        makers = [
            (8, self.g_new), (14, self.g_view), (10, self.g_unary), (10, self.g_binary),
            (10, self.g_inplace), (4, self.g_out), (8, self.g_matmul), (8, self.g_reduce),
            (5, self.g_index), (3, self.g_foreach), (3, self.g_random), (4, self.g_backward),
            (3, self.g_step), (4, self.g_free), (5, self.g_repeat), (3, self.g_train), (3, self.g_shape_ops),
        ]
        weights = [w for w, _ in makers]
        while len(self.instrs) < self.steps:
            maker = self.rng.choices([m for _, m in makers], weights)[0]
            maker()
        program = {"seed": self.seed, "mode": self.mode, "instrs": self.instrs}
        if self.mode == "compiled" and self.rng.random() < 0.25:
            program["dynamic"] = True
        return program

    def g_new(self):
        o = self.new(grad=self.rng.random() < 0.15, maybe_tiny=True)
        if self.rng.random() < 0.2:
            self.new(dtype="int", high=self.rng.choice([3, 10, 1000]), shape=self.shape_of(o))

    def g_view(self):
        i = self.pick(self.live(lambda t: t.dim() > 0))
        if i is None:
            return self.g_new()
        t = self.shadow.t[i]
        r = self.rng
        d = t.dim()
        sz = list(t.shape)
        choices = []
        if d >= 2:
            a, b = r.sample(range(d), 2)
            choices += [f"{{0}}.transpose({a}, {b})", f"{{0}}.permute({r.sample(range(d), d)})",
                        f"{{0}}.diagonal({r.randint(-1, 1)}, {a}, {b})", f"{{0}}.movedim({a}, {b})",
                        f"{{0}}.flatten({min(a, b)}, {max(a, b)})"]
        if d == 2:
            choices.append("{0}.t()")
        k = r.randrange(d)
        n = sz[k]
        if n > 0:
            start = r.randrange(n)
            # A window of a few elements or of nearly all: an unfold's view has
            # about n * size elements, and the end of a program compares
            # every live tensor (a window of 61595 over 131072 was 17 GB).
            size = r.randint(1, min(n, 16))
            size = size if r.random() < 0.5 else n + 1 - size
            choices += [f"{{0}}.narrow({k}, {start}, {r.randint(0, n - start)})",
                        f"{{0}}[{':, ' * k}{start}::{r.randint(1, 3)}]", f"{{0}}.select({k}, {start})",
                        f"{{0}}.unfold({k}, {size}, {r.randint(1, 2)})"]
        exp = list(sz)
        ones = [j for j, s in enumerate(sz) if s == 1]
        if ones:
            exp[r.choice(ones)] = r.choice([2, 3, 5])
        choices += [f"{{0}}.expand({[r.choice([2, 3])] + exp})", f"{{0}}.expand({exp})",
                    f"{{0}}.unsqueeze({r.randint(0, d)})", "{0}.squeeze()",
                    f"{{0}}.view({[-1]})", f"{{0}}.reshape({list(reversed(sz))})",
                    f"{{0}}.view({sz[:k] + [1] + sz[k:]})"]
        numel = t.untyped_storage().nbytes() // t.element_size()
        if numel > 0:
            rank = r.randint(1, 3)
            size = [r.randint(1, 4) for _ in range(rank)]
            stride = [r.randint(0, 5) for _ in range(rank)]
            span = sum((s - 1) * st for s, st in zip(size, stride))
            if span < numel:
                off = r.randint(0, numel - 1 - span)
                choices.append(f"{{0}}.as_strided({size}, {stride}, {off})")
        self.op(r.choice(choices), [i], exact=self.is_exact(i))

    _EXACT_UNARY = ["-{0}", "{0}.abs()", "torch.relu({0})", "{0} * 2", "{0} * -0.5", "{0} + 1.5", "{0} - 3",
                    "{0}.clamp(-0.5, 0.7)", "torch.sqrt({0}.abs())", "{0} / ({0}.abs() + 1)",
                    "torch.floor({0})", "torch.sign({0})", "{0}.clone()", "{0}.contiguous()",
                    "torch.where({0} > 0, {0}, 0.25)", "({0} > 0.3)", "{0}.to(torch.int64)", "{0}.square()",
                    "torch.maximum({0}, {0} * 0.5)", "{0}.flip(0)", "{0}.roll(1, 0)"]
    _INEXACT_UNARY = ["torch.tanh({0})", "torch.sigmoid({0})", "torch.exp({0}.clamp(-8, 8))", "torch.sin({0})",
                      "torch.log({0}.abs() + 1)", "F.gelu({0})", "F.silu({0})", "torch.erf({0})",
                      "{0}.pow(3)", "torch.rsqrt({0}.abs() + 0.5)", "F.softplus({0})", "torch.atan({0})"]

    def g_unary(self):
        i = self.pick(self.floats())
        if i is None:
            return self.g_new()
        exact = self.is_exact(i)
        pool = self._EXACT_UNARY if exact else [s for s in self._EXACT_UNARY if not any(
            c in s for c in (">", "floor", "sign", "int64", "where"))]
        if self.rng.random() < 0.5:
            self.op(self.rng.choice(self._INEXACT_UNARY), [i])
        else:
            src = self.rng.choice(pool)
            self.op(src, [i], exact=exact and "{0} / (" not in src)

    def partner(self, i):
        """A tensor broadcastable with |i|: an existing one of its shape, or a new one."""
        shape = self.shape_of(i)
        same = [j for j in self.floats(lambda t: list(t.shape) == shape) if j != i]
        if same and self.rng.random() < 0.5:
            return self.pick(same)
        b = [s if self.rng.random() < 0.7 else 1 for s in shape]
        if b and self.rng.random() < 0.3:
            b = b[self.rng.randrange(len(b)):]
        return self.new(shape=b)

    def g_binary(self):
        i = self.pick(self.floats(lambda t: t.dim() > 0))
        if i is None:
            return self.g_new()
        j = self.partner(i)
        exact = self.is_exact(i) and self.is_exact(j)
        src, keep_exact = self.rng.choice([
            ("{0} + {1}", True), ("{0} - {1}", True), ("{0} * {1}", True), ("{0} / ({1}.abs() + 1)", False),
            ("torch.maximum({0}, {1})", True), ("torch.minimum({0}, {1})", True),
            ("torch.add({0}, {1}, alpha=0.5)", False), ("torch.lerp({0}, {1}, 0.3)", False),
            ("torch.addcmul({0}, {1}, {1}, value=0.5)", False),
            # atan2 and hypot away from (0, 0), where their gradients blow up
            # the inputs' rounding (seed 7008: a weight's gradient through hypot)
            ("torch.atan2({0}, {1}.abs() + 0.5)", False),
            ("torch.where({1} > 0, {0}, {1})", True), ("torch.hypot({0}, {1}.abs() + 0.5)", False),
            ("{0} + 2.5 * {1}", False), ("torch.cat([{0}, {0} * {1}], 0)", True)])
        if "where" in src and not self.is_exact(j):
            src = "torch.where({1}.abs() >= 0, {0}, {1})"
        self.op(src, [i, j], exact=exact and keep_exact)

    def g_inplace(self):
        i = self.pick(self.floats(lambda t: t.dim() > 0 and _writable(t)))
        if i is None:
            return self.g_new()
        t = self.shadow.t[i]
        leaf_param = _holds(_is_leaf_param, t)
        r = self.rng
        j = self.partner(i)
        k = r.randrange(t.dim())
        n = t.shape[k]
        idx = self.new(dtype="int", high=max(n, 1), shape=[r.randint(1, max(1, min(n, 6)))]) if n else None
        choices = [("{0}.mul_(%s)" % r.choice([0.9, -1.1, 0.5, 1.25]), [i]), ("{0}.add_({1})", [i, j]),
                   ("{0}.add_({1}, alpha=-0.25)", [i, j]), ("{0}.copy_({1})", [i, j]), ("{0}.zero_()", [i]),
                   ("{0}.fill_(%s)" % r.choice([0.5, -2.0, 3]), [i]), ("{0}.clamp_(-1, 1)", [i]),
                   ("{0}.masked_fill_({1} > 0.2, -0.75)", [i, j]), ("{0}.sub_({1}).div_(2)", [i, j]),
                   ("{0}.tanh_()", [i]), ("{0}.lerp_({1}, 0.25)", [i, j]), ("{0}.addcmul_({1}, {1}, value=-0.1)", [i, j]),
                   ("{0}.relu_()", [i]), ("{0}.neg_()", [i]), ("{0}.exp_().sub_(1)", [i])]
        if idx is not None:
            choices += [(f"{{0}}.index_fill_({k}, {{1}}, -1.5)", [i, idx]),
                        (f"{{0}}.index_add_({k}, {{1}}, {{0}}.index_select({k}, {{1}}) * 0.5)", [i, idx]),
                        (f"{{0}}.index_copy_({k}, {{1}}.unique(), {{0}}.index_select({k}, {{1}}.unique()) + 1)", [i, idx])]
        src, ins = r.choice(choices)
        nograd = leaf_param or r.random() < 0.2
        exact = all(self.is_exact(x) for x in ins) and not any(
            s in src for s in ("tanh", "lerp", "addcmul", "exp", "alpha", "index_add", "div"))
        outs = self.op(src, ins, exact=exact, nograd=nograd)
        if outs is not None and not exact:
            self.taint(i)

    def g_out(self):
        i = self.pick(self.floats(lambda t: t.dim() > 0))
        if i is None:
            return self.g_new()
        shape = self.shape_of(i)
        # not a tensor sharing the input's storage: a reduction's out= that
        # overlaps its input gives what the CPU's order of work leaves there
        ptr = self.shadow.t[i].untyped_storage().data_ptr()
        target = self.pick([j for j in self.floats(lambda t: list(t.shape) == shape and not t.requires_grad
                                                   and t.untyped_storage().data_ptr() != ptr and _writable(t))])
        if target is None or self.rng.random() < 0.3:
            target = self.new(shape=shape if self.rng.random() < 0.8 else [0])
        src = self.rng.choice(["torch.add({0}, {0}, out={1})", "torch.tanh({0}, out={1})",
                               "torch.mul({0}, 3, out={1})", "torch.abs({0}, out={1})",
                               "torch.sum({0}, -1, keepdim=True, out={1})", "torch.clamp({0}, 0, out={1})"])
        if self.op(src, [i, target], n_out=0) is not None:
            self.taint(target)

    def g_matmul(self):
        r = self.rng
        m = r.choice([1, 7, 64, 128, 256, 512, 1024])
        k = r.choice(_WIDE)
        n = r.choice([1, 16, 64, 128, 256, 512, 1024])
        while m * k * n > 1 << 28:
            m = max(1, m // 2)
        kind = r.choice(["mm", "matmul", "addmm", "einsum", "linear", "bmm", "baddbmm", "mv", "linear_param"])
        s = 1 / math.sqrt(k)
        ta, tb = r.random() < 0.4, r.random() < 0.4
        if kind in ("bmm", "baddbmm"):
            bsz = r.choice([2, 3])
            m, n = min(m, 256), min(n, 256)
            a = self.new(shape=[bsz, m, k], transposed=ta)
            b = self.new(shape=[bsz, k, n], scale=s, transposed=tb)
            self.op("torch.bmm({0}, {1})" if kind == "bmm" else
                    "torch.baddbmm({0}[:, :, :1].expand(-1, -1, %d), {0}, {1}, beta=0.5)" % n, [a, b])
            return
        if kind == "mv":
            a = self.new(shape=[m, k], transposed=ta)
            v = self.new(shape=[k], scale=s)
            self.op("torch.mv({0}, {1})", [a, v])
            return
        a = self.new(shape=[m, k], transposed=ta)
        if kind in ("linear", "linear_param"):
            w = self.new(shape=[n, k], scale=s, transposed=tb, grad=kind == "linear_param")
            bias = self.new(shape=[n]) if r.random() < 0.5 else None
            self.op("F.linear({0}, {1}, {2})" if bias is not None else "F.linear({0}, {1})",
                    [a, w] + ([bias] if bias is not None else []))
            return
        b = self.new(shape=[k, n], scale=s, transposed=tb, grad=r.random() < 0.2)
        src = {"mm": "torch.mm({0}, {1})", "matmul": "{0} @ {1}", "einsum": "torch.einsum('ik,kj->ij', {0}, {1})",
               "addmm": "torch.addmm({0}[:1, :1].expand(%d, %d), {0}, {1})" % (m, n)}[kind]
        if r.random() < 0.3:  # an operand that is a view of a larger tensor
            src = src.replace("{0}, {1})", "{0}, {1}.narrow(1, 0, %d))" % max(1, n // 2))
        self.op(src, [a, b])

    def nonempty_and_dim(self):
        """A non-empty float tensor with a dim of it, (None, None, None) if
        there is none."""
        i = self.pick(self.floats(lambda t: t.dim() > 0 and t.numel() > 0))
        if i is None:
            return None, None, None
        t = self.shadow.t[i]
        return i, t, self.rng.randrange(t.dim())

    def g_reduce(self):
        i, t, d = self.nonempty_and_dim()
        if i is None:
            return self.g_new()
        r = self.rng
        keep = r.random() < 0.5
        dims = sorted(r.sample(range(t.dim()), r.randint(1, t.dim())))
        exact = self.is_exact(i)
        choices = [(f"{{0}}.sum({dims}, keepdim={keep})", False), (f"{{0}}.mean({d}, keepdim={keep})", False),
                   (f"{{0}}.amax({dims}, keepdim={keep})", exact), (f"{{0}}.amin({d})", exact),
                   (f"{{0}}.var({d}, correction={r.randint(0, 1)})", False), (f"{{0}}.std({dims})", False),
                   (f"{{0}}.norm(dim={d})", False), (f"torch.logsumexp({{0}}, {d})", False),
                   (f"torch.softmax({{0}}, {d})", False), (f"F.log_softmax({{0}}, {d})", False),
                   (f"{{0}}.cumsum({d})", False), ("{0}.sum()", False), (f"{{0}}.max({d})[0]", exact),
                   (f"F.layer_norm({{0}}, {list(t.shape[-1:])})", False), (f"{{0}}.norm(p=1, dim={d})", False)]
        if t.numel() <= 64:
            choices.append((f"{{0}}.prod({d})", False))
        if exact:
            choices += [(f"{{0}}.argmax({d})", True), (f"{{0}}.argmin()", True),
                        (f"{{0}}.sort({d}, stable=True)[1]", True), (f"{{0}}.sort({d}, stable=True)[0]", True),
                        (f"{{0}}.topk(1, {d})[0]", True), ("({0} > 0).sum()", True), ("({0} > 0).any()", True)]
        src, ex = r.choice(choices)
        # Which of tied elements topk picks is PyTorch's to choose (the CPU's
        # nth_element picked the 6th of 7 equal values, seed 31020): its
        # gradient is not compared.
        self.op(src, [i], exact=ex, nograd=".topk(" in src)

    def g_index(self):
        i, t, d = self.nonempty_and_dim()
        if i is None:
            return self.g_new()
        r = self.rng
        n = t.shape[d]
        # Now and then an index out of range: a data check's error, which
        # eager raises at the call and fused eager at the next cut.
        high = 2 * n + 1 if r.random() < 0.3 else n
        idx = self.new(dtype="int", high=high, shape=[r.randint(1, 8)])
        exact = self.is_exact(i)
        choices = [(f"{{0}}.index_select({d}, {{1}})", [i, idx], exact), (f"{{0}}[{':, ' * d}{{1}}]", [i, idx], exact),
                   ("torch.take({0}, {1})", [i, idx], exact)]
        if exact:
            choices += [("{0}[{0} > 0]", [i], True), ("({0} > 0.5).nonzero()", [i], True),
                        ("torch.masked_select({0}, {0} < 0)", [i], True)]
        if t.dim() == 2 or t.dim() == 1:
            g = self.new(dtype="int", high=n, shape=self.shape_of(i))
            choices += [(f"torch.gather({{0}}, {d}, {{1}})", [i, g], exact),
                        (f"{{0}}.scatter_add({d}, {{1}}, {{0}})", [i, g], False)]
        if not _holds(_is_leaf_param, t):
            i0 = self.new(dtype="int", high=t.shape[0], shape=[r.randint(1, 8)])
            choices += [(f"{{0}}.__setitem__(({'slice(None), ' * d}{{1}}), -0.5)", [i, idx], exact),
                        ("{0}.index_put_(({1},), {0}[{1}] * 0.5, accumulate=True)", [i, i0], False)]
        src, ins, ex = r.choice(choices)
        n_out = 0 if "__setitem__" in src else 1
        outs = self.op(src, ins, n_out=n_out, exact=ex, undo="__setitem__" in src and high > n)
        if outs is not None and ("__setitem__" in src or "index_put_" in src) and not ex:
            self.taint(i)

    def g_foreach(self):
        r = self.rng
        # no item that overlaps itself: the CPU's per-item kernel raises at
        # that item after writing the ones before it, tpu writes none
        pool = self.floats(lambda t: not _is_leaf_param(t) and t.dim() > 0
                           and torch._debug_has_internal_overlap(t) == 0)
        if len(pool) < 2:
            return self.g_new()
        xs = r.sample(pool, min(len(pool), r.randint(2, 5)))
        ys = [self.new(shape=self.shape_of(x)) for x in xs]
        nx = len(xs)
        lx = "[" + ", ".join(f"{{{j}}}" for j in range(nx)) + "]"
        ly = "[" + ", ".join(f"{{{j + nx}}}" for j in range(nx)) + "]"
        src, n_out = r.choice([
            (f"torch._foreach_add_({lx}, {ly}, alpha=0.5)", 0), (f"torch._foreach_mul_({lx}, 0.75)", 0),
            (f"torch._foreach_addcmul_({lx}, {ly}, {ly}, value=0.1)", 0), (f"torch._foreach_lerp_({lx}, {ly}, 0.2)", 0),
            (f"torch._foreach_mul_({lx}, [%s])" % ", ".join(str(round(r.uniform(-2, 2), 3)) for _ in xs), 0),
            (f"torch._foreach_sqrt([x.abs() for x in {lx}])", nx), (f"torch._foreach_add({lx}, {ly})", nx),
            (f"torch._foreach_norm({lx})", nx)])
        outs = self.op(src, xs + ys, n_out=n_out, exact=False)
        if outs is not None and n_out == 0:
            for x in xs:
                self.taint(x)

    def g_random(self):
        r = self.rng
        seed = r.randrange(1 << 30)
        shape = self.shape()
        if r.random() < 0.5:
            src = r.choice([f"torch.randn({shape}, generator=G, device=DEV)",
                            f"torch.rand({shape}, generator=G, device=DEV)",
                            f"torch.randint(0, 7, {shape}, generator=G, device=DEV)",
                            f"torch.randperm({r.randint(1, 50)}, generator=G, device=DEV)"])
            o = self.fresh()
            self.emit({"k": "random", "src": src, "ins": [], "outs": [o], "seed": seed}, exact=True)
            return
        i = self.pick(self.floats(lambda t: not t.requires_grad and t.dim() > 0 and _writable(t)))
        if i is None:
            return self.g_new()
        src = r.choice(["{0}.normal_(generator=G)", "{0}.uniform_(-1, 1, generator=G)",
                        "{0}.bernoulli_(0.3, generator=G)", "{0}.exponential_(generator=G)"])
        if self.emit({"k": "random", "src": src, "ins": [i], "outs": [], "seed": seed}):
            self.taint(i)

    def g_backward(self):
        pool = self.floats(lambda t: t.requires_grad and t.numel() > 0)
        i = self.pick(pool)
        if i is None:
            return self.g_train()
        self.op("({0} * _w({0})).sum().backward()", [i], n_out=0)

    def g_step(self):
        if not self.shadow.params:
            return self.g_new()
        if self.rng.random() < 0.25:
            self.emit({"k": "zero_grad", "ins": []})
        self.emit({"k": "step", "ins": [], "opt": self.opt})
        self.refresh_exact_params()

    def refresh_exact_params(self):
        for i, t in list(self.shadow.t.items()):
            if isinstance(t, torch.Tensor) and any(t is p for p in self.shadow.params):
                self.taint(i)

    def g_free(self):
        i = self.pick([j for j in self.live() if not any(self.shadow.t[j] is p for p in self.shadow.params)])
        if i is None:
            return self.g_new()
        shape, dtype = self.shape_of(i), self.shadow.t[i].dtype
        self.emit({"k": "free", "ins": [i]})
        self.exact.pop(i, None)
        if self.rng.random() < 0.6:  # another tensor where it was: the allocator may hand the memory back
            self.new(shape=shape, dtype="float" if dtype.is_floating_point else "int", high=5)

    def g_repeat(self):
        """The last few instructions again on the (changed) tensors they read:
        the same programs run on new values."""
        n = self.rng.randint(2, 6)
        window = [ins for ins in self.instrs[-n:] if ins["k"] in ("op", "random", "new", "step")]
        if not window:
            return self.g_new()
        mapping = {}
        for ins in window:
            c = json.loads(json.dumps(ins))
            c.pop("blk", None)
            c["ins"] = [mapping.get(i, i) for i in c["ins"]]
            if any(i not in self.shadow.t for i in c["ins"]):
                return
            outs = [self.fresh() for _ in c.get("outs", [])]
            for a, b in zip(ins.get("outs", []), outs):
                mapping[a] = b
            c["outs"] = outs
            if c["k"] == "new":
                if c.get("grad"):
                    continue
                c["seed"] = self.rng.randrange(1 << 30)
            exact = all(self.exact.get(o, False) for o in ins.get("outs", [])) if ins.get("outs") else None
            self.emit(c, exact=exact)
            if c["k"] == "step":
                self.refresh_exact_params()

    def g_train(self):
        """A few steps of a linear layer's training: forward, backward,
        optimizer step (in-place updates of a weight the next product reads)."""
        r = self.rng
        k, n, m = r.choice([128, 256, 512, 1024]), r.choice([64, 128, 256, 512]), r.choice([16, 64, 256, 512])
        w = self.new(shape=[n, k] if r.random() < 0.5 else [k, n], scale=1 / math.sqrt(k), grad=True)
        wt = self.shape_of(w) == [n, k]
        x = self.new(shape=[m, k])
        self.opt_params_changed = True
        for _ in range(r.randint(2, 4)):
            y = self.op("F.linear({0}, {1})" if wt else "{0} @ {1}", [x, w])
            if y is None:
                return
            h = self.op(r.choice(["torch.tanh({0})", "F.relu({0})", "F.gelu({0})"]), y)
            if h is None:
                return
            self.op("({0} * _w({0})).sum().backward()", h, n_out=0)
            self.emit({"k": "step", "ins": [], "opt": self.opt})
            self.refresh_exact_params()
            if r.random() < 0.5:
                self.emit({"k": "zero_grad", "ins": []})

    def g_shape_ops(self):
        i = self.pick(self.floats(lambda t: t.dim() > 0))
        if i is None:
            return self.g_new()
        t = self.shadow.t[i]
        r = self.rng
        d = r.randrange(t.dim())
        exact = self.is_exact(i)
        choices = [(f"torch.stack([{{0}}, {{0}} * 2], {r.randint(0, t.dim())})", 1),
                   (f"{{0}}.repeat({[r.randint(1, 2) for _ in range(t.dim())]})", 1),
                   (f"torch.tril({{0}}, {r.randint(-1, 1)})" if t.dim() >= 2 else "{0}.clone()", 1),
                   (f"F.pad({{0}}, [1, 2])", 1), (f"{{0}}.chunk(2, {d})[0]", 1),
                   (f"{{0}}.split(1, {d})[-1]", 1), (f"{{0}}.flip({d})", 1),
                   (f"{{0}}.roll({r.randint(-3, 3)}, {d})", 1), ("{0}.T.contiguous()" if t.dim() == 2 else "{0}.t()", 1)]
        src, n_out = r.choice(choices)
        self.op(src, [i], n_out=n_out, exact=exact)


def _is_leaf_param(t):
    return t.requires_grad and t.is_leaf


def _holds(pred, t):
    """pred(t), False where asking raises (a split's output view whose base
    changed in place refuses even .is_leaf)."""
    try:
        return bool(pred(t))
    except RuntimeError:
        return False


def _writable(t):
    """Whether a write to |t| has one answer: not a view whose elements may
    share memory in a way PyTorch cannot tell (an unfold with a step below
    its size, some as_strided views). PyTorch refuses a view it knows
    overlaps (an expanded one) and writes one it cannot tell about in its
    kernel's order, a result no other order reproduces."""
    return torch._debug_has_internal_overlap(t) != 2


def generate(seed, mode="eager", steps=40):
    """The program of |seed| (deterministic). A fused program is the eager
    program of the same seed."""
    if mode == "fused":
        return dict(Gen(seed, "eager", steps).generate(), mode="fused")
    return Gen(seed, mode, steps).generate()


