"""torch.compile(backend="tpu"): each graph becomes one XLA program.

AOTAutograd (with PyTorch's core-ATen decompositions for ops torchtpu has no
rule for) hands over functional forward and backward graphs. Each graph is
lowered node by node through the same C rules eager uses, into one StableHLO
program (csrc/torch/graph.cpp), compiled by XLA and cached per input
signature. Graph inputs stay in their storages (parameters are never copied);
input mutations are written back through the storage model, as eager in-place
ops are. Nodes without a rule split the graph: the partitioner fuses the
supported regions into programs (_partitions) and the rest runs op by op in eager mode,
where torchtpu.stats()["fallbacks"] counts what falls back to the CPU.
AOTAutograd's cache keeps what it traced, with the graphs as this backend
compiled them (_Compiled), so a later process traces nothing again.
"""
import operator
import os
import warnings

import torch
import torch._inductor.config
import torch.fx
from torch._dynamo.backends.common import aot_autograd
from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache, should_use_local_autograd_cache
from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
from torch._inductor.output_code import OutputCode
from torch._prims_common import (ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes,
                                 is_non_overlapping_and_dense_or_false)
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.passes.operator_support import OperatorSupport
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

from . import _C, _compiles, _flex, _graph_pack

_warned_dynamic = False


# Core ops of compiled graphs whose eager twins PyTorch routes elsewhere on
# this device: graph op -> (rule, index of an argument the rule does not take).
_ALIASES = {
    "convolution": ("convolution_overrideable", None),
    "convolution_backward": ("convolution_backward_overrideable", 3),  # bias_sizes
}


def rule_name(target):
    """The rule serving an aten OpOverload ("add.Tensor"), or None."""
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        return None
    schema = target._schema
    base = schema.name.split("::", 1)[1]
    name = f"{base}.{schema.overload_name}" if schema.overload_name else base
    if _C._has_rule(name):
        return name
    if name in _ALIASES:
        return _ALIASES[name][0]
    # Functional variants (what functionalization makes of ops that write
    # arguments) return the written arguments after the outputs, which is how
    # the rules of the originals order their outputs too.
    if base.endswith("_functional"):
        plain = base[: -len("_functional")]
        plain = f"{plain}.{schema.overload_name}" if schema.overload_name else plain
        if _C._has_rule(plain):
            return plain
    return None


def _host_side(node):
    """Nodes the host evaluates: tuple indexing and integer arithmetic."""
    if node.target is operator.getitem:
        return True
    if isinstance(node.target, torch._ops.OpOverload):
        return node.target.namespace == "aten" and node.target.__name__.startswith("sym_")
    return getattr(node.target, "__module__", None) in ("_operator", "operator", "math", "builtins")


def _writes_input(node):
    """copy_ into a graph input: AOTAutograd's way of mutating an input."""
    return node.target is torch.ops.aten.copy_.default and node.args[0].op == "placeholder"


