"""torchtpu.export_stablehlo: a torch.export program as one self-contained
StableHLO module, lowered through the rules eager and compiled code use. The
module is compiled from its text by the PJRT plugin and run on host buffers
(as any PJRT user would), and its results match the model on the CPU."""
import json
import os
import re
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtpu
from models import CNN, GPT, MLP, Block


def _models():
    torch.manual_seed(0)
    return {
        "mlp": (MLP(), (torch.randn(8, 32),)),
        "cnn": (CNN(), (torch.randn(4, 3, 16, 16),)),
        "block": (Block(32, 4, 0.0), (torch.randn(2, 16, 32),)),
        "gpt": (GPT(), (torch.randint(0, 64, (2, 16)),)),
    }


def _main_signature(mlir):
    """(argument types, result types) of @main in the module text."""
    head = mlir[mlir.index("func.func public @main("):]
    head = head[:head.index("{\n")]
    args = re.findall(r"%\w+: (tensor<[^>]*>)", head)
    results = re.findall(r"tensor<[^>]*>", head.split("->", 1)[1])
    return args, results


@pytest.mark.parametrize("name", ["mlp", "cnn", "block", "gpt"])
def test_export_runs_through_pjrt_and_matches_cpu(name, tmp_path):
    model, args = _models()[name]
    model.eval()
    expected = model(*args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exported = torchtpu.export_stablehlo(model, args)
    # The module is plain StableHLO: no torchtpu kernels, a signature that is
    # the state then the user inputs, one result per output.
    assert "custom_call" not in exported.mlir
    arg_types, result_types = _main_signature(exported.mlir)
    params = dict(model.named_parameters(remove_duplicate=False))
    n_state = len([i for i in exported.inputs if i["kind"] != "user_input"])
    assert len(arg_types) == len(exported.inputs) == n_state + len(args)
    assert len(result_types) == len(exported.outputs) == 1
    for spec in exported.inputs:
        if spec["kind"] == "parameter":
            assert list(params[spec["target"]].shape) == spec["shape"]
    torch.testing.assert_close(exported(*args), expected)
    # GPT's embeddings carry index-bound checks, which the module leaves out (with a warning).
    messages = [str(w.message) for w in caught if "runtime" in str(w.message)]
    assert bool(messages) == (name == "gpt") and exported.dropped_checks == (1 if name == "gpt" else 0)
    # Saved and loaded back: text, weights, calling convention.
    exported.save(tmp_path, portable_artifact=False)
    assert sorted(os.listdir(tmp_path)) == ["manifest.json", "module.mlir", "weights.safetensors"]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == [i["name"] for i in exported.inputs]
    loaded = torchtpu.load_stablehlo(tmp_path)
    torch.testing.assert_close(loaded(*args), expected)
    # Other inputs of the same shape: the module computes, it did not keep a result.
    other = tuple(torch.randint_like(a, 0, 64) if not a.is_floating_point() else torch.randn_like(a) for a in args)
    torch.testing.assert_close(loaded(*other), model(*other))


def test_export_of_exported_program_with_pytrees_and_tpu_inputs():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 4)
            self.register_buffer("scale", torch.tensor([1.0, 2.0, 3.0, 4.0]))

        def forward(self, batch, bias=None):
            h = self.lin(batch["x"]) * self.scale
            return {"h": h, "pair": (h.sum(-1), torch.cat([h, bias], -1) if bias is not None else h)}

    torch.manual_seed(1)
    net = Net()
    inputs = ({"x": torch.randn(3, 6)},)
    kwargs = {"bias": torch.randn(3, 2)}
    ep = torch.export.export(net, inputs, kwargs)
    exported = torchtpu.export_stablehlo(ep)
    assert [i["kind"] for i in exported.inputs] == ["parameter", "parameter", "buffer", "user_input", "user_input"]
    got = exported(*inputs, **kwargs)
    torch.testing.assert_close(got, net(*inputs, **kwargs))
    # Inputs on tpu: results come back there.
    got_tpu = exported({"x": inputs[0]["x"].to("tpu")}, bias=kwargs["bias"].to("tpu"))
    assert got_tpu["h"].device.type == "tpu"
    torch.testing.assert_close(got_tpu["pair"][1].cpu(), got["pair"][1])
    with pytest.raises(ValueError, match=r"shapes are static"):
        exported({"x": torch.randn(5, 6)}, bias=torch.randn(5, 2))
    with pytest.raises(TypeError, match="structured as"):
        exported(torch.randn(3, 6))


