"""torchtpu/vllm/moe.py's experts (what vLLM's MoE layers run on tpu),
against a float64 loop over tokens and their experts on the CPU. vLLM itself
is not needed: tests/test_vllm.py runs a MoE model through vLLM."""
import pytest
import torch
import torch.nn.functional as F

from torchtpu.vllm.moe import fused_experts


def reference(x, w13, w2, weights, ids, activation, on_input, b13=None, b2=None):
    x, w13, w2, weights = (t.double() for t in (x, w13, w2, weights))
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = int(ids[t, k])
            v = x[t] * weights[t, k] if on_input else x[t]
            h = w13[e] @ v + (0 if b13 is None else b13[e].double())
            if activation == "silu":
                gate, up = h.chunk(2)
                a = F.silu(gate) * up
            elif activation == "gelu":
                gate, up = h.chunk(2)
                a = F.gelu(gate) * up
            else:  # relu2_no_mul
                a = F.relu(h).square()
            y = w2[e] @ a + (0 if b2 is None else b2[e].double())
            out[t] += y if on_input else weights[t, k] * y
    return out


def case(tokens, experts, k, hidden=32, inter=24, activation="silu", bias=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = 2 * inter if activation in ("silu", "gelu") else inter
    x = torch.randn(tokens, hidden, generator=g)
    w13 = torch.randn(experts, n, hidden, generator=g) / hidden ** 0.5
    w2 = torch.randn(experts, hidden, inter, generator=g) / inter ** 0.5
    logits = torch.randn(tokens, experts, generator=g)
    weights, ids = torch.softmax(logits, -1).topk(k, dim=-1)
    b13 = torch.randn(experts, n, generator=g) if bias else None
    b2 = torch.randn(experts, hidden, generator=g) if bias else None
    return x, w13, w2, weights, ids.to(torch.int32), b13, b2


@pytest.mark.parametrize("tokens,experts,k,activation,on_input,bias", [
    (1, 4, 2, "silu", False, False),        # one decode token
    (37, 8, 2, "silu", False, False),       # a prefill: some experts get no token
    (16, 4, 1, "gelu", True, False),        # router weight on the input (Llama-4 style)
    (9, 6, 3, "relu2_no_mul", False, True),  # an ungated activation, expert biases
])
def test_fused_experts_match_float64(tokens, experts, k, activation, on_input, bias):
    x, w13, w2, weights, ids, b13, b2 = case(tokens, experts, k, activation=activation, bias=bias)
    expected = reference(x, w13, w2, weights, ids, activation, on_input, b13, b2)
    dev = [t if t is None else t.to("tpu") for t in (x, w13, w2, weights, ids, b13, b2)]
    got = fused_experts(*dev[:5], activation=activation, apply_router_weight_on_input=on_input,
                        w13_bias=dev[5], w2_bias=dev[6])
    cpu = fused_experts(x, w13, w2, weights, ids, activation=activation, apply_router_weight_on_input=on_input,
                        w13_bias=b13, w2_bias=b2)
    torch.testing.assert_close(got.cpu().double(), expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.cpu(), cpu, rtol=1e-4, atol=1e-5)


def test_fused_experts_compile_once_whatever_the_routing():
    """The routing decides which rows go where, never a shape: a compiled
    forward is one program for every routing of the same batch size."""
    import torchtpu
    step = torch.compile(fused_experts, backend="tpu")
    before = None
    for seed in range(4):
        x, w13, w2, weights, ids, _, _ = case(12, 4, 2, seed=seed)
        expected = reference(x, w13, w2, weights, ids, "silu", False)
        got = step(*(t.to("tpu") for t in (x, w13, w2, weights, ids)))
        torch.testing.assert_close(got.cpu().double(), expected, rtol=1e-4, atol=1e-5)
        compiles = sum(e["compiled"] + e["loaded"] for owner, e in torchtpu.compiles().items()
                       if "fused_experts" in owner)
        if before is None:
            before = compiles
            assert compiles >= 1, torchtpu.compiles()  # the compiled function is reported
        assert compiles == before, torchtpu.compiles()


def test_unsupported_activation_names_itself():
    x, w13, w2, weights, ids, _, _ = case(4, 4, 2)
    with pytest.raises(NotImplementedError, match="swigluoai"):
        fused_experts(*(t.to("tpu") for t in (x, w13, w2, weights, ids)), activation="swigluoai")