def _values(v):
    """The tensors in a node's meta value or arguments."""
    if isinstance(v, torch.fx.Node):
        v = v.meta.get("val")
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _values(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from _values(x)


def _placeable(t):
    """A tensor a program can hold: one on tpu, or a 0-dim one on the CPU,
    which ops take as a number (as eager does) and a program hands back."""
    return t.device.type == "tpu" or (t.device.type == "cpu" and t.dim() == 0)


def _on_tpu(gm, inputs=(), key="val"):
    """Whether a tensor of the graph (its nodes' meta[|key|], |inputs|) is on tpu."""
    values = (list(inputs), *(n.meta.get(key) for n in gm.graph.nodes))
    return any(t.device.type == "tpu" for v in values for t in _values(v))


_warned_inductor = False


def inductor_or_tpu(inductor, gm, example_inputs, **kwargs):
    """torch.compile's default backend, Inductor, generates Pallas kernels
    for a device named "tpu" (Google's TPU runtime, which this is not), and
    they fail here. A Dynamo graph that computes on tpu (an input, or a
    value Dynamo traced, on tpu) goes to backend="tpu" instead, with a
    one-time note; any other graph is Inductor's (|inductor|)."""
    global _warned_inductor
    if not _on_tpu(gm, example_inputs, key="example_value"):  # Dynamo's graphs keep values there
        return inductor(gm, example_inputs, **kwargs)
    if not _warned_inductor:
        _warned_inductor = True
        warnings.warn('torchtpu: torch.compile\'s default backend, Inductor, has no code generator for this '
                      'tpu device; graphs on tpu compile with backend="tpu" instead (Inductor\'s mode and options '
                      'do not apply). Pass backend="tpu" to choose it and silence this note.')
    return tpu_backend(gm, example_inputs)


class _Support(OperatorSupport):
    """Nodes a program computes: those with a rule whose tensors are on tpu.
    Work on the CPU (a .cpu() result used on the host, a CPU factory before
    its .to("tpu")) runs as PyTorch runs it."""

    def is_node_supported(self, submodules, node):
        if node.op != "call_function":
            return False
        if node.target is operator.getitem:  # an item of a value checked where it is made
            return all(_placeable(t) for t in _values(node))
        if not (rule_name(node.target) is not None or _foreach_item(node.target) is not None or _host_side(node)
                or _writes_input(node)):
            return False
        return all(_placeable(t) for t in (*_values(node), *_values(list(node.args)), *_values(node.kwargs)))


_FOREACH_ITEMS = {}


def _foreach_item(target):
    """(per-tensor OpOverload, per argument of it the _foreach_ argument it
    comes from, -1 for its default) of a _foreach_ op that eager runs item by
    item through the per-tensor op's rule; None for others. A graph keeps
    such ops whole (an optimizer's update traces as a few dozen nodes, not a
    few per parameter; functionalization leaves the functional overloads)
    and the walker applies the rule per item."""
    if not isinstance(target, torch._ops.OpOverload) or not target.__name__.startswith("_foreach_"):
        return None
    if target not in _FOREACH_ITEMS:
        schema, item = target._schema, None
        found = _C._foreach_item(schema.name, schema.overload_name)
        if found is not None:
            name, overload, source = found
            item = (getattr(getattr(torch.ops.aten, name.split("::", 1)[1]), overload or "default"), source)
        _FOREACH_ITEMS[target] = item
    return _FOREACH_ITEMS[target]


_PROMOTES = {}


def _promoting_args(target):
    """Per schema argument of |target|, whether it takes part in type
    promotion: the eager kernel's own answer (dispatch.cpp's describe_args),
    so that eager and graphs exclude the same arguments."""
    if target not in _PROMOTES:
        schema = target._schema
        _PROMOTES[target] = _C._promoting_args(schema.name, schema.overload_name)
    return _PROMOTES[target]


# foreach overload -> the per-tensor overloads that take one element's args
_FOREACH_KINDS = {"List": ("Tensor", "default"), "Tensor": ("Tensor", "default"), "Scalar": ("Scalar", "default"),
                  "ScalarList": ("Scalar", "default"), "ScalarAndTensor": ("Scalar", "default"),
                  "": ("default",)}


def _foreach_decomposition(op):
    """A _foreach_* op as its per-tensor op applied to each list element
    (optimizers use them), so the graph fuses the whole update."""
    schema = op._schema
    packet = getattr(torch.ops.aten, schema.name.split("::", 1)[1][len("_foreach_"):], None)
    if packet is None or not schema.returns or any(r.type.kind() != "ListType" for r in schema.returns):
        return None
    per = next((getattr(packet, o) for o in _FOREACH_KINDS.get(schema.overload_name, (schema.overload_name,))
                if o in packet.overloads()), None)
    if per is None:
        return None
    per_args = per._schema.arguments
    lists = [a.type.kind() == "ListType" for a in schema.arguments]
    names = [a.name for a in schema.arguments]

    def decomposed(*args, **kwargs):
        values = list(args) + [kwargs[n] for n in names[len(args):] if n in kwargs]
        n = len(next(v for v, is_list in zip(values, lists) if is_list))
        out = []
        for i in range(n):
            pos, kw = [], {}
            for j, v in enumerate(values):
                v = v[i] if lists[j] else v
                if j < len(per_args) and per_args[j].kwarg_only:
                    kw[per_args[j].name] = v
                else:
                    pos.append(v)
            out.append(per(*pos, **kw))
        return out
    return decomposed


def _decompositions():
    from torch._decomp import core_aten_decompositions
    table = core_aten_decompositions()
    items = table.items() if hasattr(table, "items") else dict(table).items()
    decomps = {op: fn for op, fn in items if rule_name(op) is None and _foreach_item(op) is None}
    for name in dir(torch.ops.aten):
        if not name.startswith("_foreach_") or name.endswith("_"):
            continue
        packet = getattr(torch.ops.aten, name)
        for overload in packet.overloads():
            op = getattr(packet, overload)
            fn = _foreach_decomposition(op) if _foreach_item(op) is None else None
            if fn is not None:
                decomps[op] = fn
    for packet in (torch.ops.aten.linspace, torch.ops.aten.logspace):
        for overload in ("Tensor_Tensor", "Tensor_Scalar", "Scalar_Tensor"):
            op = getattr(packet, overload)
            if op in decomps:
                decomps[op] = _ends_on_result_device(decomps[op])
    return decomps


def _ends_on_result_device(ref):
    """linspace/logspace with tensor ends: PyTorch's decomposition computes
    with the ends where they lie, which fails for tpu ends of a CPU result
    (eager reads them as numbers); the ends go to the result's device first."""
    def decomposed(start, end, *args, device=None, **kwargs):
        if device is not None:
            start, end = (v.to(device) if isinstance(v, torch.Tensor) else v for v in (start, end))
        return ref(start, end, *args, device=device, **kwargs)
    return decomposed


def _meta_specs(val):
    """(dtype, sizes) per output of a node's meta value; None for non-tensors."""
    if isinstance(val, torch.Tensor):
        return [(val.dtype, [int(s) for s in val.shape])]
    if isinstance(val, (list, tuple)):
        return [(v.dtype, [int(s) for s in v.shape]) if isinstance(v, torch.Tensor) else None for v in val]
    return []


def _dense_strides(t):
    """Strides for a new tensor with the layout of |t|: its own when dense,
    else dense in the same dim order (as empty_like lays out a view; a later
    graph traced with the view, e.g. a backward that reshapes an empty_like of
    it, then sees the layout it was traced with)."""
    if is_non_overlapping_and_dense_or_false(t):
        return [int(s) for s in t.stride()]
    order = sorted(range(t.dim()), key=lambda i: -int(t.stride(i)))
    strides, acc = [0] * t.dim(), 1
    for i in reversed(order):
        strides[i] = acc
        acc *= max(int(t.shape[i]), 1)
    return strides


class _Program:
    """One fused graph compiled for one input signature."""

    def __init__(self, gm, inputs, name):
        self.name = name
        # Tensor constants of the graph (get_attr) come after the inputs.
        placeholders = [n for n in gm.graph.nodes if n.op in ("placeholder", "get_attr")]
        output = next(n for n in gm.graph.nodes if n.op == "output")
        index = {n: i for i, n in enumerate(placeholders)}
        # Concrete metadata for these inputs (graphs may be symbolic).
        graph_inputs = inputs[:sum(n.op == "placeholder" for n in placeholders)]
        if not _metadata_holds(placeholders, graph_inputs):
            _propagate(gm, graph_inputs)
        writes = {}
        for node in gm.graph.nodes:
            if node.op == "call_function" and _writes_input(node):
                writes[node] = index[node.args[0]]
        # Inputs in tpu storages are written in place by the program; host
        # inputs (an optimizer's step count on the CPU) get the new value back.
        on_device = [isinstance(t, torch.Tensor) and t.device.type == "tpu" for t in inputs]
        mutated = [False] * len(inputs)
        for i in writes.values():
            mutated[i] = on_device[i]
        host_values = []  # (input index, new value, its meta value)
        owners = _storage_owners(gm)
        b = _C.GraphBuilder(name, [t if isinstance(t, torch.Tensor) else None for t in inputs], mutated)
        env = {}
        for node, value in zip(placeholders, inputs):
            env[node] = b.input(index[node]) if isinstance(value, torch.Tensor) else value
        for node in gm.graph.nodes:
            if node.op != "call_function":
                continue
            if node.target is operator.getitem:
                env[node] = env[node.args[0]][node.args[1]]
            elif _host_side(node):
                env[node] = node.meta["val"]
            elif node.target in _AS_STRIDED and (storage := _storage_of(b, node.args[0], env, owners, index)) is not None:
                # as_strided reads its input's storage, not its values
                offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
                if offset is None:
                    offset = node.args[0].meta["val"].storage_offset()
                env[node] = b.apply("as_strided", [storage, [int(v) for v in node.args[1]],
                                                   [int(v) for v in node.args[2]], int(offset)],
                                    _meta_specs(node.meta["val"]), None)[0]
            elif node in writes:  # an input mutation: the value goes back into the input's storage
                dst = node.args[0]
                value = b.apply("copy", [env[dst], env[node.args[1]]], _meta_specs(dst.meta["val"]), None)[0]
                i = writes[node]
                if on_device[i]:
                    # The input's old buffer becomes the new one unless the
                    # new value has other readers: XLA may recompute it inside
                    # them from the input's old contents (an optimizer's
                    # exp_avg inside the parameter update), which an in-place
                    # write would destroy, so it would first copy the whole
                    # input (as much memory as a new buffer, and slower).
                    b.write(i, value, len(node.args[1].users) == 1)
                else:
                    host_values.append((i, value, dst.meta["val"]))
                env[node] = value
            else:
                env[node] = self._apply(b, node, env)
        # Per graph output: ("new", k) | ("input", i) | ("value", v) |
        # ("view", (kind, k or i), sizes, strides, offset).
        self.outputs = []
        results = output.args[0]
        self.single = not isinstance(results, (list, tuple))
        results = [results] if self.single else list(results)
        bases = _alias_bases(gm, results, set(writes.values()), index, inputs)
        self.num_outputs = len(results)
        made = {}  # node -> its "new" output index
        for k, out in enumerate(results):
            if isinstance(out, torch.fx.Node) and out in index:
                self.outputs.append(("input", index[out]))
            elif out in bases:
                self.outputs.append(None)  # a view, made below
            elif isinstance(out, torch.fx.Node) and isinstance(out.meta.get("val"), torch.Tensor):
                val = out.meta["val"]
                b.output(k, env[out], val.dtype, [int(s) for s in val.shape], _dense_strides(val))
                self.outputs.append(("new" if val.device.type == "tpu" else "host", k))
                made.setdefault(out, k)
            else:
                self.outputs.append(("value", env.get(out, out) if isinstance(out, torch.fx.Node) else out))
        # Outputs that are views of another value (a weight's transpose saved
        # for backward, attention heads of one projection) are made as views
        # of it after the run, as eager makes views, rather than copied into
        # buffers of their own: the base is an input, or an output of the
        # program in its own layout.
        for k, out in enumerate(results):
            if self.outputs[k] is not None:
                continue
            base, val = bases[out], out.meta["val"]
            if base in index:
                ref = ("input", index[base])
            else:
                if base not in made:
                    bval = base.meta["val"]
                    made[base] = self.num_outputs
                    self.num_outputs += 1
                    b.output(made[base], env[base], bval.dtype, [int(s) for s in bval.shape],
                             [int(s) for s in bval.stride()])
                ref = ("new", made[base])
            self.outputs[k] = ("view", (ref, [int(s) for s in val.shape], [int(s) for s in val.stride()],
                                        int(val.storage_offset())))
        self.host_writes = self._pack_host_writes(b, host_values, self.num_outputs)
        self.program = b.finish()

    @staticmethod
    def _pack_host_writes(b, host_values, first):
        """Host inputs the graph writes (an optimizer's CPU step counts) come
        back packed in one output per dtype: one device-to-host copy rather
        than one per tensor. Returns [(output index, [(input index, offset,
        numel)])]."""
        groups = {}
        for i, value, val in host_values:
            groups.setdefault(val.dtype, []).append((i, value, val))
        packed = []
        for dtype, items in groups.items():
            parts, places, total = [], [], 0
            for i, value, val in items:
                n = val.numel()
                parts.append(b.apply("view", [value, [n]], [(dtype, [n])], None)[0])
                places.append((i, total, n))
                total += n
            flat = parts[0] if len(parts) == 1 else b.apply("cat", [parts, 0], [(dtype, [total])], None)[0]
            k = first + len(packed)
            b.output(k, flat, dtype, [total], [1])
            packed.append((k, places))
        return packed

    @staticmethod
    def _apply(b, node, env):
        item = _foreach_item(node.target)
        if item is None:
            return _Program._apply_rule(b, node.target, _arguments(node), node.meta.get("val"), env)
        # A _foreach_ op: its per-tensor op's rule, item by item
        op, source = item
        values = _arguments(node)
        lists = [a.type.kind() == "ListType" for a in node.target._schema.arguments]
        n = len(next(v for v, is_list in zip(values, lists) if is_list))
        return [_Program._apply_rule(b, op, [_DEFAULT if j < 0 else values[j][k] if lists[j] else values[j]
                                             for j in source], node.meta["val"][k], env)
                for k in range(n)]

    @staticmethod
    def _apply_rule(b, target, values, val, env):
        """|target|'s rule on |values| (one per schema argument; _DEFAULT:
        the argument's default), with results typed by |val|."""
        schema = target._schema
        args = []
        promote = []
        for v, arg, promotes in zip(values, schema.arguments, _promoting_args(target)):
            if v is _DEFAULT:
                v = arg.default_value if arg.has_default_value() else None
            args.append(_value(v, env))
            if promotes:
                promote.append(v)
        base = schema.name.split("::", 1)[1]
        op = f"{base}.{schema.overload_name}" if schema.overload_name else base
        alias = _ALIASES.get(op)
        drop = alias[1] if alias is not None and alias[1] is not None else -1
        vals = b.apply(rule_name(target), args, _meta_specs(val), _common_dtype(promote), op=op, drop=drop)
        if isinstance(val, (list, tuple)):
            return vals
        return vals[0] if vals else None  # an op without results: a runtime check

    def __call__(self, inputs):
        outs = self.program.run([t if isinstance(t, torch.Tensor) else None for t in inputs],
                                self.num_outputs + len(self.host_writes))
        for k, places in self.host_writes:
            flat = outs[k].cpu()
            for i, offset, n in places:
                inputs[i].copy_(flat[offset:offset + n].view(inputs[i].shape))
        result = []
        for kind, v in self.outputs:
            if kind == "view":
                (base_kind, j), sizes, strides, offset = v
                base = outs[j] if base_kind == "new" else inputs[j]
                result.append(torch.as_strided(base, sizes, strides, offset))
            else:
                result.append(outs[v] if kind == "new" else outs[v].cpu() if kind == "host"
                              else inputs[v] if kind == "input" else v)
        return result[0] if self.single else result


_DEFAULT = object()


def _arguments(node):
    """A call_function node's value per schema argument (_DEFAULT where the
    call leaves it to its default)."""
    return [node.args[i] if i < len(node.args) else node.kwargs.get(arg.name, _DEFAULT)
            for i, arg in enumerate(node.target._schema.arguments)]


_AS_STRIDED = (torch.ops.aten.as_strided.default, torch.ops.aten.as_strided_copy.default)


def _storage_owners(gm):
    """{storage: the first node whose fake value has it} (an input, or the op
    that made it)."""
    owner = {}
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            owner.setdefault(val.untyped_storage()._cdata, node)
    return owner


def _storage_of(b, x, env, owners, index):
    """The storage |x| views, as a 1-D value of its base's dtype, where it is
    not |x| itself read densely (x a view with other strides, an offset, or
    inside a larger base: Longformer's chunks are an as_strided of a
    transposed view); None where the dense reading is right, or the base's
    layout is not dense (the rule then reads x densely, as before). A graph
    input's storage is the input's own, read whole (its elements outside the
    input's view included: an as_strided of a chunk of a [2, 256, 256]
    tensor at offset 116459 read past the chunk's dense value, fuzz seed
    30110). A base computed in the graph is put in memory order (dims by
    decreasing stride) and padded out to the storage's size."""
    val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    size = val.untyped_storage().nbytes() // max(val.element_size(), 1)
    if val.is_contiguous() and val.storage_offset() == 0 and val.numel() == size:
        return None
    base = owners.get(val.untyped_storage()._cdata)
    if base is not None and base.op == "placeholder" and base in index:
        storage = b.input_storage(index[base])
        if storage is not None:
            return storage
    bval = base.meta["val"] if base is not None else None
    if (bval is None or bval.dtype != val.dtype or not is_non_overlapping_and_dense_or_false(bval)
            or base not in env or any(isinstance(s, torch.SymInt) for s in (*bval.shape, *bval.stride()))):
        return None
    order = sorted(range(bval.dim()), key=lambda d: (-int(bval.stride(d)), d))
    value = env[base]
    if order != list(range(bval.dim())):
        value = b.apply("permute", [value, order],
                        [(bval.dtype, [int(bval.shape[d]) for d in order])], None)[0]
    n = bval.numel()
    value = b.apply("view", [value, [n]], [(bval.dtype, [n])], None)[0]
    start = int(bval.storage_offset())
    if start or size != start + n:
        value = b.apply("constant_pad_nd", [value, [start, size - start - n], 0],
                        [(bval.dtype, [size])], None)[0]
    return value


def _alias_bases(gm, results, written, index, inputs):
    """{graph output: the node whose storage it views}, for outputs that are
    views (of the same dtype) of an input the graph does not write, or of a
    value computed in the graph with a dense layout from offset 0 (the
    layout its output then gets). The base is the first node whose fake
    value has the storage: an input, or the op that made it."""
    owner = _storage_owners(gm)
    # How many distinct results share each storage.
    sharing = {}
    for out in dict.fromkeys(r for r in results if isinstance(r, torch.fx.Node)):
        val = out.meta.get("val")
        if isinstance(val, torch.Tensor):
            key = val.untyped_storage()._cdata
            sharing[key] = sharing.get(key, 0) + 1
    bases = {}
    for out in results:
        val = out.meta.get("val") if isinstance(out, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or val.device.type != "tpu" or out in index or out in bases:
            continue
        # _unsafe_view (reshape's result where it must copy) is no view in
        # eager: as a view it could not be written in place (a view a
        # compiled function returns refuses it).
        if out.op == "call_function" and out.target is torch.ops.aten._unsafe_view.default:
            continue
        base = owner.get(val.untyped_storage()._cdata)
        if base is None or base is out or base.meta["val"].dtype != val.dtype:
            continue
        bval = base.meta["val"]
        if base in index:
            i = index[base]
            ok = i not in written and isinstance(inputs[i], torch.Tensor) and inputs[i].device.type == "tpu"
        else:
            # A result the user gets as it is (_mark_own_outputs) is no view
            # of a value computed in the graph that no other result shares:
            # stack's decomposition views its cat, and its result, a view
            # made inside AOTAutograd's autograd.Function, refused in-place
            # writes (fuzz seed 54156). Results that share the value stay
            # views of it, as they alias in eager (t.amin(1) and its
            # .view(-1), seed 60137).
            alone = out.meta.get(_OWN_OUTPUT) and sharing[val.untyped_storage()._cdata] == 1
            ok = (not alone and base.op == "call_function" and bval.storage_offset() == 0
                  and is_non_overlapping_and_dense_or_false(bval)
                  and bval.untyped_storage().nbytes() == bval.numel() * bval.element_size())
        if ok:
            bases[out] = base
    return bases


def _concrete(v):
    if isinstance(v, torch.fx.Node):
        return v.meta["val"]
    return v


def _value(v, env):
    """One node argument as GraphBuilder.apply takes it: a tensor's program
    value (a list of them), or the argument's Python value (numbers, lists,
    dtypes, strings); the op's schema says what each one is (describe.h)."""
    if isinstance(v, torch.fx.Node):
        if isinstance(v.meta.get("val"), torch.Tensor):
            return env[v]
        v = env.get(v, v.meta.get("val"))
    if isinstance(v, (list, tuple)):
        return [_value(x, env) for x in v]
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}[type(v)](v)
    return v


def _common_dtype(values):
    operands = []
    for v in values:
        if isinstance(v, torch.fx.Node):
            v = v.meta.get("val")
        if isinstance(v, torch.Tensor) or (isinstance(v, (int, float, bool, complex)) and not isinstance(v, type(None))):
            operands.append(v)
    if not any(isinstance(v, torch.Tensor) for v in operands):
        return None
    try:
        return elementwise_dtypes(*operands, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]
    except Exception:  # noqa: BLE001 - ops that are not elementwise need no common dtype
        return None


def _metadata_holds(placeholders, inputs):
    """True when the graph's metadata already describes these inputs: every
    input static and laid out as its placeholder's value (AOTAutograd traced
    it so), so no node's metadata can differ. Re-propagating a training
    graph costs about half a second."""
    for node, t in zip(placeholders, inputs):
        val = node.meta.get("val")
        if not isinstance(t, torch.Tensor):
            # A number the graph was traced with (a split graph's pieces may
            # carry none): host arithmetic on it was traced for that value.
            if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)) or val is None or val != t:
                return False
            continue
        if not isinstance(val, torch.Tensor):
            return False
        if any(isinstance(s, torch.SymInt) for s in (*val.shape, *val.stride(), val.storage_offset())):
            return False
        if (val.dtype != t.dtype or tuple(val.shape) != tuple(t.shape) or val.stride() != t.stride()
                or val.storage_offset() != t.storage_offset()):
            return False
    return True


