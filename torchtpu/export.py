"""torchtpu.export_stablehlo: a torch.export program as one StableHLO module.

The program (torch.export.export of a module and example inputs, or an
ExportedProgram) is decomposed with the table torch.compile's backend uses
(_decomp.table(): only ops torchtpu has no rule for) and lowered node by
node through the same C rules eager and compiled code use (_fx_program's
walker over a GraphBuilder in exporting mode, csrc/eager/program.c). The
module is self-contained: no hand-written kernels (custom calls only a
torchtpu process registers), no runtime checks, no random state.

Calling convention of @main: one argument per input of the exported program
in its order (torch.export's: parameters, buffers, constants, then the user
inputs flattened as pytrees), each a tensor of the input's dtype and sizes;
one result per output (mutated buffers first, then the user outputs
flattened). `inputs`/`outputs` (and manifest.json when saved) describe each.
"""
import json
import operator
import os
import warnings

import torch
import torch.utils._pytree as pytree
from torch.export.graph_signature import InputKind, OutputKind

from . import _C, _decomp
from . import _fx_program as _fx

_MODULE = "module.mlir"
_ARTIFACT = "module.mlirbc"
_WEIGHTS = "weights.safetensors"
_MANIFEST = "manifest.json"
_FORMAT = 1


def _dtype_name(dtype):
    return str(dtype).split(".", 1)[1]


def _dtype(name):
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"torchtpu: unknown dtype {name!r} in a StableHLO export manifest")
    return value


