"""Optimizers with fused=True: Adam, AdamW, SGD and Adagrad run
aten::_fused_adam(w)_, _fused_sgd_ and _fused_adagrad_, lowered item by item (csrc/lower/optim.c) into one program
per step, matching PyTorch's CPU fused kernels, also when the step is
compiled (PyTorch runs fused steps outside the graph). And every optimizer,
per tensor and foreach, against the CPU."""
import pytest
import torch

import torchtpu

OPTIONS = [{}, {"weight_decay": 0.1, "amsgrad": True}, {"weight_decay": 0.1, "maximize": True},
           {"amsgrad": True, "maximize": True}]


def train(device, opt_cls, compiled, options):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)).to(device)
    opt = opt_cls(net.parameters(), lr=1e-2, fused=True, **options)
    step = torch.compile(opt.step, backend="tpu") if compiled else opt.step
    x = torch.randn(8, 16).to(device)
    for _ in range(10):
        opt.zero_grad()
        net(x).square().mean().backward()
        step()
    return [p.detach().cpu() for p in net.parameters()], opt


def assert_runs_agree(cpu, tpu):
    """(parameters, optimizer) after a CPU and a tpu run: the parameters and
    every state tensor agree, and nothing ran on the CPU fallback."""
    assert not torchtpu.stats()["fallbacks"]
    (expected, cpu_opt), (got, tpu_opt) = cpu, tpu
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for p_cpu, p_tpu in zip(cpu_opt.state.values(), tpu_opt.state.values()):
        for key in p_cpu:
            torch.testing.assert_close(p_tpu[key].cpu(), p_cpu[key], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "defaults")