def _propagate(gm, inputs):
    """Refreshes every node's meta['val'] for these concrete inputs."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(t, static_shapes=True) if isinstance(t, torch.Tensor) else t for t in inputs]
    with mode:
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)


class _Runner:
    """A fused graph: a program per input signature, built on first use."""

    def __init__(self, gm, name):
        self.gm = gm
        self.name = name
        self.programs = {}
        # The graph's tensor constants, on tpu once: they join each call's
        # inputs. AOTAutograd may call its compilers with its fake mode
        # active, which would make these copies fake tensors (no data).
        self.constants = []
        with unset_fake_temporarily():
            for node in gm.graph.nodes:
                if node.op == "get_attr":
                    value = operator.attrgetter(node.target)(gm)
                    self.constants.append(value.to("tpu") if isinstance(value, torch.Tensor) else value)

    def run(self, inputs):
        inputs = list(inputs) + self.constants
        sig = (_C._graph_signature([t if isinstance(t, torch.Tensor) else None for t in inputs]),
               tuple(v for v in inputs if not isinstance(v, torch.Tensor)))
        program = self.programs.get(sig)
        if program is None:
            program = self.programs[sig] = _Program(self.gm, list(inputs), self.name)
            _compiles.warn_pending(stacklevel=4)
        return program(inputs)


class _Fused(torch.nn.Module):
    """Stands in for a fused submodule of a split graph."""

    def __init__(self, runner):
        super().__init__()
        self.runner = runner

    def forward(self, *args):
        out = self.runner.run(list(args))
        return tuple(out) if isinstance(out, list) else out


def _partitions(gm):
    """The supported nodes of |gm| as programs: [{node: None}], in one pass.

    A node's stage is the number of unsupported nodes (those that run op by
    op between programs) on the longest path from the graph's inputs to it;
    the supported nodes of a stage make one program. No path leaves a stage
    and comes back (a path through an unsupported node reaches only later
    stages), so each program can run whole before its users, and a graph
    needs as many programs as unsupported nodes lie on one path, plus one.
    Linear in the graph, where CapabilityBasedPartitioner's merging with
    cycle checks took minutes on a 15,000-node backward.
    An item of a tuple (operator.getitem) goes where the tuple's maker goes."""
    support = _Support()
    stage, supported, parts = {}, set(), {}
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            stage[node] = 0
            continue
        if node.op == "call_function" and node.target is operator.getitem:
            ok = node.args[0] in supported
        else:
            ok = support.is_node_supported(None, node)
        if ok:
            supported.add(node)
        stage[node] = max((stage[p] + (ok and p.op not in ("placeholder", "get_attr") and p not in supported)
                           for p in node.all_input_nodes), default=0)
        if ok:
            parts.setdefault(stage[node], {})[node] = None
    return [parts[s] for s in sorted(parts)]