class StableHLOExport:
    """An exported StableHLO module with its calling convention and state.

    mlir: the module as StableHLO text (MLIR), @main as described above.
    inputs / outputs: per argument / result of @main, a dict with name,
      kind ("parameter", "buffer", "constant", "user_input"; outputs:
      "buffer_mutation", "user_input_mutation", "user_output"), target (the
      state's name or the input's), dtype and shape.
    state: {target: CPU tensor} for the inputs that are not user inputs.
    Calling it runs the module through PJRT (torchtpu's plugin, the module
    compiled from its text as any PJRT user compiles it), not through
    torchtpu's eager or compiled paths: the user inputs as the exported
    program took them, the user outputs as it returned them; mutated
    buffers update `state`.
    """

    def __init__(self, mlir, inputs, outputs, state, in_spec, out_spec, dropped_checks=0, specialized=None):
        self.mlir = mlir
        # {index among the flat user inputs: the number torch.export specialized}
        self.specialized = dict(specialized or {})
        self.inputs = inputs
        self.outputs = outputs
        self.state = state
        self.in_spec = in_spec
        self.out_spec = out_spec
        self.dropped_checks = dropped_checks
        self._exe = None

    def __repr__(self):
        users = sum(i["kind"] == "user_input" for i in self.inputs)
        return (f"StableHLOExport({len(self.inputs) - users} state tensors, {users} user inputs, "
                f"{len(self.outputs)} results, {len(self.mlir)} characters of StableHLO)")

    # --- running ---------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        flat, spec = pytree.tree_flatten((args, kwargs))
        if self.in_spec is not None and spec != self.in_spec:
            raise TypeError(f"torchtpu: the exported module takes inputs structured as {self.in_spec}, got {spec}")
        users = [i for i in self.inputs if i["kind"] == "user_input"]
        if len(flat) != len(users) + len(self.specialized):
            raise TypeError(f"torchtpu: the exported module takes {len(users) + len(self.specialized)} user "
                            f"inputs, got {len(flat)}")
        values = []
        for n, v in enumerate(flat):
            if n in self.specialized:
                if v != self.specialized[n]:
                    raise ValueError(f"torchtpu: the module was exported for user input {n} = "
                                     f"{self.specialized[n]!r} (torch.export specialized it), got {v!r}")
            else:
                values.append(v)
        device = next((v.device for v in flat if isinstance(v, torch.Tensor)), torch.device("cpu"))
        arguments, k = [], 0
        for spec_ in self.inputs:
            if spec_["kind"] != "user_input":
                arguments.append(self.state[spec_["target"]])
                continue
            v = values[k]
            k += 1
            if not isinstance(v, torch.Tensor):
                raise TypeError(f"torchtpu: exported input {spec_['name']} is a tensor, got {type(v).__name__}")
            want = (_dtype(spec_["dtype"]), list(spec_["shape"]))
            if (v.dtype, list(v.shape)) != want:
                raise ValueError(f"torchtpu: exported input {spec_['name']} is {want[0]} of shape {want[1]} "
                                 f"(the module's shapes are static), got {v.dtype} of shape {list(v.shape)}")
            arguments.append(v)
        arguments = [a.detach().to("cpu").contiguous() for a in arguments]
        if self._exe is None:
            self._exe = _C.ModuleExecutable(self.mlir)
        results = self._exe.run(arguments, [(_dtype(o["dtype"]), list(o["shape"])) for o in self.outputs])
        user = []
        for spec_, value in zip(self.outputs, results):
            if spec_["kind"] == "buffer_mutation":
                self.state[spec_["target"]] = value
            elif spec_["kind"] == "user_output":
                user.append(value.to(device))
        return pytree.tree_unflatten(user, self.out_spec) if self.out_spec is not None else user

    # --- files -----------------------------------------------------------------------
    def portable_artifact(self, target_version=None):
        """The module as a versioned StableHLO portable artifact (MLIR
        bytecode of the VHLO dialect, which later StableHLO consumers read
        back within the compatibility window). Needs jaxlib's StableHLO
        bindings (`pip install jaxlib`); target_version defaults to the
        oldest version they can write (most consumers read it)."""
        try:
            from jaxlib.mlir import ir, passmanager
            from jaxlib.mlir.dialects import chlo, stablehlo
            from jaxlib.mlir._mlir_libs import _jax_mlir_ext, _stablehlo
        except ImportError as e:
            raise RuntimeError("torchtpu: a StableHLO portable artifact needs the StableHLO serializer of jaxlib "
                               "(pip install jaxlib); the module's text (.mlir, save()) needs nothing") from e
        _stablehlo.register_stablehlo_passes()
        registry = ir.DialectRegistry()
        _jax_mlir_ext.register_dialects(registry)  # func and the builtin dialects
        with ir.Context() as ctx:
            ctx.append_dialect_registry(registry)
            ctx.load_all_available_dialects()
            chlo.register_dialect(ctx)
            stablehlo.register_dialect(ctx)
            module = ir.Module.parse(self.mlir)
            # CHLO ops (erf, the special functions) become StableHLO: the
            # artifact holds StableHLO alone, as its compatibility promise asks.
            passmanager.PassManager.parse("builtin.module(func.func(chlo-legalize-to-stablehlo))").run(
                module.operation)
            return _stablehlo.serialize_portable_artifact(module, target_version or
                                                          _stablehlo.get_minimum_version())

    def manifest(self):
        def spec_text(spec):
            if spec is None:
                return None
            try:
                return pytree.treespec_dumps(spec)
            except Exception:  # noqa: BLE001 - a container pytree cannot write: the flat convention holds
                return None
        return {"format": _FORMAT, "module": _MODULE, "weights": _WEIGHTS, "inputs": self.inputs,
                "outputs": self.outputs, "in_spec": spec_text(self.in_spec), "out_spec": spec_text(self.out_spec),
                "dropped_runtime_checks": self.dropped_checks,
                "specialized_user_inputs": {str(k): v for k, v in self.specialized.items()}}

    def save(self, path, portable_artifact=None):
        """Writes the export to folder |path|: module.mlir (the StableHLO
        text), weights.safetensors (the state, by target), manifest.json (the
        calling convention), and module.mlirbc (the portable artifact) when
        jaxlib is installed (portable_artifact=None) or asked for (True)."""
        from safetensors.torch import save_file
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, _MODULE), "w") as f:
            f.write(self.mlir)
        # Tied weights are separate inputs of the module: each is its own copy.
        save_file({k: v.detach().cpu().contiguous().clone() for k, v in self.state.items()},
                  os.path.join(path, _WEIGHTS))
        manifest = self.manifest()
        if portable_artifact is None:
            try:
                import jaxlib.mlir._mlir_libs._stablehlo  # noqa: F401
                portable_artifact = True
            except ImportError:
                portable_artifact = False
        if portable_artifact:
            with open(os.path.join(path, _ARTIFACT), "wb") as f:
                f.write(self.portable_artifact())
            manifest["portable_artifact"] = _ARTIFACT
        with open(os.path.join(path, _MANIFEST), "w") as f:
            json.dump(manifest, f, indent=1)


