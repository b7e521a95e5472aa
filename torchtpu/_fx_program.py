"""FX graph to XLA program: the walker torch.compile's backend (compile.py)
and torchtpu.export_stablehlo (export.py) share.

Each call_function node of a graph is lowered through the C rule eager uses
for its op (a GraphBuilder, csrc/torch/graph.cpp): its arguments described
by the op's schema, its results typed by the node's fake value, the dtype
its operands promote to asked of the C++ that computes it for eager. A
_foreach_ op stays one node and runs its per-tensor op's rule item by item,
as eager runs it (the per-tensor op from csrc/torch/foreach.cpp's table).
Tuple items and host arithmetic take their traced values.

Program is a compiled graph's program for one input signature: the walk
plus what running it needs (input mutations written back through the
storage model, results that are views made as views after the run, host
inputs' new values packed into one copy).
"""
import operator

import torch
import torch.fx
from torch._prims_common import is_non_overlapping_and_dense_or_false

from . import _C, _graph_pack

# Node meta key: the node is a result the user gets as it is (AOTAutograd's
# PlainAOTOutput), not a view of another value, in eager either.
OWN_OUTPUT = _graph_pack.OWN_OUTPUT


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


def host_side(node):
    """Nodes the host evaluates: tuple indexing and integer arithmetic."""
    if node.target is operator.getitem:
        return True
    if isinstance(node.target, torch._ops.OpOverload):
        return node.target.namespace == "aten" and node.target.__name__.startswith("sym_")
    return getattr(node.target, "__module__", None) in ("_operator", "operator", "math", "builtins")


def writes_input(node):
    """copy_ into a graph input: AOTAutograd's way of mutating an input."""
    return node.target is torch.ops.aten.copy_.default and node.args[0].op == "placeholder"