def test_export_buffer_mutations_update_state():
    torch.manual_seed(2)
    bn = nn.BatchNorm1d(5)  # training mode: running stats are written
    x = torch.randn(8, 5)
    exported = torchtpu.export_stablehlo(bn, (x,))
    kinds = [o["kind"] for o in exported.outputs]
    assert kinds.count("buffer_mutation") == 3 and kinds[-1] == "user_output"
    reference = nn.BatchNorm1d(5)
    for step in range(2):
        batch = x + step
        torch.testing.assert_close(exported(batch), reference(batch))
    torch.testing.assert_close(exported.state["running_mean"], reference.running_mean)
    torch.testing.assert_close(exported.state["running_var"], reference.running_var)
    assert int(exported.state["num_batches_tracked"]) == 2


def test_export_refuses_dynamic_shapes_random_ops_and_missing_rules():
    mlp = MLP().eval()
    batch = torch.export.Dim("batch", min=2, max=64)
    with pytest.raises(ValueError, match=r"dynamic dims .*static shapes"):
        torchtpu.export_stablehlo(mlp, (torch.randn(8, 32),), dynamic_shapes=({0: batch},))
    with pytest.raises(NotImplementedError, match=r"random: an exported module has no random state"):
        torchtpu.export_stablehlo(nn.Dropout(0.5).train(), (torch.randn(4, 4),))
    with pytest.raises(TypeError, match="ExportedProgram or a module"):
        torchtpu.export_stablehlo(42)
    # The process lives on, and the same model still exports.
    out = torchtpu.export_stablehlo(mlp, (torch.randn(8, 32),))
    x = torch.randn(8, 32)
    torch.testing.assert_close(out(x), mlp(x))


def test_export_keeps_dtypes_and_integer_math():
    def fn(x, idx):
        gathered = x.to(torch.bfloat16)[idx]
        return gathered.float().cumsum(0), (idx * 3) // 2, x > 0

    x, idx = torch.randn(6, 3), torch.tensor([0, 5, 2, 2])
    exported = torchtpu.export_stablehlo(fn, (x, idx))
    assert [o["dtype"] for o in exported.outputs] == ["float32", "int64", "bool"]
    got = exported(x, idx)
    for g, e in zip(got, fn(x, idx)):
        torch.testing.assert_close(g, e)


def test_portable_artifact_needs_jaxlib_or_round_trips(tmp_path):
    """With jaxlib's StableHLO bindings, the versioned artifact compiles
    through PJRT to the same results; without them, a clear error."""
    model, args = _models()["mlp"]
    model.eval()
    exported = torchtpu.export_stablehlo(model, args)
    try:
        import jaxlib.mlir._mlir_libs._stablehlo  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="pip install jaxlib"):
            exported.portable_artifact()
        return
    artifact = exported.portable_artifact()
    assert artifact[:4] == b"ML\xefR"  # MLIR bytecode
    exe = torchtpu._C.ModuleExecutable(artifact)
    state = [exported.state[i["target"]].contiguous() for i in exported.inputs if i["kind"] != "user_input"]
    (got,) = exe.run(state + [args[0]], [(torch.float32, o["shape"]) for o in exported.outputs])
    torch.testing.assert_close(got, model(*args))
    exported.save(tmp_path)
    assert (tmp_path / "module.mlirbc").read_bytes() == artifact


def test_export_of_a_model_on_tpu():
    """A model already on tpu exports the same module; its state comes to the host."""
    torch.manual_seed(3)
    model = MLP().eval()
    x = torch.randn(8, 32)
    want = model(x)
    exported = torchtpu.export_stablehlo(model.to("tpu"), (x.to("tpu"),))
    assert all(t.device.type == "cpu" for t in exported.state.values())
    got = exported(x.to("tpu"))
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), want.detach())


def test_a_module_that_does_not_compile_says_what_failed(tmp_path):
    """A saved module the plugin cannot compile raises at its first call,
    saying what was being done before the plugin's own words."""
    torchtpu.export_stablehlo(lambda x: x * 2, (torch.ones(3),)).save(tmp_path, portable_artifact=False)
    (tmp_path / "module.mlir").write_text("module { this is not StableHLO }")
    loaded = torchtpu.load_stablehlo(tmp_path)
    with pytest.raises(RuntimeError, match="^compiling a StableHLO module: "):
        loaded(torch.ones(3))
