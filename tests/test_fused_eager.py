"""Fused eager (torchtpu.eager_mode("fused"), TORCHTPU_EAGER=fused): ops are
recorded and runs of them run as one program; results are bit-identical to
strict eager's, the recorded ops run where their results are needed (a cut),
and errors are raised by the op that causes them. Blocking mode: every op
waits for its result."""
import os
import subprocess
import sys
import threading

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from conftest import dumped_programs
from models import CNN, GPT, MLP


def bits(t):
    """The tensor's elements as integers of their bits (NaNs, signed zeros)."""
    t = t.detach().cpu().contiguous().reshape(-1)
    if t.is_floating_point():
        t = t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def assert_same(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride()
    assert torch.equal(bits(a), bits(b))


def in_mode(mode, fn, *args):
    with torchtpu.eager_mode(mode):
        return fn(*args)


def stats_delta(fn):
    before = torchtpu.stats()
    fn()
    after = torchtpu.stats()
    delta = {k: after[k] - before[k] for k in ("fused_ops", "fused_programs", "executions", "trace_hits",
                                                "trace_misses", "fused_replays")}
    delta["cuts"] = {k: v - before["cuts"].get(k, 0) for k, v in after["cuts"].items()
                     if v != before["cuts"].get(k, 0)}
    return delta


class TestBitIdentical:
    def test_chain_is_one_program(self):
        x0 = torch.randn(8, device="tpu")

        def chain():
            x = x0
            for _ in range(30):
                x = x * 1.001 + x0  # a product then a sum: no fused multiply-add across ops
            return x.cpu()

        strict = in_mode("strict", chain)
        d = stats_delta(lambda: in_mode("fused", chain))
        fused = in_mode("fused", chain)
        assert_same(fused, strict)
        assert d["fused_ops"] == 60 and d["fused_programs"] == 1 and d["executions"] == 1
        assert d["fused_replays"] == 0
        assert d["cuts"] == {"host_read": 1}

    def test_transcendental_of_an_intermediate(self):
        """log of a value nothing else holds: XLA computed it in place over the
        dying intermediate, with LLVM's vectorized log (other last bits than
        strict's program on a parameter). In-place calls still match."""
        g = torch.Generator().manual_seed(838437271)
        x0 = torch.randn(7, 4, 2, 4, generator=g, dtype=torch.float64).float().to("tpu")

        def f():
            x = x0.clone()
            return [torch.log(x0.abs() + 1).cpu(), torch.exp(torch.log(x0.abs())).cpu(),
                    x.abs_().add_(1).log_().cpu(), torch.tanh(torch.tanh(x0) * 3).cpu()]

        for got, want in zip(in_mode("fused", f), in_mode("strict", f)):
            assert_same(got, want)

    def test_inplace_transcendental_of_an_earlier_value(self):
        """exp_ over a value an earlier call of the trace wrote or read (fuzz
        seeds 7259 and 16035). Strict computes exp_ in place over the donated
        buffer; in the fused program XLA gave a [2, 1, 7] result of a [2, 7]
        storage a layout of its own (the exp inside the copy back), and ran an
        exp_ of a value a softplus read before the softplus, into a new
        buffer: other exp code, other last bits."""
        g = torch.Generator().manual_seed(743431074)
        a0 = torch.randn(2, 1, 7, generator=g, dtype=torch.float64).float().to("tpu")
        b0, c0 = (torch.randn(2, 7, generator=g, dtype=torch.float64).float().to("tpu") for _ in range(2))
        w0 = torch.randn(7, generator=g, dtype=torch.float64).float().to("tpu")

        def f():
            a, b = a0.clone(), b0.clone()
            torch.tpu.synchronize()
            a.exp_().sub_(1)
            y = torch.lerp(a, a, 0.3)
            b.addcmul_(w0, w0, value=-0.1)
            t = torch.lerp(b, c0, 0.3)
            s = F.softplus(t)
            t.exp_().sub_(1)
            u = c0.mul(3).log_()
            return [a.cpu(), y.cpu(), b.cpu(), t.cpu(), s.cpu(), u.cpu()]

        for got, want in zip(in_mode("fused", f), in_mode("strict", f)):
            assert_same(got, want)

    def test_sibling_reductions_of_an_unwritten_storage(self):
        """Two calls summing one storage no call writes (fuzz seed 8049): read
        through one parameter, XLA merged them into one multi-output fusion
        that summed in another order (the whole sum's last bit). Each call
        reads such a storage through a parameter of its own."""
        g = torch.Generator().manual_seed(783999559)
        x = torch.randn(31, 8, generator=g, dtype=torch.float64).float().to("tpu")

        def f():
            total = x.sum()
            rows = torch.empty(0, device="tpu")
            torch.sum(x.expand(31, 8), -1, keepdim=True, out=rows)
            return [total.cpu(), rows.cpu(), x.sum(0).cpu(), x.mean().cpu()]

        for got, want in zip(in_mode("fused", f), in_mode("strict", f)):
            assert_same(got, want)

    def test_result_layout_as_strict(self):
        """A softplus of a transposed view recorded beside an unrelated upload:
        XLA gave the call's result a transposed layout (and a copy) in the
        program of both, so its loop ran in another order, other last bits."""
        g = torch.Generator().manual_seed(597153545)
        x0 = torch.randn(2, 3, 7, 31, generator=g, dtype=torch.float64).float().to("tpu")
        big = torch.randn(3, 256, 1024, generator=g).transpose(-1, -2).contiguous().transpose(-1, -2)

        def f():
            t = big.to("tpu")
            return F.softplus(x0.transpose(0, 3)).cpu(), t

        assert_same(in_mode("fused", f)[0], in_mode("strict", f)[0])

    def test_half_precision_rounds_per_op(self):
        x0 = torch.randn(600).to(torch.bfloat16).to("tpu")

        def chain():
            x = x0
            for _ in range(10):
                x = (x * 1.01 + 0.3).sin() * x0
            return x.cpu()

        assert_same(in_mode("fused", chain), in_mode("strict", chain))

    def test_views_inplace_and_aliases(self):
        def f():
            b = torch.arange(48, dtype=torch.float32, device="tpu").reshape(6, 8)
            x = b[:, :6]
            x.diagonal().fill_(7)
            x.diagonal(offset=1).mul_(-1)
            t = b.t()
            t[2:5].add_(t[0:3] * 0.5)
            ints = b.view(torch.int32)  # the same bytes read as another dtype
            e = x[1].unsqueeze(0).expand(3, 6)
            y = e + b[:3, 2:]
            b[::2, ::3] = y[0, :3].sum()
            return b.cpu(), y.cpu(), (ints & 0xFFFF).cpu()

        for got, want in zip(in_mode("fused", f), in_mode("strict", f)):
            assert_same(got, want)

    def test_random_streams(self):
        def f():
            torch.manual_seed(3)
            x = torch.randn(64, 64, device="tpu")
            y = F.dropout(x, 0.3, training=True) + torch.rand(64, device="tpu")
            z = torch.randn_like(y).bernoulli_(0.4)
            return y.cpu(), z.cpu()

        for got, want in zip(in_mode("fused", f), in_mode("strict", f)):
            assert_same(got, want)

    def test_reexecution_after_inplace_update(self):
        # k >= 512: the products take XLA's library paths; the weight changes
        # in place between runs of the same programs
        torch.manual_seed(0)
        w0, x = torch.randn(512, 256), torch.randn(64, 512)

        def f():
            w, xt = w0.to("tpu"), x.to("tpu")
            outs = []
            for _ in range(4):
                y = xt @ w
                w.sub_(0.01 * (xt.t() @ y))
                outs.append(y.sum(0))
            return torch.stack(outs).cpu(), w.cpu()

        for got, want in zip(in_mode("fused", f), in_mode("strict", f)):
            assert_same(got, want)

    def test_foreach_adamw(self):
        def f():
            torch.manual_seed(1)
            params = [torch.randn(s).to("tpu").requires_grad_() for s in [(16, 16), (16,), (8, 4, 2)] * 5]
            opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, foreach=True)
            for step in range(3):
                for p in params:
                    p.grad = torch.full_like(p, 0.1 * (step + 1)) + p.detach() * 0.5
                opt.step()
            return [p.detach().cpu() for p in params] + [v.cpu() for s in opt.state.values() for v in s.values()]

        for got, want in zip(in_mode("fused", f), in_mode("strict", f)):
            assert_same(got, want)

    def test_foreach_calls_pass_one_boundary_each(self, tmp_path):
        """The results of a _foreach_ call, and the earlier calls' values it
        reads, pass the boundary in one custom call each, not one per tensor:
        XLA's cost is per custom call and per operand (an AdamW step over 100
        tensors had 800 boundary calls with 40,000 operands)."""
        code = """if True:
            import torch, torchtpu
            def f():
                xs = [torch.full((4, 3), float(i), device="tpu") for i in range(40)]
                ys = [torch.full((4, 3), 0.5 + i, device="tpu") for i in range(40)]
                torch.tpu.synchronize()
                torch._foreach_mul_(xs, 2.0)
                torch._foreach_add_(xs, ys)
                zs = torch._foreach_exp(xs)
                return [z.cpu() for z in zs]
            with torchtpu.eager_mode("fused"):
                fused = f()
            with torchtpu.eager_mode("strict"):
                strict = f()
            assert all(torch.equal(a.view(torch.int32), b.view(torch.int32)) for a, b in zip(fused, strict))
        """
        programs = [text for name, text in dumped_programs(tmp_path, code).items() if name.startswith("fused_3_calls")]
        assert len(programs) == 1
        assert programs[0].count('"torchtpu_boundary"') <= 3

    @pytest.mark.parametrize("name", ["mlp", "mlp_wide", "cnn", "gpt"])
    def test_training_equals_strict(self, name):
        # mlp_wide: k >= 512, where XLA's products take its library paths,
        # six steps, so that every program reruns on weights AdamW changed
        # in place
        steps = 6 if name == "mlp_wide" else 3

        def train():
            torch.manual_seed(0)
            if name == "mlp":
                model, x = MLP(), torch.randn(16, 32)
                y = torch.randint(0, 10, (16,))
            elif name == "mlp_wide":
                model, x = MLP(512, 1024, 512), torch.randn(64, 512)
                y = torch.randint(0, 512, (64,))
            elif name == "cnn":
                model, x = CNN(), torch.randn(4, 3, 16, 16)
                y = torch.randint(0, 10, (4,))
            else:
                model = GPT()
                x = torch.randint(0, 64, (2, 16))
                y = torch.randint(0, 64, (2, 16))
            model = model.to("tpu")
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            xt, yt = x.to("tpu"), y.to("tpu")
            losses = []
            for _ in range(steps):
                opt.zero_grad()
                out = model(xt)
                loss = F.cross_entropy(out.flatten(0, -2) if name == "gpt" else out, yt.flatten())
                loss.backward()
                opt.step()
                losses.append(loss.detach())
            return torch.stack(losses).cpu(), [p.detach().cpu() for p in model.parameters()]

        got_losses, got_params = in_mode("fused", train)
        want_losses, want_params = in_mode("strict", train)
        assert_same(got_losses, want_losses)
        for got, want in zip(got_params, want_params):
            assert_same(got, want)


