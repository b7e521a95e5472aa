"""A graph AOTAutograd hands to the tpu backend, as plain data and back.

AOTAutograd's cache keeps the backend's compiled graphs (compile._Compiled);
ours are FX graphs whose nodes carry fake values, which the walker reads for
types, layouts and aliasing. PyTorch's GraphPickler rebuilds each fake value
through its meta converter (about 0.4 ms a tensor: 2.7 s for an optimizer
graph over 101 parameters); this keeps only what the walker reads (dtype,
sizes, strides, offset, device, and which values share a storage) and makes
each fake tensor directly from a meta tensor over its storage (~0.07 ms).

A dynamic graph's symbolic sizes are kept as sympy expressions over its
shape symbols, each with the value it was traced with; unpacking makes the
symbols anew in a shape environment of the graph's own. Graphs with what this
does not describe (data-dependent sizes, submodules, targets other than
operators) raise Unpackable: they are compiled, not cached.
"""
import gc
import operator
import pickle

import torch
import torch.fx
from torch._subclasses.fake_tensor import unset_fake_temporarily


class Unpackable(Exception):
    pass


class _Ref:
    """A node argument: the node at |index| of the graph."""
    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __reduce__(self):
        return (type(self), (self.index,))


class _TensorRef(_Ref):
    """A fake value: the tensor at |index| of the packed tensors."""
    __slots__ = ()


class _Sym:
    """A symbolic value: its kind (SymInt, SymFloat or SymBool) and sympy expression."""
    __slots__ = ("kind", "expr")

    def __init__(self, kind, expr):
        self.kind, self.expr = kind, expr

    def __reduce__(self):
        return (type(self), (self.kind, self.expr))


_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


_HOST_MODULES = ("_operator", "operator", "math", "builtins")
_PLAIN = (type(None), bool, int, float, str, slice, torch.dtype, torch.device, torch.memory_format, torch.layout)


class _Packer:
    def __init__(self):
        self.tensors = []   # (dtype, sizes, strides, offset, device, storage index)
        self.storages = []  # bytes per storage
        self.symbols = {}   # shape symbol -> the value it was traced with
        self._tensor_ids = {}
        self._storage_ids = {}

    def sym(self, v):
        """|v|, an int or a symbolic value, as an int or a _Sym."""
        if not isinstance(v, _SYMBOLIC):
            return v
        expr, env = v.node.expr, v.node.shape_env
        hints = env.backed_var_to_val if hasattr(env, "backed_var_to_val") else env.var_to_val  # older PyTorch
        for symbol in expr.free_symbols:
            if symbol not in hints:
                raise Unpackable(f"the data-dependent size {symbol}")
            hint = hints[symbol]
            self.symbols[symbol] = int(hint) if hint.is_integer else float(hint)
        return _Sym(type(v).__name__, expr)

    def tensor(self, t):
        if t.layout != torch.strided:
            raise Unpackable("a tensor that is not strided")
        key = id(t)
        if key not in self._tensor_ids:
            storage = t.untyped_storage()
            s = self._storage_ids.setdefault(storage._cdata, len(self.storages))
            if s == len(self.storages):
                self.storages.append(self.sym(storage.nbytes()))
            self._tensor_ids[key] = len(self.tensors)
            self.tensors.append((t.dtype, tuple(self.sym(x) for x in t.shape), tuple(self.sym(x) for x in t.stride()),
                                 self.sym(t.storage_offset()), str(t.device), s))
        return _TensorRef(self._tensor_ids[key])

    def value(self, v, nodes):
        """|v| (a node argument or a fake value) with nodes and tensors as references."""
        if isinstance(v, torch.fx.Node):
            return _Ref(nodes[v])
        if isinstance(v, torch.Tensor):
            return self.tensor(v)
        if isinstance(v, _SYMBOLIC):
            return self.sym(v)
        if isinstance(v, (list, tuple)):
            items = [self.value(x, nodes) for x in v]
            return items if isinstance(v, list) else tuple(items)
        if isinstance(v, dict):
            return {k: self.value(x, nodes) for k, x in v.items()}
        if isinstance(v, _PLAIN):
            return v
        raise Unpackable(f"a value of type {type(v).__name__}")


def _target(node):
    target = node.target
    if node.op in ("placeholder", "output", "get_attr"):
        return target
    if node.op != "call_function":
        raise Unpackable(f"a {node.op} node")
    if isinstance(target, torch._ops.OpOverload):
        return ("op", target.namespace, target._schema.name.split("::", 1)[1], target._overloadname)
    if getattr(target, "__module__", None) in _HOST_MODULES:
        return target
    raise Unpackable(f"the target {target}")


