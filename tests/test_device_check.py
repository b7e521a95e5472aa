"""scripts/device_check.sh on the CPU plugin (--quick --no-build: small
sizes, the extension already built): every phase passes and its outputs hold
what docs/device-check.md says; a spent budget is reported, not hidden."""
import gzip
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "device_check.sh")
PHASES = ["environment", "info", "matmul", "gpt", "eager", "trace", "demo", "suite"]


def _run(out, budget, *args):
    env = dict(os.environ, OUT=str(out), TORCHTPU_PLATFORM="cpu", DEVICE_CHECK_BUDGET=str(budget))
    env.pop("TORCHTPU_EAGER", None)
    return subprocess.run(["bash", SCRIPT, *args], env=env, capture_output=True, text=True, timeout=budget + 120)


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    out = tmp_path_factory.mktemp("device_check")
    proc = _run(out, 1200, "--quick", "--no-build")
    with open(out / "results.json") as f:
        results = json.load(f)
    return dict(proc=proc, out=out, results=results)


def test_every_phase_passes(checked):
    proc, results = checked["proc"], checked["results"]
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "all phases passed" in proc.stdout
    assert [p["name"] for p in results["phases"]] == PHASES
    assert all(p["rc"] == 0 for p in results["phases"]), results["phases"]
    assert results["platform"] == "cpu" and results["torch"]
    assert sorted(os.listdir(checked["out"])) == ["device_check.log", "results.json", "summary.md", "trace.json.gz"]


def test_log_holds_info_demo_and_suite(checked):
    log = (checked["out"] / "device_check.log").read_text()
    assert "platform:          cpu" in log and "PJRT API version:" in log  # python -m torchtpu info
    assert "tpu loss" in log and "CPU fallbacks: none" in log  # the demo
    assert " passed" in log and " failed" not in log  # the suite's slice


def test_matmul_beside_the_reference(checked):
    m = checked["results"]["matmul"]
    assert m["ref_device"] == "cpu" and m["n"] == 512
    for dtype, tol in (("bfloat16", 2 ** -6), ("float32", 1e-5)):
        row = m[dtype]
        assert row["tpu"] > 0 and row["ref"] > 0
        assert row["ratio"] == pytest.approx(row["tpu"] / row["ref"])
        # The same inputs: the products agree within the dtype's rounding.
        assert row["max_abs_diff"] <= tol * row["max_abs_ref"], row


def test_gpt_steps_beside_the_reference(checked):
    g = checked["results"]["gpt"]
    assert g["ref_device"] == "cpu" and g["platform"] == "cpu" and not g["fallbacks"]
    assert set(g["systems"]) == {"torchtpu compiled", "torchtpu eager", "torch cpu eager"}
    for s in g["systems"].values():
        assert s["forward_ms"] > 0 and s["step_ms"] > 0 and s["first_step_ms"] > 0
    s = g["systems"]
    assert g["ratios"]["torchtpu eager step / torch cpu eager step"] == pytest.approx(
        s["torchtpu eager"]["step_ms"] / s["torch cpu eager"]["step_ms"])


def test_eager_host_time_per_op(checked):
    e = checked["results"]["eager"]
    for case in ("add8", "mm256"):
        assert e[case]["tpu_us"] > 0 and e[case]["ref_us"] > 0
    assert e["compile_ms"] > 0


def test_trace_has_device_events(checked):
    t = checked["results"]["trace"]
    assert t["device_events"] > 0 and t["profiler_extension"] == "absent" and not t["torchtpu_stats_fallbacks"]
    free, total = t["memory_info"]
    assert 0 < free <= total
    with gzip.open(checked["out"] / "trace.json.gz") as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert len(kernels) == t["device_events"]
    assert any(k["name"] == "aten::addmm (program)" for k in kernels)
    assert any(e.get("name") == "step 2" for e in events)


def test_summary(checked):
    summary = (checked["out"] / "summary.md").read_text()
    for line in ("| suite | ok |", "| bfloat16 |", "| torchtpu compiled |", "| add8 |", "Profiler trace",
                 "- bf16 product at least 0.90x torch cpu's: "):
        assert line in summary, summary


def test_spent_budget_is_a_failure(tmp_path):
    proc = _run(tmp_path, 15, "--quick", "--no-build")
    assert proc.returncode == 1
    assert "SOME PHASES FAILED" in proc.stdout
    results = json.loads((tmp_path / "results.json").read_text())
    assert [p["rc"] for p in results["phases"]] == [-1] * len(PHASES)
    assert "| matmul | not run (the budget was spent) |" in (tmp_path / "summary.md").read_text()


def test_unknown_argument():
    proc = subprocess.run(["bash", SCRIPT, "--fast"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown argument '--fast'" in proc.stderr