_counter = [0]
# The function whose graphs tpu_backend compiles now ("step (train.py:12)").
_function = [None]


# Node meta key: the node is a result the user gets as it is (AOTAutograd's
# PlainAOTOutput), not a view of another value, in eager either.
_OWN_OUTPUT = _graph_pack.OWN_OUTPUT


def _mark_own_outputs(gm):
    """Marks the nodes of |gm|'s results that AOTAutograd returns to the user
    as they are: results it found to alias nothing when it traced the
    function (OutputType.non_alias), although the graph may make them as
    views (stack as a view of a cat). It finds no alias where no result
    needs grad, so _alias_bases still keeps results that share a value
    views of it. Results that alias (regenerated by AOTAutograd from their
    base) are not marked. The mark stays with a node copied into a fused
    region's graph, and _graph_pack keeps it."""
    from torch._functorch._aot_autograd.descriptors import PlainAOTOutput
    from torch._functorch._aot_autograd.schemas import OutputType
    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    if meta is None:
        return
    output = next(n for n in gm.graph.nodes if n.op == "output")
    results = output.args[0]
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    for out, desc in zip(results, output.meta.get("desc") or ()):
        if (isinstance(out, torch.fx.Node) and isinstance(desc, PlainAOTOutput) and desc.idx < len(meta.output_info)
                and meta.output_info[desc.idx].output_type == OutputType.non_alias):
            out.meta[_OWN_OUTPUT] = True