# Node meta key that compile.py sets (a result the user gets as it is) and
# that pack() keeps.
OWN_OUTPUT = "torchtpu_own_output"


def pack(gm):
    """|gm| as bytes, unpickled by unpack() with the collector paused."""
    packer = _Packer()
    nodes, rows, constants = {}, [], {}
    for i, node in enumerate(gm.graph.nodes):
        nodes[node] = i
        if node.op == "get_attr":
            value = operator.attrgetter(node.target)(gm)
            if not isinstance(value, torch.Tensor):
                raise Unpackable("a constant that is not a tensor")
            with unset_fake_temporarily():  # compilers may be called in AOTAutograd's fake mode
                constants[node.target] = (value.detach().cpu(), str(value.device))
        has_val = "val" in node.meta
        rows.append((node.op, node.name, _target(node), packer.value(node.args, nodes),
                     packer.value(node.kwargs, nodes), has_val, packer.value(node.meta.get("val"), nodes),
                     bool(node.meta.get(OWN_OUTPUT))))
    return pickle.dumps((rows, packer.tensors, packer.storages, list(packer.symbols.items()), constants),
                        protocol=pickle.HIGHEST_PROTOCOL)


def unpack(data):
    """The GraphModule pack() described, its fake values in a new fake mode."""
    # It makes thousands of objects that all live on: the cyclic collector's
    # runs over the process's heap in between would cost more than the work.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _unpack(data)
    finally:
        if enabled:
            gc.enable()


def _symbols(symbols):
    """A new shape environment (None for a static graph) with a symbol per
    packed (symbol, traced value), and a function that makes a packed value
    (an int or a _Sym) a value over the new symbols."""
    import sympy
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    env = ShapeEnv() if symbols else None
    new, hints = {}, {}
    for symbol, hint in symbols:
        new[symbol] = env.create_symbol(hint, ConstantSource(f"packed_{symbol.name}"), DimDynamic.DYNAMIC,
                                        positive=symbol.is_positive, do_not_specialize_zero_one=True)
        hints[symbol] = sympy.sympify(hint)

    def sym(v):
        if not isinstance(v, _Sym):
            return v
        expr, hint = v.expr.xreplace(new), v.expr.xreplace(hints)
        if v.kind == "SymBool":
            return env.create_symboolnode(expr)
        if v.kind == "SymFloat":
            return env.create_symfloatnode(expr, hint=float(hint))
        return env.create_symintnode(expr, hint=int(hint))
    return env, sym


def _unpack(data):
    from torch._subclasses import FakeTensorMode
    rows, tensors, storages, symbols, constants = pickle.loads(data)
    shape_env, sym = _symbols(symbols)
    mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=shape_env)
    bases = [torch.empty(sym(n), dtype=torch.uint8, device="meta").untyped_storage() for n in storages]
    fakes = []
    for dtype, sizes, strides, offset, device, s in tensors:
        if symbols:
            sizes, strides, offset = [sym(x) for x in sizes], [sym(x) for x in strides], sym(offset)
        meta = torch.empty(0, dtype=dtype, device="meta").set_(bases[s], offset, sizes, strides)
        fakes.append(mode.fake_tensor_converter.from_meta_and_device(mode, meta, torch.device(device)))

    graph = torch.fx.Graph()
    made = []

    def value(v):
        if isinstance(v, _Sym):
            return sym(v)
        if isinstance(v, _Ref):
            return (fakes if isinstance(v, _TensorRef) else made)[v.index]
        if isinstance(v, list):
            return [value(x) for x in v]
        if isinstance(v, tuple):
            return tuple(value(x) for x in v)
        if isinstance(v, dict):
            return {k: value(x) for k, x in v.items()}
        return v

    for op, name, target, args, kwargs, has_val, val, own in rows:
        if isinstance(target, tuple) and target[0] == "op":
            _, namespace, opname, overload = target
            target = getattr(getattr(getattr(torch.ops, namespace), opname), overload)
        node = graph.create_node(op, target, value(args), value(kwargs), name)
        if has_val:
            node.meta["val"] = value(val)
        if own:
            node.meta[OWN_OUTPUT] = True
        made.append(node)
    # A dict root: GraphModule puts each get_attr target (dotted paths too) in place.
    return torch.fx.GraphModule({path: tensor.to(device) for path, (tensor, device) in constants.items()}, graph)
