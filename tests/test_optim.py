"""Optimizers with fused=True: Adam and AdamW run aten::_fused_adam(w)_,
which has no tpu lowering; torchtpu's own decomposition of it
(torchtpu/_decomp.py) runs on tpu, matching PyTorch's CPU fused kernel, with
no CPU fallback, also when the step is compiled (PyTorch runs fused steps
outside the graph)."""
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


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "defaults")
@pytest.mark.parametrize("opt_cls", [torch.optim.Adam, torch.optim.AdamW], ids=["Adam", "AdamW"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_fused_adam_matches_cpu(opt_cls, options, compiled):
    torch._dynamo.reset()
    expected, cpu_opt = train("cpu", opt_cls, False, options)
    torchtpu.reset_stats()
    got, tpu_opt = train("tpu", opt_cls, compiled, options)
    assert not torchtpu.stats()["fallbacks"]
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for p_cpu, p_tpu in zip(cpu_opt.state.values(), tpu_opt.state.values()):
        for key in p_cpu:
            torch.testing.assert_close(p_tpu[key].cpu(), p_cpu[key], rtol=1e-5, atol=1e-7)


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