def _compile_graph(gm):
    """A callable (boxed: it takes a list of inputs) that runs |gm|, a graph
    AOTAutograd hands over: one program per input signature where every node
    has a rule, else fused regions as programs and the rest op by op."""
    global _warned_dynamic
    inputs = _values(list(gm.graph.find_nodes(op="placeholder")))
    if not _warned_dynamic and any(isinstance(s, torch.SymInt) for t in inputs for s in t.shape):
        _warned_dynamic = True
        warnings.warn("torchtpu: dynamic shapes are specialized: each new input shape compiles its own XLA "
                      "program (once per shape, then cached)")
    _counter[0] += 1
    name = f"graph{_counter[0]}"
    if _function[0] is not None:
        _C._compiles_set_owner(name, f"compiled {_function[0]}")  # its programs, in the compile log
    on_tpu = _on_tpu(gm)
    supported = all(_Support().is_node_supported(None, n) for n in gm.graph.nodes if n.op == "call_function")
    if supported and on_tpu:
        return _Runner(gm, name).run
    fused = gm  # a graph of CPU tensors is PyTorch's to run
    if on_tpu:
        # Submodules the graph has already (a higher-order op's subgraphs,
        # which the op runs itself, under vmap too) stay as they are.
        own = {sub_name for sub_name, _ in gm.named_children()}
        fused = fuse_by_partitions(gm, _partitions(gm), prefix="fused_")
        for sub_name, sub in list(fused.named_children()):
            if sub_name not in own:
                setattr(fused, sub_name, _Fused(_Runner(sub, f"{name}_{sub_name}")))

    def run(args):
        out = fused(*args)
        return list(out) if isinstance(out, (list, tuple)) else [out]
    return run