@pytest.mark.parametrize("opt_cls", [torch.optim.Adam, torch.optim.AdamW], ids=["Adam", "AdamW"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_fused_adam_matches_cpu(opt_cls, options, compiled):
    torch._dynamo.reset()
    cpu = train("cpu", opt_cls, False, options)
    torchtpu.reset_stats()
    assert_runs_agree(cpu, train("tpu", opt_cls, compiled, options))


@pytest.mark.parametrize("found_inf", [0.0, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grad_scale_found_inf_and_half_types(found_inf, dtype):
    """The AMP arguments as the CPU kernel takes them: grads come back
    unscaled, found_inf == 1 leaves every tensor as it was; bfloat16 state
    computes in float32."""
    torch.manual_seed(1)
    lists = [[torch.randn(5, 7).to(dtype) for _ in range(2)] for _ in range(5)]
    lists[3] = [t.abs() for t in lists[3]]  # exp_avg_sqs are non-negative
    steps = [torch.tensor(3.0), torch.tensor(7.0)]
    kw = dict(lr=0.01, beta1=0.9, beta2=0.99, weight_decay=0.05, eps=1e-8, amsgrad=True, maximize=False,
              grad_scale=torch.tensor(8.0), found_inf=torch.tensor(found_inf))
    cpu = [[t.clone() for t in ts] for ts in lists]
    tpu = [[t.to("tpu") for t in ts] for ts in lists]
    torch._fused_adamw_(*cpu, steps, **kw)
    torchtpu.reset_stats()
    torch._fused_adamw_(*tpu, [s.to("tpu") for s in steps], **{k: v.to("tpu") if isinstance(v, torch.Tensor) else v
                                                                  for k, v in kw.items()})
    assert not torchtpu.stats()["fallbacks"]
    for ts_cpu, ts_tpu in zip(cpu, tpu):
        for a, b in zip(ts_cpu, ts_tpu):
            torch.testing.assert_close(b.cpu(), a)


ADAGRAD_OPTIONS = [{}, {"weight_decay": 0.1, "lr_decay": 0.01}, {"maximize": True, "initial_accumulator_value": 0.1}]


@pytest.mark.parametrize("options", ADAGRAD_OPTIONS, ids=lambda o: ",".join(o) or "defaults")
def test_fused_adagrad_matches_cpu(options):
    cpu = train("cpu", torch.optim.Adagrad, False, options)
    torchtpu.reset_stats()
    assert_runs_agree(cpu, train("tpu", torch.optim.Adagrad, False, options))


@pytest.mark.parametrize("found_inf", [0.0, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_adagrad_amp_arguments(found_inf, dtype):
    torch.manual_seed(2)
    lists = [[torch.randn(4, 6).to(dtype) for _ in range(2)] for _ in range(3)]
    lists[2] = [t.abs() for t in lists[2]]  # state sums are non-negative
    steps = [torch.tensor(3.0), torch.tensor(8.0)]
    kw = dict(lr=0.05, lr_decay=0.01, weight_decay=0.1, eps=1e-10, maximize=False, grad_scale=torch.tensor(4.0),
              found_inf=torch.tensor(found_inf))
    cpu = [[t.clone() for t in ts] for ts in lists]
    tpu = [[t.to("tpu") for t in ts] for ts in lists]
    torch._fused_adagrad_(*cpu, steps, **kw)
    torchtpu.reset_stats()
    torch._fused_adagrad_(*tpu, [s.to("tpu") for s in steps],
                          **{k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in kw.items()})
    assert not torchtpu.stats()["fallbacks"]
    for ts_cpu, ts_tpu in zip(cpu, tpu):
        for a, b in zip(ts_cpu, ts_tpu):
            torch.testing.assert_close(b.cpu(), a)


@pytest.mark.parametrize("opt_cls", [torch.optim.AdamW, torch.optim.SGD, torch.optim.Adagrad],
                         ids=["AdamW", "SGD", "Adagrad"])
@pytest.mark.parametrize("tensor_lr", [False, True], ids=["float_lr", "tensor_lr"])
@torchtpu.eager_mode("strict")  # counts strict eager's programs (fused eager records the step with the rest)
def test_fused_step_is_one_program_across_a_schedule(opt_cls, tensor_lr):
    """A fused step over every parameter is one program (AdamW adds one for
    its step counters), and a learning rate that changes every step (a
    cosine schedule) runs the same programs: nothing compiles after the
    first two steps."""
    def train(device):
        torch.manual_seed(0)
        net = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(3)]).to(device)
        lr = torch.tensor(0.05) if tensor_lr else 0.05
        kw = dict(momentum=0.9) if opt_cls is torch.optim.SGD else dict(weight_decay=0.1)
        opt = opt_cls(net.parameters(), lr=lr, fused=True, **kw)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6)
        x = torch.randn(4, 8).to(device)
        programs, misses = [], []
        for _ in range(6):
            opt.zero_grad()
            net(x).square().mean().backward()
            before = torchtpu.stats()
            opt.step()
            after = torchtpu.stats()
            programs.append(after["ops"] - before["ops"])
            misses.append(after["cache_misses"] - before["cache_misses"])
            sched.step()
        return [p.detach().cpu() for p in net.parameters()], programs, misses
    expected, _, _ = train("cpu")
    got, programs, misses = train("tpu")
    assert not torchtpu.stats()["fallbacks"]
    assert programs[2:] == [1 if opt_cls is torch.optim.SGD else 2] * 4, programs  # + the step counters
    assert sum(misses[2:]) == 0, misses
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_fused_adam_checks_its_lists():
    def call(device, grads):
        p = [torch.zeros(3, device=device)]
        state = [[torch.zeros(3, device=device)] for _ in range(2)]
        torch._fused_adam_(p, grads, *state, [], [torch.ones((), device=device)], lr=0.1, beta1=0.9, beta2=0.99,
                           weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    for device in ["cpu", "tpu"]:
        with pytest.raises(RuntimeError, match=r"Expected grads.size\(\) == n_tensors"):
            call(device, [])
    with pytest.raises(RuntimeError, match="must have its parameter's shape"):
        call("tpu", [torch.zeros(4, device="tpu")])
    call("tpu", [torch.zeros(3, device="tpu")])  # and the process goes on


SGD_OPTIONS = [{}, {"momentum": 0.9}, {"momentum": 0.9, "nesterov": True, "weight_decay": 0.1},
               {"momentum": 0.8, "dampening": 0.3, "maximize": True}, {"weight_decay": 0.1, "maximize": True}]


@pytest.mark.parametrize("options", SGD_OPTIONS, ids=lambda o: ",".join(o) or "defaults")
@pytest.mark.parametrize("tensor_lr", [False, True], ids=["float_lr", "tensor_lr"])
def test_fused_sgd_matches_cpu(options, tensor_lr):
    """SGD(fused=True) over 10 steps against CPU's fused SGD: parameters and
    momentum buffers (the first step fills them)."""
    def train(device):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)).to(device)
        lr = torch.tensor(0.05, device=device) if tensor_lr else 0.05
        opt = torch.optim.SGD(net.parameters(), lr=lr, fused=True, **options)
        x = torch.randn(8, 16).to(device)
        for _ in range(10):
            opt.zero_grad()
            net(x).square().mean().backward()
            opt.step()
        return [p.detach().cpu() for p in net.parameters()], opt

    cpu = train("cpu")
    torchtpu.reset_stats()
    assert_runs_agree(cpu, train("tpu"))


@pytest.mark.parametrize("found_inf", [0.0, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("first", [False, True])
def test_fused_sgd_amp_arguments(found_inf, dtype, first):
    """_fused_sgd_ as GradScaler drives it: grads come back unscaled,
    found_inf == 1 changes nothing. bfloat16 computes in float32 and rounds
    once: the reference is the CPU's float32 kernel, rounded, because torch
    2.13's CPU kernel for half types is wrong in its vectorized part (it
    never stores the parameters and reads the momentum buffer as float32;
    only the elements past the last full vector follow the math)."""
    torch.manual_seed(1)
    lists = [[torch.randn(5, 7).to(dtype) for _ in range(2)] for _ in range(3)]
    kw = dict(weight_decay=0.05, momentum=0.9, lr=0.1, dampening=0.1, nesterov=True, maximize=True,
              is_first_step=first, grad_scale=torch.tensor(8.0), found_inf=torch.tensor(found_inf))
    cpu = [[t.float() for t in ts] for ts in lists]
    tpu = [[t.to("tpu") for t in ts] for ts in lists]
    torch._fused_sgd_(*cpu, **kw)
    cpu = [[t.to(dtype) for t in ts] for ts in cpu]
    torchtpu.reset_stats()
    torch._fused_sgd_(*tpu, **{k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in kw.items()})
    assert not torchtpu.stats()["fallbacks"]
    for ts_cpu, ts_tpu in zip(cpu, tpu):
        for a, b in zip(ts_cpu, ts_tpu):
            torch.testing.assert_close(b.cpu(), a)


OPTIMIZERS = [(torch.optim.SGD, dict(momentum=0.9, nesterov=True)), (torch.optim.Adagrad, {}),
              (torch.optim.RMSprop, dict(momentum=0.5, centered=True)), (torch.optim.NAdam, dict(decoupled_weight_decay=True, weight_decay=0.1)),
              (torch.optim.RAdam, {}), (torch.optim.Adamax, {}), (torch.optim.ASGD, {}), (torch.optim.Rprop, {}),
              (torch.optim.Adadelta, {}), (torch.optim.Adafactor, {}), (torch.optim.LBFGS, {}),
              (torch.optim.Adam, dict(amsgrad=True)), (torch.optim.AdamW, {})]


@pytest.mark.parametrize("opt_cls,options", OPTIMIZERS, ids=[o.__name__ for o, _ in OPTIMIZERS])
@pytest.mark.parametrize("foreach", [False, True], ids=["per_tensor", "foreach"])
def test_optimizers_match_cpu(no_fallbacks, opt_cls, options, foreach):
    """Every torch.optim optimizer, per tensor and foreach, 5 steps against
    the CPU: parameters and state. Where float32 rounding differs (centered
    RMSprop subtracts nearly equal averages, LBFGS's line search amplifies),
    a float64 run arbitrates: ours within twice the CPU's error."""
    if foreach and opt_cls is torch.optim.LBFGS:
        pytest.skip("LBFGS has no foreach implementation")

    def train(device, dtype=torch.float32):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
        net = net.to(dtype).to(device)
        kwargs = dict(options) if opt_cls is torch.optim.LBFGS else dict(options, foreach=foreach)
        opt = opt_cls(net.parameters(), lr=1e-2, **kwargs)
        x = torch.randn(8, 16).to(dtype).to(device)

        def closure():
            opt.zero_grad()
            loss = net(x).square().mean()
            loss.backward()
            return loss
        for _ in range(5):
            opt.step(closure)
        state = [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor) and v.dim() > 0]
        return [t.detach().cpu() for t in list(net.parameters()) + state]

    expected, got = train("cpu"), train("tpu")
    assert len(got) == len(expected)
    ref = None
    for a, b, i in zip(got, expected, range(len(got))):
        try:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        except AssertionError:
            ref = ref or train("cpu", torch.float64)
            ours, cpus = ((t.double() - ref[i]).abs().max() for t in (a, b))
            assert ours <= 2 * cpus + 1e-9, (i, float(ours), float(cpus))


FLAT_SHAPES = [(3, 4), (5,), (2, 3), (7,)]


def flat_views(flat, shapes):
    """Tensors of |shapes| laid one after another in |flat| (FSDP2's
    gradients: views into one reduce-scatter output)."""
    views, at = [], 0
    for s in shapes:
        n = torch.Size(s).numel()
        views.append(flat[at:at + n].view(s))
        at += n
    return views


@pytest.mark.parametrize("opt_cls, options", [
    (torch.optim.AdamW, {"weight_decay": 0.1}), (torch.optim.Adam, {"amsgrad": True}),
    (torch.optim.SGD, {"momentum": 0.9}), (torch.optim.Adagrad, {"weight_decay": 0.1})],
    ids=["AdamW", "Adam-amsgrad", "SGD", "Adagrad"])
@pytest.mark.parametrize("tensor_lr", [False, True], ids=["float_lr", "tensor_lr"])
def test_fused_step_on_views_of_one_buffer(opt_cls, options, tensor_lr):
    """Parameters and gradients that are views into one flat buffer each (as
    FSDP2 makes them) take a fused step as on the CPU; each item's part of
    the buffer is apart from the others', so one program still serves the
    step."""
    total = sum(torch.Size(s).numel() for s in FLAT_SHAPES)

    def run(device):
        torch.manual_seed(0)
        flat_p, flat_g = torch.randn(total).to(device), torch.randn(total).to(device)
        params = [torch.nn.Parameter(v) for v in flat_views(flat_p, FLAT_SHAPES)]
        lr = torch.tensor(0.05) if tensor_lr and opt_cls is not torch.optim.Adagrad else 0.05
        opt = opt_cls(params, lr=lr, fused=True, **options)
        for step in range(3):
            flat_g.copy_(torch.randn(total).to(device))
            for p, g in zip(params, flat_views(flat_g, FLAT_SHAPES)):
                p.grad = g
            opt.step()
        return flat_p.cpu(), flat_g.cpu()

    for got, want in zip(run("tpu"), run("cpu")):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("op", ["_fused_adamw_", "_fused_sgd_"])
def test_fused_step_on_shared_gradients_runs_in_turn(op):
    """Two parameters with one gradient tensor and a grad_scale: the CPU's
    kernel unscales the gradient in place for the first parameter and the
    second reads it unscaled again; tpu runs such items in turn, the same."""
    def run(device):
        torch.manual_seed(0)
        params = [torch.randn(6).to(device) for _ in range(2)]
        g = torch.randn(6).to(device)
        kw = dict(grad_scale=torch.tensor(4.0, device=device), found_inf=torch.tensor(0.0, device=device))
        if op == "_fused_adamw_":
            state = [[torch.zeros(6, device=device) for _ in range(2)] for _ in range(2)]
            steps = [torch.ones((), device=device) for _ in range(2)]
            torch._fused_adamw_(params, [g, g], *state, [], steps, lr=0.1, beta1=0.9, beta2=0.99,
                                weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False, **kw)
        else:
            torch._fused_sgd_(params, [g, g], [], weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0,
                              nesterov=False, maximize=False, is_first_step=True, **kw)
        return [t.cpu() for t in params + [g]]

    for got, want in zip(run("tpu"), run("cpu")):
        torch.testing.assert_close(got, want)