def load_stablehlo(path):
    """An export written by StableHLOExport.save, ready to call (its module
    compiled from the text by PJRT)."""
    from safetensors.torch import load_file
    with open(os.path.join(path, _MANIFEST)) as f:
        manifest = json.load(f)
    if manifest.get("format") != _FORMAT:
        raise ValueError(f"torchtpu: {path} holds a StableHLO export of format {manifest.get('format')}, "
                         f"this torchtpu reads format {_FORMAT}")
    with open(os.path.join(path, manifest["module"])) as f:
        mlir = f.read()
    state = load_file(os.path.join(path, manifest["weights"]))
    specs = [None if s is None else pytree.treespec_loads(s) for s in (manifest["in_spec"], manifest["out_spec"])]
    return StableHLOExport(mlir, manifest["inputs"], manifest["outputs"], state, *specs,
                           manifest.get("dropped_runtime_checks", 0),
                           {int(k): v for k, v in manifest.get("specialized_user_inputs", {}).items()})


_INPUT_KINDS = {InputKind.PARAMETER: "parameter", InputKind.BUFFER: "buffer",
                InputKind.CONSTANT_TENSOR: "constant", InputKind.USER_INPUT: "user_input"}
_OUTPUT_KINDS = {OutputKind.BUFFER_MUTATION: "buffer_mutation", OutputKind.USER_INPUT_MUTATION: "user_input_mutation",
                 OutputKind.USER_OUTPUT: "user_output"}