class _Compiled(OutputCode):
    """A graph compiled by _compile_graph, in the form AOTAutograd's cache
    keeps beside its own metadata: the graph as plain data (_graph_pack),
    from which a later process rebuilds the runner; the XLA programs come
    from torchtpu's disk cache."""

    def __init__(self, gm, example_inputs=None):
        self._boxed_call = True  # an instance's: wrappers copy its __dict__
        self._packed = None  # or why it is not packed
        _mark_own_outputs(gm)
        if should_use_local_autograd_cache():
            try:  # before compiling: splitting a graph rewrites it
                self._packed = _graph_pack.pack(gm)
            except _graph_pack.Unpackable as e:
                self._packed = e
        self._run = _compile_graph(gm)

    def __call__(self, args):
        return self._run(args)

    def prepare_for_serialization(self):
        if not isinstance(self._packed, bytes):
            # AOTAutograd takes this as "not cacheable" and says so at INFO level
            raise BypassAOTAutogradCache(f"torchtpu does not keep this graph: {self._packed}")
        self._run = None

    def post_compile(self, example_inputs, constants, graph_kwargs):
        if self._run is None:
            self._run = _compile_graph(_graph_pack.unpack(self._packed))

    def set_triton_bundle(self, triton_bundle):
        pass


def _cache_tag():
    """What AOTAutograd's cache key must cover besides the graph, its inputs
    and PyTorch's own state: this build of torchtpu (its rules decide the
    decomposition table, its meta functions and kernels what tracing sees),
    the plugin and the kernel setting."""
    import hashlib
    import pathlib
    import torchtpu
    digest = hashlib.sha256()
    for path in sorted(pathlib.Path(__file__).parent.iterdir()):
        if path.suffix in (".py", ".so"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(f"{torchtpu._platform}\0{torchtpu._plugin_path}\0{os.environ.get('TORCHTPU_KERNELS', '1')}".encode())
    return digest.hexdigest()


def _shared_storages(inputs):
    """For each input, the index of the first input with the same storage
    (-1 for a non-tensor)."""
    from torch.multiprocessing.reductions import StorageWeakRef
    first, out = {}, []
    for n, x in enumerate(inputs):
        out.append(first.setdefault(StorageWeakRef(x.untyped_storage()), n) if isinstance(x, torch.Tensor) else -1)
    return tuple(out)


_setup = None


def tpu_backend(gm, example_inputs, **kwargs):
    """The dynamo backend registered as "tpu" (an entry point of the package,
    so `import torchtpu` does not import dynamo). AOTAutograd keeps its
    results in its cache (PyTorch's cache directory), the compiled graphs
    bundled in, so a later process skips AOTAutograd's tracing as it skips
    XLA's compiles; TORCHTPU_CACHE_DIR=off turns both off."""
    global _setup
    if _setup is None:
        _setup = (_decompositions(), _cache_tag())
    decompositions, tag = _setup
    _flex.in_graph(gm)  # FlexAttention traced into the graph
    gm._torchtpu_build = tag  # AOTAutograd's cache key hashes the graph module's attributes
    # Nor does the key say which inputs share a storage, which decides how
    # AOTAutograd writes a mutated one back (through a synthetic base): in
    # torch 2.13 `tanh(a, out=b)` with a and b views of one tensor, then
    # with two tensors, loaded the first entry for the second call, and b
    # was never written (Inductor's entries on the CPU too).
    gm._torchtpu_shared_inputs = _shared_storages(example_inputs)
    # New compilers per graph: AotAutograd wraps the backward one in place.
    aot = aot_autograd(fw_compiler=SerializableAOTDispatchCompiler(_Compiled, _Compiled),
                       bw_compiler=SerializableAOTDispatchCompiler(_Compiled, _Compiled),
                       decompositions=decompositions, keep_inference_input_mutations=True)
    # The backward is compiled with the forward (not at its first call), so
    # that the cache entry, made then, holds both.
    cache = torch._functorch.config.enable_autograd_cache and bool(_C._cache_dir())
    # The cache refuses a graph that calls a function outside its allowlist
    # (_flex.dense, in place of FlexAttention) unless the function is marked,
    # with a value its key takes in: torchtpu's build.
    marks = {}
    if hasattr(torch._inductor.config, "unsafe_marked_cacheable_functions"):
        marks["unsafe_marked_cacheable_functions"] = {**torch._inductor.config.unsafe_marked_cacheable_functions,
                                                      f"{_flex.__name__}.dense": tag}
    # The user's function, which owns the graphs' programs in the compile log.
    context = torch._guards.TracingContext.try_get()
    code = context.traced_code[0] if context is not None and context.traced_code else None
    function = f"{code.co_name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})" if code else None

    def compile_for(inputs):
        _function[0] = function
        try:
            with torch._functorch.config.patch(bundled_autograd_cache=True, force_non_lazy_backward_lowering=True,
                                               enable_autograd_cache=cache), torch._inductor.config.patch(**marks):
                return aot(gm, inputs, **kwargs)
        finally:
            _function[0] = None

    compiled = compile_for(example_inputs)
    shared = gm._torchtpu_shared_inputs
    if all(first in (n, -1) for n, first in enumerate(shared)):
        return compiled
    # Compiled for inputs that share a storage: AOTAutograd writes mutations
    # back through their common base, and torch 2.13 ran that code for later
    # calls whose inputs do not share one too (Dynamo does not guard on it),
    # writing the wrong tensor. One compiled function per sharing pattern.
    by_pattern = {shared: compiled}

    def run(*args):  # as Dynamo calls what aot_autograd returns
        key = _shared_storages(args)
        fn = by_pattern.get(key)
        if fn is None:
            gm._torchtpu_shared_inputs = key
            fn = by_pattern[key] = compile_for(list(args))
        return fn(*args)
    return run
