"""FlexAttention on tpu: PyTorch's dense implementation of its higher-order op.

PyTorch checks FlexAttention's inputs against the devices it ships (cuda, cpu,
xpu, hpu, mps), a list no PrivateUse1 device can join, and gives the op an
autocast rule for CPU and CUDA only. enable() lets tpu through the check
(other devices keep it) and makes dense() the op's tpu autocast rule: q, k
and v in the autocast dtype, the op in its own working precision. Eager, the
op runs its dense kernel op by op; a compiled graph calls dense() in the op's
place (in_graph), which AOTAutograd traces into the graph.
"""
import torch
from torch._C import DispatchKey


def _op():
    return getattr(torch.ops.higher_order, "flex_attention", None)


def _cast(tensors, dtype):
    return [t.to(dtype) if t.is_floating_point() and t.dtype != torch.float64 else t for t in tensors]


def dense(query, key, value, *rest):
    """The op's dense kernel (its CompositeExplicitAutograd one: scores, the
    score and mask functions under vmap, softmax), under tpu autocast as the
    op's autocast rule runs it."""
    kernel = _op().py_kernels[DispatchKey.CompositeExplicitAutograd]
    if not torch.is_autocast_enabled("tpu"):
        return kernel(query, key, value, *rest)
    query, key, value = _cast((query, key, value), torch.get_autocast_dtype("tpu"))
    with torch.autocast("tpu", enabled=False):
        return kernel(query, key, value, *rest)


def in_graph(gm):
    """Each FlexAttention op of the Dynamo graph |gm| becomes a call of
    dense(), which AOTAutograd traces into ops with rules: the attention
    joins the graph's program and its gradient is traced from those ops.
    Kept as the op, it ran op by op, its backward too (B=4, H=8, 256 tokens,
    causal with a score function, forward and backward: 91.6 ms and 81
    executions a step against 28.1 ms and 8)."""
    op = _op()
    nodes = gm.graph.find_nodes(op="call_function", target=op) if op is not None else []
    for node in nodes:
        node.target = dense
    if nodes:
        gm.recompile()


def enable():
    from torch.nn.attention import flex_attention
    check = getattr(flex_attention, "_validate_device", None)
    op = _op()
    if check is None or op is None or DispatchKey.CompositeExplicitAutograd not in op.py_kernels:
        return  # a PyTorch without the list or the dense kernel

    def _validate_device(query, key, value):
        if query.device.type != "tpu":
            check(query, key, value)

    flex_attention._validate_device = _validate_device
    if DispatchKey.AutocastPrivateUse1 not in op.py_kernels:
        op.py_impl(DispatchKey.AutocastPrivateUse1)(dense)