def export_stablehlo(program, args=(), kwargs=None, *, dynamic_shapes=None, strict=False):
    """A StableHLOExport of |program|: a torch.export.ExportedProgram, or a
    module (or function) exported here with example inputs |args|/|kwargs|
    (torch.export.export's arguments). Shapes are static: a program with
    dynamic dims is refused (export one module per shape)."""
    if isinstance(program, torch.export.ExportedProgram):
        if args or kwargs or dynamic_shapes is not None:
            raise TypeError("torchtpu.export_stablehlo: an ExportedProgram carries its inputs; pass no args, "
                            "kwargs or dynamic_shapes with it")
        ep = program
    elif callable(program):
        if not isinstance(args, tuple):
            args = (args,)
        module = program if isinstance(program, torch.nn.Module) else _Wrap(program)
        ep = torch.export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict)
    else:
        raise TypeError(f"torchtpu.export_stablehlo: expected an ExportedProgram or a module, "
                        f"got {type(program).__name__}")
    ep = ep.run_decompositions(_decomp.table())
    gm = ep.graph_module
    sig = ep.graph_signature
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(sig.input_specs):
        raise RuntimeError("torchtpu.export_stablehlo: internal: placeholders and input specs disagree")

    inputs, state, types, env_numbers, specialized = [], {}, [], {}, {}
    user_index = 0
    for node, spec in zip(placeholders, sig.input_specs):
        val = node.meta.get("val")
        kind = _INPUT_KINDS.get(spec.kind)
        if kind is None:
            raise NotImplementedError(f"torchtpu.export_stablehlo: input {node.name} is a {spec.kind.name} "
                                      "(script objects and effect tokens have no StableHLO form)")
        if not isinstance(val, torch.Tensor):
            if kind == "user_input" and isinstance(val, (int, float, bool)):
                env_numbers[node] = val  # torch.export specialized it: the module is for this value
                specialized[user_index] = val
                user_index += 1
                continue
            raise NotImplementedError(f"torchtpu.export_stablehlo: input {node.name} is "
                                      f"{type(val).__name__}, not a tensor")
        dynamic = [str(s) for s in val.shape if not isinstance(s, int)]
        if dynamic or isinstance(val, torch.SymInt):
            raise ValueError(f"torchtpu.export_stablehlo: input {node.name} has dynamic dims ({', '.join(dynamic)}):"
                             " a StableHLO export has static shapes; export without dynamic_shapes "
                             "(one module per shape)")
        target = spec.target if kind != "user_input" else node.name
        user_index += kind == "user_input"
        if kind != "user_input":
            value = ep.state_dict.get(target)
            if value is None:
                value = ep.constants[target]
            state[target] = value.detach().to("cpu")
        inputs.append({"name": node.name, "kind": kind, "target": target, "dtype": _dtype_name(val.dtype),
                       "shape": [int(s) for s in val.shape]})
        types.append((val.dtype, [int(s) for s in val.shape]))

    name = getattr(ep.module_call_graph[0].signature, "name", None) if ep.module_call_graph else None
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem or node.target in _fx.TRACE_CHECKS:
            continue  # trace-time checks hold for the static shapes traced
        if _fx.host_side(node):
            if not isinstance(node.meta.get("val"), (int, float, bool)):
                raise ValueError(f"torchtpu.export_stablehlo: {node.name} ({node.target}) is symbolic: a StableHLO "
                                 "export has static shapes")
        elif not _fx.lowerable(node.target):
            raise NotImplementedError(f"torchtpu.export_stablehlo: torchtpu has no lowering for {node.target} "
                                      f"(node {node.name}), so this program has no StableHLO form here")
    b = _C._export_builder(f"export_{name or 'program'}", types)
    env, index = dict(env_numbers), {}
    for node in placeholders:
        if node not in env:
            index[node] = len(index)
            env[node] = b.input(index[node])
    _fx.lower(b, gm, env, index)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    results = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    outputs, values, dtypes = [], [], []
    for out, spec in zip(results, sig.output_specs):
        val = out.meta.get("val") if isinstance(out, torch.fx.Node) else out
        if not isinstance(val, torch.Tensor):
            raise NotImplementedError(f"torchtpu.export_stablehlo: output {spec.arg.name} is "
                                      f"{type(val).__name__}, not a tensor: @main returns tensors only")
        kind = _OUTPUT_KINDS.get(spec.kind)
        if kind is None:
            raise NotImplementedError(f"torchtpu.export_stablehlo: output {spec.arg.name} is a {spec.kind.name}")
        outputs.append({"name": spec.arg.name, "kind": kind, "target": spec.target or spec.arg.name,
                        "dtype": _dtype_name(val.dtype), "shape": [int(s) for s in val.shape]})
        values.append(env[out])
        dtypes.append(val.dtype)
    mlir, dropped = b.export_text(values, dtypes)
    if dropped:
        warnings.warn(f"torchtpu.export_stablehlo: the exported module leaves out {dropped} kind(s) of runtime "
                      "check (index bounds): out-of-range indices are clamped there, as XLA's gather does, "
                      "where PyTorch raises")
    return StableHLOExport(mlir, inputs, outputs, state, ep.call_spec.in_spec, ep.call_spec.out_spec, dropped,
                           specialized)


class _Wrap(torch.nn.Module):
    """A plain function as the module torch.export takes."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args, **kwargs):
        return self.fn(*args, **kwargs)
