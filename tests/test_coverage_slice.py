"""A representative slice of the OpInfo sweep (python -m torchtpu.coverage ops).

The full sweep takes long; CI runs these OpInfos through the same code, in this
process: every float32 sample and its gradients, and for some ops bfloat16,
int64 or the compiled path. One op per family at least, so a change that breaks
a family's lowering, the sweep's comparison or the compile path shows here.
"""
import pytest
import torch

from torchtpu_tools import coverage_tasks as coverage

# op -> dtypes (float32 also checks gradients where the op is differentiable)
SLICE = {
    "add": ("float32", "bfloat16", "int64", "bool"),
    "mul": ("float32", "int64"),
    "div.floor_rounding": ("float32", "int64"),
    "remainder": ("float32", "int64"),
    "pow": ("float32",),
    "exp": ("float32", "bfloat16"),
    "tanh": ("float32",),
    "clamp": ("float32", "int64"),
    "where": ("float32", "bool"),
    "bitwise_and": ("int64", "bool"),
    "sum": ("float32", "bfloat16", "int64"),
    "mean": ("float32",),
    "var": ("float32",),
    "amax": ("float32", "int64"),
    "argmax": ("float32",),
    "logsumexp": ("float32",),
    "cumsum": ("float32", "int64"),
    "mm": ("float32", "bfloat16"),
    "addmm": ("float32",),
    "bmm": ("float32",),
    "linalg.eigh": ("float32",),  # eigenvectors compared up to sign, as PyTorch compares them
    "linalg.svd": ("float32",),
    "softmax": ("float32", "bfloat16"),
    "nn.functional.gelu": ("float32",),
    "nn.functional.layer_norm": ("float32",),
    "nn.functional.cross_entropy": ("float32",),
    "nn.functional.ctc_loss": ("float32",),
    "nn.functional.conv2d": ("float32",),
    "nn.functional.max_pool2d": ("float32",),
    "nn.functional.fractional_max_pool2d": ("float32",),
    "nn.functional.embedding": ("float32",),
    "gather": ("float32", "int64"),
    "index_select": ("float32",),
    "index_put": ("float32",),
    "scatter_add": ("float32",),
    "index_reduce.mean": ("float32", "int64"),
    "put": ("float32",),
    "masked_select": ("float32", "bool"),
    "nonzero": ("float32", "int64"),
    "cat": ("float32", "int64"),
    "permute": ("float32",),
    "narrow": ("float32",),
    "tensor_split": ("float32",),  # its indices stay on the CPU
    "as_strided.partial_views": ("float32",),  # reads the storage around a view
    "repeat_interleave": ("float32",),
    "tril": ("float32",),
    "flip": ("float32", "bool"),
    "arange": ("float32", "int64"),
    "bernoulli": ("float32",),
    "cauchy": ("float32",),  # its OpInfo pins the seed: random all the same
    "multinomial": ("float32",),
}
COMPILED = ("add", "sum", "mm", "softmax", "nn.functional.gelu", "cat")


@pytest.fixture(scope="module")
def ops():
    return coverage._load_ops()


def _check(ops, name, dtype, mode):
    result = coverage._run_task(ops, name, dtype, mode, True, lambda message: None)
    assert result["status"] == "pass", f"{name} {dtype} {mode}: {result}"
    assert result.get("grad", "n/a") in ("pass", "n/a"), f"{name} gradients: {result}"
    assert result["samples"] > 0


@pytest.mark.parametrize("name,dtype", [(n, d) for n, ds in SLICE.items() for d in ds])
def test_eager(ops, name, dtype):
    _check(ops, name, dtype, "eager")


@pytest.mark.parametrize("name", COMPILED)
def test_compiled(ops, name):
    _check(ops, name, "float32", "compiled")


def test_sweep_catches_a_wrong_result(ops, monkeypatch):
    """The comparison can fail: a tpu result that is off reports a mismatch."""
    real = ops["exp"].op
    monkeypatch.setattr(ops["exp"], "op", lambda x, *a, **k: real(x) * (1.001 if x.device.type == "tpu" else 1))
    result = coverage._run_task(ops, "exp", "float32", "eager", False, lambda message: None)
    assert result["status"] == "mismatch", result


def test_sweep_takes_eigenvectors_up_to_sign(ops, monkeypatch):
    """Eigenvectors are unique up to sign only: as PyTorch's own device-vs-CPU
    test does, outputs that differ are compared again through the sample's
    output_process_fn_grad (eigh's: the vectors' magnitudes), and gradients
    are taken through it, so flipped vectors pass and wrong values do not."""
    real = ops["linalg.eigh"].op

    def patched(scale, sign):
        def eigh(x, *args, **kwargs):
            w, v = real(x, *args, **kwargs)
            return (w * scale, v * sign) if x.device.type == "tpu" else (w, v)
        return eigh

    def run():
        return coverage._run_task(ops, "linalg.eigh", "float32", "eager", True, lambda message: None)
    monkeypatch.setattr(ops["linalg.eigh"], "op", patched(1.0, -1.0))
    result = run()
    assert result["status"] == "pass" and result.get("grad") == "pass", result
    monkeypatch.setattr(ops["linalg.eigh"], "op", patched(1.001, -1.0))
    result = run()
    assert result["status"] == "mismatch" and "output[0]" in result["reason"], result  # the eigenvalues


