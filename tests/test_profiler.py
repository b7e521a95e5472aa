"""torch.profiler on tpu (csrc/torch/profiler.cpp over base/profile.h): with
activities CPU and PrivateUse1, every program is a kernel on the TPU row named
by its program, linked to the ATen op that launched it and timed inside it;
the host shows compiles by kind (miss, disk load, hit) and launches; memory
events balance; record_function ranges, key_averages' device columns and the
Chrome trace come out as they do for CUDA."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

import torchtpu  # noqa: F401

# The events of strict eager: one kernel per op's program. Fused eager's (one
# per cut) are test_fused_eager_cut_and_program's.
pytestmark = pytest.mark.strict_eager

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
PRIVATEUSE1_DEVICE_TYPE = 20  # c10::DeviceType::PrivateUse1 in Chrome trace args


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(48, 40), torch.nn.ReLU(), torch.nn.Linear(40, 6)).to("tpu")


def _step(model, x):
    with record_function("tpu_test_step"):
        out = model(x)
        loss = (out @ out.t()).relu().sum()
        loss.backward()
    return loss.item()


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """One profiled training step (after a warm-up step), its Chrome trace parsed."""
    with torchtpu.eager_mode("strict"):  # module-scoped: before the strict_eager marker's fixture
        return _traced(tmp_path_factory)


def _traced(tmp_path_factory):
    model = _model()
    x = torch.randn(12, 48, device="tpu")
    _step(model, x)
    model.zero_grad(set_to_none=True)
    before = torch.tpu.memory_allocated()
    with profile(activities=ACTIVITIES, profile_memory=True) as prof:
        loss = _step(model, x)
        kept = torch.ones(1000, device="tpu")  # alive after the profile: the balance is not zero
    after = torch.tpu.memory_allocated()
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        trace = json.load(f)
    ref = _model().cpu()
    ref_loss = _step(ref, x.cpu())
    return dict(prof=prof, trace=trace["traceEvents"], meta=trace, before=before, after=after, kept=kept, loss=loss,
                ref_loss=ref_loss)


def _kernels(events):
    return [e for e in events if e.get("cat") == "kernel"]


def _cpu_ops(events):
    return {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}


def test_results_unchanged(traced):
    torch.testing.assert_close(traced["loss"], traced["ref_loss"], rtol=1e-4, atol=1e-4)


def test_kernels_on_the_device_row_named_by_program(traced):
    events = traced["trace"]
    kernels = _kernels(events)
    names = {k["name"] for k in kernels}
    assert {"aten::addmm (program)", "aten::mm (program)", "aten::relu (program)"} <= names, names
    tpu_pids = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
                and e["args"]["name"] == "TPU 0"}
    assert tpu_pids == {0}
    assert all(k["pid"] == 0 and k["args"]["device"] == 0 for k in kernels)
    # Every program launched in the step shows up: the backward's too.
    assert sum(k["name"] == "aten::mm (program)" for k in kernels) >= 3


def test_kernels_linked_and_ordered(traced):
    events = traced["trace"]
    ops = _cpu_ops(events)
    launches = {e["id"]: e for e in events if e.get("cat") == "ac2g" and e.get("ph") == "s"}
    arrivals = {e["id"]: e for e in events if e.get("cat") == "ac2g" and e.get("ph") == "f"}
    executes = [e for e in events if e.get("name") == "tpu::execute"]
    kernels = _kernels(events)
    assert len(executes) == len(kernels) == len(launches) == len(arrivals) > 0
    for k in kernels:
        op = ops[k["args"]["External id"]]  # the ATen op that launched it
        assert k["args"]["program"] == k["name"][: -len(" (program)")]
        assert k["dur"] >= 0
        assert k["ts"] >= op["ts"] - 1e-3  # µs, rounded
        # The program of the op, overload named (aten::fill_.Scalar), or of a decomposed op inside it.
        assert k["args"]["program"].split(".")[0] == op["name"] or op["name"] in ("aten::linear", "aten::matmul")
    for e in executes:
        op = ops[e["args"]["External id"]]
        assert op["ts"] - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= op["ts"] + op["dur"] + 1e-3
        assert e["tid"] == op["tid"]
    # Each launch's arrow starts at its execute event and ends at its program.
    starts = {(e["tid"], e["ts"]) for e in executes}
    programs = {(k["pid"], k["ts"]) for k in kernels}
    for flow_id, s in launches.items():
        f = arrivals[flow_id]
        assert (s["tid"], s["ts"]) in starts and (f["pid"], f["ts"]) in programs


def test_key_averages_device_time(traced):
    rows = {r.key: r for r in traced["prof"].key_averages()}
    for op in ("aten::addmm", "aten::mm"):
        assert rows[op].device_time_total > 0, op
        assert rows[op].self_device_time_total > 0, op
    assert rows["aten::linear"].device_time_total > 0
    # Host events are not ops: no device time of their own.
    assert rows["tpu::execute"].device_time_total == 0
    assert rows["tpu::compile (hit)"].count > 0 and rows["tpu::compile (hit)"].device_time_total == 0
    table = traced["prof"].key_averages().table(sort_by="self_device_time_total")
    assert "Self TPU" in table and "TPU Mem" in table


def test_record_function_range(traced):
    ranges = [e for e in traced["trace"] if e.get("cat") == "user_annotation" and e["name"] == "tpu_test_step"]
    assert len(ranges) == 1
    r = ranges[0]
    for k in _kernels(traced["trace"]):
        assert r["ts"] - 1e-3 <= k["ts"]
    rows = {row.key: row for row in traced["prof"].key_averages()}
    assert rows["tpu_test_step"].device_time_total > 0


def test_memory_events_balance(traced):
    mem = [e for e in traced["trace"] if e.get("name") == "[memory]"
           and e["args"].get("Device Type") == PRIVATEUSE1_DEVICE_TYPE]
    assert mem, "no tpu memory events"
    allocs = sum(e["args"]["Bytes"] for e in mem if e["args"]["Bytes"] > 0)
    frees = -sum(e["args"]["Bytes"] for e in mem if e["args"]["Bytes"] < 0)
    assert allocs > 0 and frees > 0
    assert allocs - frees == traced["after"] - traced["before"] >= 4000
    last = max(mem, key=lambda e: e["ts"])
    assert last["args"]["Total Allocated"] == traced["after"]
    assert all(e["args"]["Device Id"] == 0 for e in mem)


def test_profiler_off_records_nothing():
    """A profile with CPU alone starts no tpu session: no kernels, and runs
    outside any profile are not kept for the next one."""
    model = _model()
    x = torch.randn(12, 48, device="tpu")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _step(model, x)
    assert not [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    _step(model, x)
    y = torch.ones(3, device="tpu")
    with profile(activities=ACTIVITIES) as prof:
        y.add(1).cpu()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    assert names == ["aten::add.Tensor (program)"], names


_COMPILE_SCRIPT = textwrap.dedent("""
    import json, sys, torch, torchtpu
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
    def run():
        x = torch.arange(30, dtype=torch.float32, device="tpu").reshape(5, 6)
        return (x.sin() @ x.t()).cpu()
    kinds = []
    for _ in range(2):
        with profile(activities=acts) as prof:
            run()
        ev = prof.profiler.kineto_results.events()
        kinds.append(sorted(e.name() for e in ev if e.name().startswith("tpu::compile")))
    print(json.dumps(kinds))
