"""Mixture-of-experts layers of vLLM's models on tpu.

vLLM gives an out-of-tree platform no MoE kernel: its unquantized MoE method
leaves the experts to the platform, and its default router calls a CUDA op
(`_moe_C::topk_softmax`). torchtpu registers, through vLLM's own extension
point (CustomOp.register_oot), a method that takes the router's logits
(vLLM's "monolithic" contract), routes with vLLM's PyTorch routing (the one
its CPU experts use: softmax or grouped top-k, a correction bias, a model's
own routing function) and runs the experts as two grouped products over the
tokens sorted by expert (torch._grouped_mm, torchtpu's grouped-matmul
kernel on the CPU plugin): no shape depends on the routing, so a compiled
forward stays one program.
"""
import torch
import torch.nn.functional as F

_REGISTERED = False


def _activate(activation, h):
    """vLLM's MoE activations on the first product's output: the gated ones
    take gate = first half, up = second half."""
    name = getattr(activation, "value", activation)
    gated = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda g: F.gelu(g, approximate="tanh")}
    if name in gated:
        gate, up = h.chunk(2, dim=-1)
        return gated[name](gate) * up
    plain = {"silu_no_mul": F.silu, "gelu_no_mul": F.gelu,
             "gelu_tanh_no_mul": lambda x: F.gelu(x, approximate="tanh"),
             "relu2_no_mul": lambda x: F.relu(x).square()}
    if name in plain:
        return plain[name](h)
    raise NotImplementedError(f"tpu: the MoE activation {name!r} is not supported")


def fused_experts(x, w13, w2, topk_weights, topk_ids, activation="silu", apply_router_weight_on_input=False,
                  w13_bias=None, w2_bias=None):
    """out[t] = sum_k weight[t, k] * expert_{ids[t, k]}(x[t]), with
    expert_e(v) = w2[e] @ act(w13[e] @ v): x [T, H], w13 [E, N, H],
    w2 [E, H, I], topk_weights/ids [T, K]."""
    tokens, k = topk_ids.shape
    experts = w13.shape[0]
    flat = topk_ids.reshape(-1).to(torch.int64)
    order = torch.argsort(flat, stable=True)  # (token, slot) pairs grouped by expert
    rows = x[order // k]
    weights = topk_weights.reshape(-1)[order].to(x.dtype).unsqueeze(-1)
    if apply_router_weight_on_input:
        rows = rows * weights
    counts = torch.zeros(experts, dtype=torch.int64, device=x.device).index_add_(
        0, flat, torch.ones_like(flat))
    offs = counts.cumsum(0).to(torch.int32)
    h = torch._grouped_mm(rows, w13.transpose(1, 2), offs=offs)
    if w13_bias is not None:
        h = h + w13_bias[flat[order]]
    y = torch._grouped_mm(_activate(activation, h), w2.transpose(1, 2), offs=offs)
    if w2_bias is not None:
        y = y + w2_bias[flat[order]]
    if not apply_router_weight_on_input:
        y = y * weights
    per_slot = torch.empty_like(y).index_copy_(0, order, y)  # back to (token, slot) order
    return per_slot.view(tokens, k, -1).sum(dim=1)


def register():
    """Registers tpu's MoE method with vLLM (in each worker, before the
    model is built)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from vllm.model_executor.custom_op import CustomOp
    from vllm.model_executor.layers.fused_moe.router.cpu_router import select_experts
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    @CustomOp.register_oot(name="UnquantizedFusedMoEMethod")
    class TpuUnquantizedFusedMoEMethod(UnquantizedFusedMoEMethod):
        """vLLM's unquantized MoE method with routing and experts in
        PyTorch ops on tpu tensors."""

        @property
        def is_monolithic(self) -> bool:
            return True

        def apply_monolithic(self, layer, x, router_logits, input_ids=None):
            if layer.expert_map is not None:
                raise NotImplementedError("tpu: expert parallelism is not supported")
            topk_weights, topk_ids = select_experts(
                hidden_states=x, router_logits=router_logits, top_k=layer.top_k,
                use_grouped_topk=layer.use_grouped_topk, renormalize=layer.renormalize,
                topk_group=layer.topk_group, num_expert_group=layer.num_expert_group,
                custom_routing_function=layer.custom_routing_function, scoring_func=layer.scoring_func,
                routed_scaling_factor=layer.routed_scaling_factor,
                e_score_correction_bias=layer.e_score_correction_bias, input_ids=input_ids)
            return fused_experts(x, layer.w13_weight, layer.w2_weight, topk_weights, topk_ids,
                                 activation=layer.activation,
                                 apply_router_weight_on_input=layer.apply_router_weight_on_input,
                                 w13_bias=getattr(layer, "w13_bias", None),
                                 w2_bias=getattr(layer, "w2_bias", None))

    _REGISTERED = True