def test_sweep_tells_random_ops_apart(ops):
    """Random ops are found although their OpInfos pin the seed; a
    deterministic op is not taken for one."""
    for name, seeded in (("cauchy", True), ("bernoulli", True), ("exp", False)):
        sample = next(iter(ops[name].sample_inputs("cpu", torch.float32)))
        with coverage._SeededWatch() as watch:
            ops[name](sample.input, *sample.args, **sample.kwargs)
        assert watch.seeded == seeded, name


# The module sweep (python -m torchtpu.coverage modules): ModuleInfos of
# module_db, each one's inputs in training (and eval) mode, with the error
# inputs; compiled for some. (KLDivLoss passes one tensor twice; the
# fractional pool draws random numbers.)
MODULES = ("nn.Linear", "nn.Conv2d", "nn.BatchNorm2d", "nn.LayerNorm", "nn.Embedding", "nn.CrossEntropyLoss",
           "nn.NLLLoss", "nn.MultiMarginLoss", "nn.MultiLabelMarginLoss", "nn.MaxPool2d", "nn.LSTM",
           "nn.TransformerEncoderLayer", "nn.LazyConv2d", "nn.KLDivLoss", "nn.FractionalMaxPool2d")
COMPILED_MODULES = ("nn.Linear", "nn.BatchNorm2d", "nn.CrossEntropyLoss")


@pytest.fixture(scope="module")
def modules():
    return coverage._load_modules()


@pytest.mark.parametrize("name", MODULES)
def test_module_eager(modules, name):
    result = coverage._run_task(modules, name, "float32", "module", True, lambda message: None)
    assert result["status"] == "pass" and result["samples"] > 0, f"{name}: {result}"


@pytest.mark.parametrize("name", COMPILED_MODULES)
def test_module_compiled(modules, name):
    result = coverage._run_task(modules, name, "float32", "module-compiled", True, lambda message: None)
    assert result["status"] == "pass" and result["samples"] > 0, f"{name}: {result}"


def test_module_sweep_catches_wrong_gradients_and_errors(modules, monkeypatch):
    """The module comparison can fail: a gradient that is off on tpu is a
    mismatch, and an error input tpu takes is an error."""
    import torch.nn.functional as F
    real_linear = F.linear

    class Off(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return g * (1.01 if g.device.type == "tpu" else 1)

    monkeypatch.setattr(torch.nn.modules.linear.F, "linear", lambda x, w, b=None: real_linear(Off.apply(x), w, b))
    result = coverage._run_task(modules, "nn.Linear", "float32", "module", True, lambda message: None)
    assert result["status"] == "mismatch" and "grad" in result["reason"], result
    monkeypatch.undo()
    real_embedding = F.embedding
    monkeypatch.setattr(torch.nn.modules.sparse.F, "embedding",
                        lambda x, *a, **k: real_embedding(x.long() if x.device.type == "tpu" else x, *a, **k))
    result = coverage._run_task(modules, "nn.Embedding", "float32", "module", True, lambda message: None)
    assert result["status"] == "error" and "error input" in result["reason"], result


# The error-input sweep (python -m torchtpu.coverage errors).
ERRORS = ("cat", "mean", "masked_scatter", "index_select", "take", "masked_select", "kthvalue", "gather",
          "multinomial", "nn.functional.multi_margin_loss", "nn.functional.multilabel_margin_loss",
          "nn.functional.embedding", "reshape")


@pytest.mark.parametrize("name", ERRORS)
def test_error_inputs(ops, name):
    result = coverage._run_task(ops, name, "float32", "errors", False, lambda message: None)
    assert result["status"] == "pass" and result["samples"] > 0, f"{name}: {result}"


def test_error_sweep_catches_a_missing_check(ops, monkeypatch):
    """An error input tpu takes, or refuses with another exception, fails."""
    real = ops["mean"].op
    monkeypatch.setattr(ops["mean"], "op", lambda x, *a, **k: real(x.float() if x.device.type == "tpu" else x, *a, **k))
    assert coverage._run_task(ops, "mean", "float32", "errors", False, lambda m: None)["status"] == "mismatch"

    def wrong_type(x, *a, **k):
        if x.device.type == "tpu":
            raise ValueError("mean(): could not infer output dtype")
        return real(x, *a, **k)
    monkeypatch.setattr(ops["mean"], "op", wrong_type)
    assert coverage._run_task(ops, "mean", "float32", "errors", False, lambda m: None)["status"] == "mismatch"
