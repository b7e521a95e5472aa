"""Worker (run by tests/test_invisible.py, twice: once with PyTorch's
device-backend autoload off, once with torchtpu installed and autoloaded):
CPU-only workloads that never name tpu, each result written as plain data
(values by their bytes, dtypes, shapes, strides, exceptions by type and
message) to the JSON file argv[1]. The test requires the two files to be
equal: torchtpu installed must change nothing for code that does not use
tpu.

Workloads: a slice of PyTorch's OpInfo samples and error inputs on the CPU,
the same samples under FakeTensorMode and on meta tensors, probes of the ops
whose meta functions torchtpu repairs for tpu (on the CPU, meta and fake),
torch.compile with Inductor on the CPU, torch.export, a 2-process gloo DDP
step through init_process_group() with no backend (with all_gather_object
and a CPU DeviceMesh), and a DataLoader with forked workers."""
import hashlib
import json
import os
import socket
import subprocess
import sys
import traceback

import torch

OUT = {}

# The OpInfo slice: common ops, and every op whose meta function torchtpu
# repairs for tpu (torchtpu/_meta.py) or defines (csrc/torch/meta.cpp).
OPS = ["add", "mul", "div", "matmul", "sum", "mean", "softmax", "index_select", "gather", "where", "clamp",
       "topk", "sort", "cat", "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.nll_loss",
       "nn.functional.cross_entropy", "nn.functional.multi_margin_loss", "nn.functional.multilabel_margin_loss",
       "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d", "cumsum", "cumprod",
       "multinomial", "geqrf"]
SAMPLES = 6


def tensor_record(t):
    if t.device.type == "meta" or type(t).__name__ == "FakeTensor":
        return {"meta": [str(t.dtype), list(t.shape), list(t.stride()), t.storage_offset(), str(t.device)]}
    data = t.detach().resolve_conj().resolve_neg().contiguous()
    digest = hashlib.sha1(data.view(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b"").hexdigest()
    return {"cpu": [str(t.dtype), list(t.shape), list(t.stride()), t.storage_offset(), digest]}


def record(value):
    if isinstance(value, torch.Tensor):
        return tensor_record(value)
    if isinstance(value, (list, tuple)):
        return [record(v) for v in value]
    if isinstance(value, dict):
        return {str(k): record(v) for k, v in value.items()}
    if isinstance(value, (int, float, bool, str)) or value is None:
        return repr(value)
    return type(value).__name__


def message(e):
    """|e|'s message. The dispatcher's refusal of an op a device has no
    kernel for lists the devices that have one, tpu among them once torchtpu
    registers its kernels: that list is left out."""
    text = str(e)
    cut = text.find(" is only available for these backends: [")
    return text if cut < 0 else text[:cut]


def outcome(fn):
    """fn()'s result as data, or its exception's type and message."""
    try:
        return {"ok": record(fn())}
    except Exception as e:  # noqa: BLE001 - the exception is the result
        return {"raises": [type(e).__name__, message(e)]}


def on(device, value):
    return torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), value)


def opinfo_slice():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.common_methods_invocations import op_db
    infos = {}
    for op in op_db:  # each op's first OpInfo (div's are all variants)
        if op.name in OPS:
            infos.setdefault(op.name, op)
    assert sorted(infos) == sorted(OPS), sorted(set(OPS) - set(infos))
    for name in OPS:
        op = infos[name]
        dtype = torch.float32 if torch.float32 in op.supported_dtypes("cpu") else torch.float64
        torch.manual_seed(0)
        samples = list(op.sample_inputs("cpu", dtype))[:SAMPLES]
        for i, s in enumerate(samples):
            args = (s.input, *s.args)

            def cpu():
                torch.manual_seed(1)
                return op(*args, **s.kwargs)

            def meta():
                return op(*on("meta", args), **on("meta", s.kwargs))

            def fake():
                with FakeTensorMode() as mode:
                    return op(*torch.utils._pytree.tree_map_only(torch.Tensor, mode.from_tensor, args),
                              **torch.utils._pytree.tree_map_only(torch.Tensor, mode.from_tensor, s.kwargs))

            OUT[f"opinfo/{name}/{i}"] = [outcome(cpu), outcome(meta), outcome(fake)]
        torch.manual_seed(0)
        errors = op.error_inputs("cpu") if op.error_inputs_func is not None else []
        for i, e in enumerate(list(errors)[:SAMPLES]):
            s = e.sample_input
            OUT[f"error/{name}/{i}"] = [outcome(lambda: op(s.input, *s.args, **s.kwargs)),
                                        outcome(lambda: op(*on("meta", (s.input, *s.args)), **on("meta", s.kwargs)))]


