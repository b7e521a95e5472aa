"""torch.compile(backend="tpu"): the backend, the partitioner and the cache.

AOTAutograd (with torchtpu's decompositions, _decomp.table(): PyTorch's for
ops torchtpu has no rule for) hands over functional forward and backward
graphs. A graph whose every node has a rule becomes one XLA program per
input signature (_fx_program.Program: the walker export shares, lowering
each node through the C rule eager uses), compiled by XLA and cached. Graph
inputs stay in their storages (parameters are never copied); input
mutations are written back through the storage model, as eager in-place ops
are. Nodes without a rule split the graph: the partitioner fuses the
supported regions into programs (_partitions) and the rest runs op by op in
eager mode, where torchtpu.stats()["fallbacks"] counts what falls back to
the CPU. AOTAutograd's cache keeps what it traced, with the graphs as this
backend compiled them (_Compiled), so a later process traces nothing again.
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
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.passes.operator_support import OperatorSupport
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

from . import _C, _compiles, _decomp, _flex, _graph_pack
from . import _fx_program as _fx

_warned_dynamic = False


def _placeable(t):
    """A tensor a program can hold: one on tpu, or a 0-dim one on the CPU,
    which ops take as a number (as eager does) and a program hands back."""
    return t.device.type == "tpu" or (t.device.type == "cpu" and t.dim() == 0)


def _on_tpu(gm, inputs=(), key="val"):
    """Whether a tensor of the graph (its nodes' meta[|key|], |inputs|) is on tpu."""
    values = (list(inputs), *(n.meta.get(key) for n in gm.graph.nodes))
    return any(t.device.type == "tpu" for v in values for t in _fx.tensors(v))


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
            return all(_placeable(t) for t in _fx.tensors(node))
        if not (_fx.lowerable(node.target) or _fx.host_side(node) or _fx.writes_input(node)):
            return False
        tensors = (*_fx.tensors(node), *_fx.tensors(list(node.args)), *_fx.tensors(node.kwargs))
        return all(_placeable(t) for t in tensors)


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
            program = self.programs[sig] = _fx.Program(self.gm, list(inputs), self.name)
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


def _mark_own_outputs(gm):
    """Marks the nodes of |gm|'s results that AOTAutograd returns to the user
    as they are: results it found to alias nothing when it traced the
    function (OutputType.non_alias), although the graph may make them as
    views (stack as a view of a cat). It finds no alias where no result
    needs grad, so _fx_program's alias bases keep results that share a value
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
            out.meta[_fx.OWN_OUTPUT] = True


def _compile_graph(gm):
    """A callable (boxed: it takes a list of inputs) that runs |gm|, a graph
    AOTAutograd hands over: one program per input signature where every node
    has a rule, else fused regions as programs and the rest op by op."""
    global _warned_dynamic
    inputs = _fx.tensors(list(gm.graph.find_nodes(op="placeholder")))
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
    digest.update(f"{torchtpu._platform}\0{torchtpu._plugin_path}\0{torchtpu.settings.kernels}".encode())
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
        _setup = (_decomp.table(), _cache_tag())
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