def tensors(v):
    """The tensors in a node's meta value or arguments."""
    if isinstance(v, torch.fx.Node):
        v = v.meta.get("val")
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from tensors(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from tensors(x)


_FOREACH_ITEMS = {}


def foreach_item(target):
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


def promoting_args(target):
    """Per schema argument of |target|, whether it takes part in type
    promotion: the eager kernel's own answer (dispatch.cpp's describe_args),
    so that eager and graphs exclude the same arguments."""
    if target not in _PROMOTES:
        schema = target._schema
        _PROMOTES[target] = _C._promoting_args(schema.name, schema.overload_name)
    return _PROMOTES[target]


def meta_specs(val):
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


def lowerable(target):
    """Whether the walker lowers a call of |target|: an op with a rule, or a
    _foreach_ op whose per-tensor op has one."""
    return rule_name(target) is not None or foreach_item(target) is not None


def _trace_checks():
    aten = torch.ops.aten
    return {getattr(aten, n).default for n in ("_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range",
                                               "sym_constrain_range_for_size") if hasattr(aten, n)}


TRACE_CHECKS = _trace_checks()


def lower(b, gm, env, index, write=None):
    """Lowers every call_function node of |gm|, in order, into GraphBuilder
    |b|: env[node] becomes its program value (a list of them for a tuple or
    a _foreach_ op's list), or its host value. |env| holds the values of the
    graph's placeholders, |index| their input numbers in |b|. Each node is
    one the caller found lowerable, an item of a tuple, host arithmetic (its
    traced value) or a trace-time check; |write|(node, value) takes a copy_
    into a graph input (an input mutation) with the copy's value."""
    owners = _storage_owners(gm)
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is operator.getitem:
            env[node] = env[node.args[0]][node.args[1]]
        elif node.target in TRACE_CHECKS:
            env[node] = None  # metadata and range assertions hold for the static shapes traced
        elif host_side(node):
            env[node] = node.meta["val"]
        elif node.target in _AS_STRIDED and (storage := _storage_of(b, node.args[0], env, owners, index)) is not None:
            # as_strided reads its input's storage, not its values
            offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
            if offset is None:
                offset = node.args[0].meta["val"].storage_offset()
            env[node] = b.apply("as_strided", [storage, [int(v) for v in node.args[1]],
                                               [int(v) for v in node.args[2]], int(offset)],
                                meta_specs(node.meta["val"]), None)[0]
        elif write is not None and writes_input(node):
            dst = node.args[0]
            env[node] = b.apply("copy", [env[dst], env[node.args[1]]], meta_specs(dst.meta["val"]), None)[0]
            write(node, env[node])
        else:
            env[node] = apply(b, node, env)


def apply(b, node, env):
    """|node|'s op lowered into |b| (a list of values for a _foreach_ op)."""
    item = foreach_item(node.target)
    if item is None:
        return _apply_rule(b, node.target, _arguments(node), node.meta.get("val"), env)
    # A _foreach_ op: its per-tensor op's rule, item by item
    op, source = item
    values = _arguments(node)
    lists = [a.type.kind() == "ListType" for a in node.target._schema.arguments]
    n = len(next(v for v, is_list in zip(values, lists) if is_list))
    return [_apply_rule(b, op, [_DEFAULT if j < 0 else values[j][k] if lists[j] else values[j] for j in source],
                        node.meta["val"][k], env)
            for k in range(n)]


def _apply_rule(b, target, values, val, env):
    """|target|'s rule on |values| (one per schema argument; _DEFAULT:
    the argument's default), with results typed by |val|."""
    schema = target._schema
    args = []
    promote = []
    for v, arg, promotes in zip(values, schema.arguments, promoting_args(target)):
        if v is _DEFAULT:
            v = arg.default_value if arg.has_default_value() else None
        args.append(_value(v, env))
        if promotes:
            promote.append(v)
    base = schema.name.split("::", 1)[1]
    op = f"{base}.{schema.overload_name}" if schema.overload_name else base
    alias = _ALIASES.get(op)
    drop = alias[1] if alias is not None and alias[1] is not None else -1
    vals = b.apply(rule_name(target), args, meta_specs(val), _promoted_dtype(promote), op=op, drop=drop)
    if isinstance(val, (list, tuple)):
        return vals
    return vals[0] if vals else None  # an op without results: a runtime check


def _promoted_dtype(values):
    """The dtype eager's kernel promotes |values| to (the C++ that computes
    it for eager, on the nodes' fake values and the Python numbers), None
    where none is a tensor."""
    operands = [v.meta.get("val") if isinstance(v, torch.fx.Node) else v for v in values]
    if not any(isinstance(v, torch.Tensor) for v in operands):
        return None
    return _C._promoted_dtype(operands)


class Program:
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
            if node.op == "call_function" and writes_input(node):
                writes[node] = index[node.args[0]]
        # Inputs in tpu storages are written in place by the program; host
        # inputs (an optimizer's step count on the CPU) get the new value back.
        on_device = [isinstance(t, torch.Tensor) and t.device.type == "tpu" for t in inputs]
        mutated = [False] * len(inputs)
        for i in writes.values():
            mutated[i] = on_device[i]
        host_values = []  # (input index, new value, its meta value)
        b = _C.GraphBuilder(name, [t if isinstance(t, torch.Tensor) else None for t in inputs], mutated)
        env = {}
        for node, value in zip(placeholders, inputs):
            env[node] = b.input(index[node]) if isinstance(value, torch.Tensor) else value

        def write(node, value):  # an input mutation: the value goes back into the input's storage
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
                host_values.append((i, value, node.args[0].meta["val"]))
        lower(b, gm, env, index, write)
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
            elif out in made:  # one value returned twice is one tensor, as eager returns it
                self.outputs.append(self.outputs[made[out]])
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

    def __call__(self, inputs):
        outs = self.program.run([t if isinstance(t, torch.Tensor) else None for t in inputs],
                                self.num_outputs + len(self.host_writes))
        for k, places in self.host_writes:
            flat = outs[k].cpu()
            for i, offset, n in places:
                inputs[i].copy_(flat[offset:offset + n].view(inputs[i].shape))
        result = []
        host = {}  # output index -> its CPU tensor, one per value returned twice
        for kind, v in self.outputs:
            if kind == "view":
                (base_kind, j), sizes, strides, offset = v
                base = outs[j] if base_kind == "new" else inputs[j]
                result.append(torch.as_strided(base, sizes, strides, offset))
            elif kind == "host":
                if v not in host:
                    host[v] = outs[v].cpu()
                result.append(host[v])
            else:
                result.append(outs[v] if kind == "new" else inputs[v] if kind == "input" else v)
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
            alone = out.meta.get(OWN_OUTPUT) and sharing[val.untyped_storage()._cdata] == 1
            ok = (not alone and base.op == "call_function" and bval.storage_offset() == 0
                  and is_non_overlapping_and_dense_or_false(bval)
                  and bval.untyped_storage().nbytes() == bval.numel() * bval.element_size())
        if ok:
            bases[out] = base
    # A result that is no view and holds a storage computed in the graph
    # whole (dense from offset 0) is the base of the results viewing that
    # storage's owner: unfold of reshape's copy (_unsafe_view of a clone)
    # views the reshape's result, which the user holds, not the clone (fuzz
    # seed 9744: a write through the unfold missed the reshape's result).
    held = {}
    for out in results:
        val = out.meta.get("val") if isinstance(out, torch.fx.Node) else None
        if (isinstance(val, torch.Tensor) and out.op == "call_function" and out not in bases
                and val.storage_offset() == 0 and is_non_overlapping_and_dense_or_false(val)
                and val.untyped_storage().nbytes() == val.numel() * val.element_size()):
            held.setdefault(val.untyped_storage()._cdata, out)
    in_results = set(r for r in results if isinstance(r, torch.fx.Node))
    for out, base in bases.items():
        keeper = held.get(out.meta["val"].untyped_storage()._cdata)
        if base not in in_results and base not in index and keeper is not None and keeper is not out \
                and keeper.meta["val"].dtype == out.meta["val"].dtype:
            bases[out] = keeper
    return bases


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