def repaired_probes():
    """The calls where tpu's meta functions differ from PyTorch's, on the
    CPU, on meta tensors and under FakeTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    aten = torch.ops.aten
    g = torch.Generator().manual_seed(0)
    x64 = torch.zeros([1] * 64)
    gates = torch.randn(2, 12, generator=g)
    probes = {
        "lstm_cell_no_bias": (aten._thnn_fused_lstm_cell.default, (gates, gates, torch.randn(2, 3, generator=g))),
        "grouped_mm_float32": (aten._grouped_mm.default, (torch.randn(2, 4, 8, generator=g),
                                                          torch.randn(2, 8, 4, generator=g))),
        "fractional_pool_too_large": (aten.fractional_max_pool2d.default,
                                      (torch.randn(1, 4, 4, generator=g), [3, 3], [3, 3], torch.rand(1, 1, 2))),
        "nll_uint8_target": (aten.nll_loss_forward.default,
                             (torch.randn(3, 4, generator=g), torch.tensor([0, 1, 2], dtype=torch.uint8), None, 1,
                              -100)),
        "nll_bad_weight": (aten.nll_loss_forward.default,
                           (torch.randn(3, 4, generator=g), torch.tensor([0, 1, 2]), torch.ones(3), 1, -100)),
        "nll2d_bad_target": (aten.nll_loss2d_forward.default,
                             (torch.randn(2, 3, 4, 4, generator=g), torch.zeros(2, 4, dtype=torch.long), None, 1,
                              -100)),
        "multi_margin_p3": (aten.multi_margin_loss.default, (torch.randn(3, 4, generator=g), torch.tensor([0, 1, 2]),
                                                             3)),
        "multinomial_int": (aten.multinomial.default, (torch.ones(3, dtype=torch.long), 2)),
        "multinomial_3d": (aten.multinomial.default, (torch.ones(2, 2, 2), 1)),
        "max_pool2d_1d": (aten.max_pool2d_with_indices.default, (torch.randn(5, generator=g), [2])),
        "multilabel_one_sample": (aten.multilabel_margin_loss_forward.default,
                                  (torch.randn(4, generator=g), torch.tensor([1, 0, -1, 2]), 0)),
        "cumsum_64_dims": (aten.cumsum.default, (x64, 3)),
        "cumprod_64_dims": (aten.cumprod.default, (x64, 3)),
        "geqrf": (aten.geqrf.default, (torch.randn(4, 3, generator=g),)),
        "gru_cell": (aten._thnn_fused_gru_cell.default, (torch.randn(2, 9, generator=g),
                                                         torch.randn(2, 9, generator=g), torch.randn(2, 3))),
    }
    for name, (op, args) in probes.items():
        def fake():
            with FakeTensorMode() as mode:
                return op(*torch.utils._pytree.tree_map_only(torch.Tensor, mode.from_tensor, args))
        OUT[f"probe/{name}"] = [outcome(lambda: op(*args)), outcome(lambda: op(*on("meta", args))), outcome(fake)]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4 * 3 * 3, 5)

    def forward(self, x, target):
        y = torch.nn.functional.max_pool2d(self.conv(x).relu(), 2)
        logits = self.fc(y.flatten(1)).cumsum(1)
        return logits, torch.nn.functional.cross_entropy(logits, target)


def compiled_and_exported():
    torch.manual_seed(0)
    net, x, target = Net(), torch.randn(2, 3, 8, 8), torch.tensor([1, 4])
    OUT["eager"] = outcome(lambda: net(x, target))
    OUT["compile/inductor"] = outcome(lambda: torch.compile(net, backend="inductor")(x, target))
    OUT["compile/channels_last"] = outcome(
        lambda: torch.compile(net, backend="inductor")(x.to(memory_format=torch.channels_last), target))
    ep = torch.export.export(net, (x, target))
    OUT["export/graph"] = ep.graph_module.code
    OUT["export/run"] = outcome(lambda: ep.module()(x, target))


DDP_WORKER = r"""
import json, os, sys
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
dist.init_process_group()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.arange(8.0).reshape(2, 4) * (dist.get_rank() + 1)
model(x).square().sum().backward()
opt.step()
t = torch.ones(2) * (dist.get_rank() + 1)
dist.all_reduce(t)
objs = [None] * dist.get_world_size()
dist.all_gather_object(objs, {"rank": dist.get_rank()})
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
m = torch.full((1,), float(dist.get_rank()))
dist.all_reduce(m, group=mesh.get_group())
out = {"params": [p.detach().tolist() for p in model.parameters()], "all_reduce": t.tolist(), "objects": objs,
       "mesh_sum": m.item(), "backend": dist.get_backend(),
       "cpu_backend": type(dist.group.WORLD._get_backend(torch.device("cpu"))).__name__,
       # tpu's half of the default group leaves the tpu runtime unstarted
       "tpu_runtime_started": "torchtpu" in sys.modules and sys.modules["torchtpu"]._C._started()}
dist.destroy_process_group()
print("RESULT " + json.dumps(out))
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp(world):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world))
    procs = [subprocess.Popen([sys.executable, "-c", DDP_WORKER], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(world)]
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, err = p.communicate()
        line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
        results.append(json.loads(line[7:]) if line else {"returncode": p.returncode,
                                                          "error": (err.strip().splitlines() or [""])[-1]})
    return results


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([i, i * i], dtype=torch.float32), torch.randint(0, 100, ())


def dataloader():
    loader = torch.utils.data.DataLoader(Squares(), batch_size=3, num_workers=2, multiprocessing_context="fork",
                                         generator=torch.Generator().manual_seed(0))
    OUT["dataloader/fork"] = outcome(lambda: list(loader))


def ddp_steps():
    OUT["ddp/2"] = ddp(2)
    OUT["ddp/1"] = ddp(1)


STEPS = {"opinfo": opinfo_slice, "probes": repaired_probes, "compile": compiled_and_exported,
         "dataloader": dataloader, "ddp": ddp_steps}


def main():
    """argv: the output file, then the steps to run (all when none)."""
    OUT["torchtpu_loaded"] = "torchtpu" in sys.modules  # not compared: the test checks it differs
    for name in sys.argv[2:] or STEPS:
        try:
            STEPS[name]()
        except Exception:  # noqa: BLE001 - a crash is a result too, and the other steps still run
            OUT[f"crash/{name}"] = traceback.format_exc().splitlines()[-1]
    with open(sys.argv[1], "w") as f:
        json.dump(OUT, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