""")


def test_compile_kinds_cold_disk_and_warm(tmp_path):
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for _ in range(2):  # a fresh cache directory, then the same one in a new process
        out = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], env=env, capture_output=True, text=True,
                             timeout=240)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    (cold, warm), (loaded, warm2) = runs
    assert cold and all(k == "tpu::compile (miss)" for k in cold), cold
    assert loaded == ["tpu::compile (disk load)"] * len(cold), loaded
    assert warm == warm2 == ["tpu::compile (hit)"] * len(cold), (warm, warm2)


def test_trace_metadata_names_the_device_timing(traced):
    # The CPU plugin exports no PJRT profiler extension: device times are launch to completion.
    assert traced["meta"]["tpu_device_timing"] == "program launch to completion event"
    assert traced["meta"]["tpu_pjrt_profiler_extension"] == "absent"


def test_fused_eager_cut_and_program(tmp_path):
    """In fused mode a cut is an instant event with its reason and op count,
    and the run of recorded ops is one program on the device row."""
    x = torch.arange(8, dtype=torch.float32, device="tpu")
    with torchtpu.eager_mode("fused"):
        (x * 2).cpu()  # warm the one-op and fused programs
        with profile(activities=ACTIVITIES) as prof:
            y = x * 2
            y = y + 1
            y = y.relu()
            out = y.cpu()
    torch.testing.assert_close(out, (torch.arange(8.0) * 2 + 1).relu())
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    cuts = [e for e in events if e.get("name") == "tpu::fused eager cut"]
    assert [c["args"]["reason"] for c in cuts] == ["host_read, 3 ops"], cuts
    kernels = _kernels(events)
    assert len(kernels) == 1, [k["name"] for k in kernels]
    assert cuts[0]["ts"] <= kernels[0]["ts"] + 1e-3