class TestCuts:
    def test_reads_cut(self):
        x = torch.randn(16, device="tpu")
        with torchtpu.eager_mode("fused"):
            y = x * 2
            d = stats_delta(lambda: y.sum().item())
        assert d["cuts"] == {"host_read": 1} and d["fused_programs"] == 1
        with torchtpu.eager_mode("fused"):
            y = x * 3
            d = stats_delta(lambda: str(y))  # printing runs ops of its own, and reads
        assert d["cuts"].get("host_read", 0) >= 1 and str(y) == str(x * 3)
        with torchtpu.eager_mode("fused"):
            y = x * 4
            d = stats_delta(torch.tpu.synchronize)
        assert d["cuts"] == {"sync": 1}

    @pytest.mark.strict_eager
    def test_leaving_the_mode_runs_the_trace(self):
        x = torch.randn(16, device="tpu")

        def block():
            with torchtpu.eager_mode("fused"):
                assert torchtpu.current_eager_mode() == "fused"
                x.mul_(2)
        d = stats_delta(block)
        assert d["cuts"] == {"mode_change": 1}
        assert torchtpu.current_eager_mode() == "strict"

    def test_data_check_raises_at_the_next_cut(self):
        """An index out of range is found when the trace runs: the cut raises
        the CPU's error, and the tensors are as strict eager leaves them (the
        calls before the failing one ran, it and those after did not)."""
        x = torch.randn(5, device="tpu")
        with pytest.raises(IndexError) as cpu_error:
            x.cpu().index_select(0, torch.tensor([1, 7]))
        bad = torch.tensor([1, 7], device="tpu")
        out = {}

        def record():
            out["y"] = y = x * 2
            y.add_(1)  # in place: the program that fails must not donate y
            y.index_select(0, bad)  # recorded: no error yet
            y.mul_(3)  # strict never gets here
        with torchtpu.eager_mode("fused"):
            d = stats_delta(record)
            with pytest.raises(IndexError) as error:
                torch.tpu.synchronize()
            assert str(error.value) == str(cpu_error.value)
        assert d["fused_ops"] == 4 and d["executions"] == 0  # nothing ran at the calls
        y = out["y"]
        assert_same(y, x * 2 + 1)
        with torchtpu.eager_mode("fused"):
            y[bad]
            with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 5"):
                y.sum().item()
            # in range: one program, which checks and writes in place
            w = y.clone()
            ok = w.index_select(0, torch.tensor([4, 0], device="tpu"))
            w.add_(ok.sum())
            d = stats_delta(lambda: ok.cpu())
        assert d["fused_programs"] == 1 and d["fused_replays"] == 0
        assert_same(ok, (x * 2 + 1)[[4, 0]])
        assert_same(w, (x * 2 + 1) + (x * 2 + 1)[[4, 0]].sum())

    def test_data_check_error_goes_to_the_thread_that_made_the_call(self):
        """One trace holds every thread's calls: when another thread's cut
        finds this thread's bad index, that thread's calls still run, and
        the error waits for this thread's next cut."""
        x = torch.arange(5.0, device="tpu")
        recorded, cut = threading.Event(), threading.Event()
        seen = {}

        def other():
            with torchtpu.eager_mode("fused"):
                recorded.wait()
                y = x + 1
                y.add_(1)
                seen["y"] = y.cpu()  # the cut: runs this thread's calls and the main thread's
            cut.set()

        t = threading.Thread(target=other)
        t.start()
        with torchtpu.eager_mode("fused"):
            z = x * 2
            z.index_select(0, torch.tensor([9], device="tpu"))
            z.mul_(5)  # never runs: strict raised before it
            recorded.set()
            cut.wait()
            t.join()
            with pytest.raises(IndexError, match="index out of range in self"):
                torch.tpu.synchronize()
            torch.tpu.synchronize()  # raised once
        assert_same(seen["y"], (x + 2).cpu())
        assert_same(z, x * 2)

    def test_a_replay_computes_values_pytorch_freed(self):
        """A failed check replays the calls one by one; an intermediate
        PyTorch freed while recorded (x * 2 below) is still computed for the
        calls that read it (it was left out: z read as ones)."""
        x = torch.arange(5.0, device="tpu")
        with torchtpu.eager_mode("fused"):
            z = (x * 2).exp() + 1
            x.index_select(0, torch.tensor([9], device="tpu"))
            with pytest.raises(IndexError):
                torch.tpu.synchronize()
        assert_same(z, (x * 2).exp() + 1)

    def test_what_a_failed_trace_never_computed_raises_when_read(self):
        """Strict raises at the failing call, so a program never holds what
        the calls after it make; fused eager handed those tensors out. A
        read of one raises (it read whatever the memory held): at the call
        in either mode, or, for a call that writes it in place, when the
        call runs; a write of the whole tensor gives it a value again."""
        x = torch.arange(5.0, device="tpu")
        with torchtpu.eager_mode("fused"):
            bad = x.index_select(0, torch.tensor([9], device="tpu"))
            z = x * 2
            with pytest.raises(IndexError, match="index out of range in self"):
                torch.tpu.synchronize()
        never = r"never computed: .*aten::mul.Tensor.*\(index out of range in self\)"
        with pytest.raises(RuntimeError, match=never):
            z.cpu()
        with pytest.raises(RuntimeError, match="never computed: .*aten::index_select"):
            bad.cpu()
        with pytest.raises(RuntimeError, match=never):
            z + 1
        with torchtpu.eager_mode("fused"):
            with pytest.raises(RuntimeError, match=never):
                z + 1
            z.mul_(2)  # recorded: its program reads z, and raises at the cut as a data check does
            with pytest.raises(RuntimeError, match=never):
                torch.tpu.synchronize()
            torch.tpu.synchronize()  # raised once
        with pytest.raises(RuntimeError, match=never):
            z.mul_(2)
        with pytest.raises(RuntimeError, match="never computed"):
            bad.resize_(10)  # keeps the old contents: reads them
        z.zero_()
        assert_same(z, torch.zeros(5, device="tpu"))

    def test_resize_keeps_a_recorded_value(self):
        """Growing a tensor whose value recorded calls make keeps that value
        (it had no buffer yet, and the new storage began empty)."""
        x = torch.arange(5.0, device="tpu")
        with torchtpu.eager_mode("fused"):
            y = x * 2
            y.resize_(10)
            head = y[:5].clone()
        assert_same(head, x * 2)

    def test_a_failed_step_then_training_goes_on_as_strict(self):
        """A bad target fails the step's forward; its backward and optimizer
        step, recorded after it, never ran: the gradients they made raise
        when read (strict has none: set to None before the forward), and
        training after it gives strict's weights bit for bit, whether the
        next step drops those gradients or zeroes them in place."""
        def run(mode):
            torch.manual_seed(0)
            model = MLP().to("tpu")
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            x, y = torch.randn(16, 32, device="tpu"), torch.randint(0, 10, (16,), device="tpu")

            def step(target, to_none=True):
                opt.zero_grad(set_to_none=to_none)
                loss = F.cross_entropy(model(x), target)
                loss.backward()
                opt.step()
                return loss.item()

            losses = []
            with torchtpu.eager_mode(mode):
                losses += [step(y) for _ in range(2)]
                with pytest.raises(IndexError, match="Target 12 is out of bounds"):
                    step(torch.full((16,), 12, device="tpu"))
                grad = next(model.parameters()).grad
                if mode == "fused":
                    with pytest.raises(RuntimeError, match="never computed: .*after a call that failed"):
                        grad.sum().item()
                else:
                    assert grad is None
                losses += [step(y, to_none) for _ in range(2)]
            return losses, [p.detach() for p in model.parameters()]

        for to_none in (True, False):
            strict_losses, strict_params = run("strict")
            fused_losses, fused_params = run("fused")
            assert fused_losses == strict_losses
            for a, b in zip(fused_params, strict_params):
                assert_same(a, b)

    def test_data_checks_in_a_training_loop(self):
        """cross_entropy checks its targets: the loop still records whole
        steps (one program each, no replays), and a bad target raises the
        CPU's error at the next cut, the weights as strict leaves them."""
        torch.manual_seed(0)
        model = MLP().to("tpu")
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x, y = torch.randn(16, 32, device="tpu"), torch.randint(0, 10, (16,), device="tpu")

        def step(target):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), target)
            loss.backward()
            opt.step()
            return loss

        with torchtpu.eager_mode("fused"):
            for _ in range(3):
                step(y)
            d = stats_delta(lambda: step(y).item())
        assert d["fused_programs"] == 1 and d["fused_replays"] == 0 and d["executions"] == 1
        before = [p.detach().clone() for p in model.parameters()]
        with pytest.raises(IndexError) as cpu_error:
            F.cross_entropy(torch.randn(16, 10), torch.full((16,), 12))
        with torchtpu.eager_mode("fused"):
            with pytest.raises(IndexError) as error:
                step(torch.full((16,), 12, device="tpu")).item()
        assert str(error.value) == str(cpu_error.value)
        for p, b in zip(model.parameters(), before):
            assert_same(p.detach(), b)  # strict raised in the forward: no step
        # The backward's own failing checks (recorded on autograd's thread)
        # were the cutting thread's to raise, not left for that thread's
        # next call: the next steps run.
        with torchtpu.eager_mode("fused"):
            for _ in range(2):
                step(y).item()

    def test_validation_errors_at_the_call(self):
        a, b = torch.randn(2, 3, device="tpu"), torch.randn(5, 4, device="tpu")
        with torchtpu.eager_mode("fused"):
            c = a + 1
            with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 5x4\)"):
                c @ b
            with pytest.raises(RuntimeError, match="The size of tensor a"):
                c + b
            c.add_(1)
        torch.testing.assert_close(c.cpu(), a.cpu() + 2, rtol=0, atol=0)

    def test_loop_steady_state_reuses_programs(self):
        w = torch.randn(32, 32, device="tpu")
        x = torch.randn(8, 32, device="tpu")
        torch.tpu.synchronize()  # both loops start on an empty trace, whatever the default mode
        with torchtpu.eager_mode("fused"):
            for _ in range(30):  # no sync inside: the loop detector cuts at iterations
                x = torch.tanh(x @ w) * 0.5 + x
            torch.tpu.synchronize()
            before = torchtpu.stats()
            for _ in range(30):
                x = torch.tanh(x @ w) * 0.5 + x
            torch.tpu.synchronize()
            after = torchtpu.stats()
        assert after["cuts"].get("loop", 0) > before["cuts"].get("loop", 0)
        assert after["trace_misses"] == before["trace_misses"]  # no recompiles in the steady state
        ref = x.cpu()
        assert torch.isfinite(ref).all()

    def test_size_cap(self):
        torchtpu._C._set_fused_max_ops(10)
        try:
            x = torch.randn(4, device="tpu")
            with torchtpu.eager_mode("fused"):
                d = stats_delta(lambda: [x.add_(i) for i in range(25)])
        finally:
            torchtpu._C._set_fused_max_ops(0)
        assert d["cuts"].get("size_cap", 0) == 2
        assert torchtpu.stats()["fused_max_ops"] >= 10

    def test_a_trace_ends_at_512_readers_of_one_storage(self):
        # Each call reading a storage no call writes binds it as an argument of
        # its own; XLA's CPU client slows quadratically past 1024 of them.
        x0, one = torch.randn(8, device="tpu"), torch.full((8,), 1.0001, device="tpu")

        def chain(n):
            x = x0
            for _ in range(n):
                x = x * one
            return x

        def written(n):  # written storages are one argument: no cut
            x = x0.clone()
            for _ in range(n):
                x.mul_(1.0001)
            return x

        torchtpu._C._set_fused_max_ops(4096)
        torchtpu._C._set_fused_loop_detection(False)
        try:
            with torchtpu.eager_mode("fused"):
                torch.tpu.synchronize()
                d = stats_delta(lambda: (chain(1100), torch.tpu.synchronize()))
                w = stats_delta(lambda: (written(1100), torch.tpu.synchronize()))
                got = chain(1100)
                got_written = written(1100)
        finally:
            torchtpu._C._set_fused_max_ops(0)
            torchtpu._C._set_fused_loop_detection(True)
        assert d["cuts"].get("size_cap", 0) == 2  # at 512 and 1024 readers of |one|
        assert w["cuts"].get("size_cap", 0) == 0
        assert_same(got, in_mode("strict", chain, 1100))
        assert_same(got_written, in_mode("strict", written, 1100))

    def test_host_write_after_recorded_read(self):
        x = torch.ones(6, device="tpu")
        with torchtpu.eager_mode("fused"):
            y = x * 2  # reads x's current value
            x.copy_(torch.full((6,), 5.0))  # the host writes x
            z = x * 2
        torch.testing.assert_close(y.cpu(), torch.full((6,), 2.0), rtol=0, atol=0)
        torch.testing.assert_close(z.cpu(), torch.full((6,), 10.0), rtol=0, atol=0)

    def test_compiled_graph_reads_recorded_tensor(self):
        f = torch.compile(lambda t: (t.sin() + 1) * 2, backend="tpu")
        x = torch.randn(10, device="tpu")
        with torchtpu.eager_mode("fused"):
            y = x * 3
            z = f(y)
        torch.testing.assert_close(z.cpu(), ((x.cpu() * 3).sin() + 1) * 2)

    def test_intermediates_nobody_holds(self):
        x = torch.randn(1000, device="tpu")
        with torchtpu.eager_mode("fused"):
            y = x
            for _ in range(20):
                y = y * 1.5 - 0.25  # each intermediate dropped at once
            got = y.cpu()
        want = x.cpu()
        for _ in range(20):
            want = want * 1.5 - 0.25
        torch.testing.assert_close(got, want, rtol=0, atol=0)

    def test_another_thread_in_strict_mode(self):
        x = torch.randn(64, device="tpu")
        with torchtpu.eager_mode("fused"):
            y = x.exp() + 1
            result = {}
            t = threading.Thread(target=lambda: result.setdefault("v", (y * 2).cpu()))
            t.start()
            t.join()
        torch.testing.assert_close(result["v"], (x.cpu().exp() + 1) * 2)

    def test_backward_in_the_block_records_on_autograd_thread(self):
        """A backward started in a fused block runs fused on autograd's
        worker thread (its ops join the trace: no cut for another mode), and
        one started in a strict block runs strict there."""
        torch.manual_seed(0)
        w = torch.randn(64, 64, device="tpu", requires_grad=True)
        x = torch.randn(16, 64, device="tpu")

        def step():
            w.grad = None
            (x @ w).tanh().square().sum().backward()
            return w.grad.cpu()

        strict = stats_delta(lambda: in_mode("strict", step))
        assert strict["fused_ops"] == 0
        fused = {}
        d = stats_delta(lambda: fused.setdefault("g", in_mode("fused", step)))
        assert "other_mode" not in d["cuts"], d
        assert d["fused_ops"] >= 8, d  # the forward's and the backward's ops
        assert_same(fused["g"], in_mode("strict", step))

    def test_bad_mode(self):
        with pytest.raises(ValueError, match="eager mode must be one of strict, fused, blocking"):
            torchtpu.eager_mode("lazy")

    def test_environment_default_reaches_autograd_thread(self):
        code = (
            "import torch, torchtpu\n"
            "assert torchtpu.current_eager_mode() == 'fused'\n"
            "torch.manual_seed(0)\n"
            "w = torch.randn(32, 32, device='tpu', requires_grad=True)\n"
            "x = torch.randn(8, 32, device='tpu')\n"
            "(x @ w).tanh().sum().backward()\n"
            "g = w.grad.cpu()\n"
            "s = torchtpu.stats()\n"
            "assert s['fused_ops'] > 5, s\n"
            "with torchtpu.eager_mode('strict'):\n"
            "    w.grad = None\n"
            "    (x @ w).tanh().sum().backward()\n"
            "    assert torchtpu.stats()['fused_ops'] == s['fused_ops']  # the backward ran strict too\n"
            "assert torch.equal(g, w.grad.cpu())\n"
            "print('ok')\n")
        env = dict(os.environ, TORCHTPU_EAGER="fused")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


class TestBlocking:
    def test_results_and_waiting(self):
        a = torch.randn(1024, 1024, device="tpu")
        with torchtpu.eager_mode("blocking"):
            c = a @ a
            # the op returned after its program finished
            assert torch.tpu.current_stream().query()
        torch.testing.assert_close(c.cpu(), in_mode("strict", lambda: (a @ a).cpu()), rtol=0, atol=0)


@pytest.fixture(autouse=True)
def no_replays():
    """Every fused program in these tests builds, compiles and runs (a
    failed one falls back to running its ops one by one, silently)."""
    before = torchtpu.stats()["fused_replays"]
    yield
    assert torchtpu.stats()["fused_replays"] == before
