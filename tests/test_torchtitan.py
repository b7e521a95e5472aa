"""TorchTitan's trainer, unpatched, on tpu (`torchrun -m torchtitan.train`,
its Llama 3 debug model, 2 and 4 processes, the CPU plugin): the losses of
every step equal those of the same job on the CPU over gloo within 1e-5
(relative; bf16 parameters within BF16_RTOL), both starting from one seed
checkpoint (the devices' random streams differ); a DCP checkpoint written
every 3 steps resumes on tpu with the uninterrupted run's losses and on
the CPU; a process killed mid-run makes its peers exit with tpu_dist's
error. TorchTitan lives in the integrations' virtual environment
(scripts/integrations_env.sh: TorchTitan 0.2.2 and triton, which it imports);
only the CPU reference is adapted to run (tests/titan/cpu_reference.py),
the tpu run gets TorchTitan's documented options alone."""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.environ.get("TORCHTPU_INTEGRATIONS_VENV", os.path.join(ROOT, ".venv-integrations"))
VENV_PYTHON = os.path.join(VENV, "bin", "python")
STEPS = 5
# The job: the debug model at a short sequence, float32 parameters (the
# default bf16 compares two bf16 matmul orders as well as the backends:
# BF16 overrides it in the one case that keeps TorchTitan's default).
JOB = ["--model.name", "llama3", "--model.flavor", "debugmodel", "--training.seq-len", "64",
       "--training.local-batch-size", "2", "--training.mixed-precision-param", "float32",
       "--metrics.log-freq", "1", "--checkpoint.enable", "--checkpoint.interval", "1000"]

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(VENV, ".complete")),
                                reason=f"no TorchTitan environment at {VENV} (scripts/integrations_env.sh)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cwd, nproc, args, timeout, reference=False, env=None):
    """torchrun of TorchTitan's trainer (or of the CPU reference) in |cwd|;
    returns the output, failing on a non-zero exit or a hang."""
    target = [os.path.join(ROOT, "tests", "titan", "cpu_reference.py")] if reference else ["-m", "torchtitan.train"]
    cmd = [VENV_PYTHON, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", f"--master-port={free_port()}",
           *target, *args]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
               **(env or {}))
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        pytest.fail(f"{' '.join(args)} did not finish in {timeout} s:\n{out[-4000:]}")
    assert p.returncode == 0, out[-6000:]
    return out


def losses(out):
    """Rank 0's loss per step, from TorchTitan's log lines."""
    found = {}
    for step, loss in re.findall(r"step:\s+(\d+)\s+(?:\x1b\[\d+m)?loss:\s+([0-9.]+)", out):
        found.setdefault(int(step), float(loss))
    return [found[s] for s in sorted(found)]


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """A directory with the tokenizer and c4_test data set TorchTitan's
    debug config reads, and one seed checkpoint (step 0), made once from
    a fixed seed (every run of the suite compares the same numbers)."""
    d = tmp_path_factory.mktemp("titan")
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "torchtitan", "make_assets.py"), str(d)],
                   check=True, timeout=120)
    run(d, 1, JOB + ["--checkpoint.create-seed-checkpoint", "--parallelism.data-parallel-shard-degree", "1",
                     "--debug.seed", "0", "--job.dump-folder", "seed"], 300, reference=True)
    return d


def job(assets, name, nproc, extra, reference, steps=STEPS, seed=True, env=None):
    """The job from the seed checkpoint (or, seed=False, from the latest
    checkpoint already in its dump folder) in a dump folder of its own; its
    whole output is kept beside it (<name>.log, runs appended)."""
    if seed:
        shutil.copytree(assets / "seed" / "checkpoint", assets / name / "checkpoint")
    out = run(assets, nproc, JOB + ["--training.steps", str(STEPS), "--job.dump-folder", name, *extra], 500,
              reference=reference, env=env)
    with open(assets / f"{name}.log", "a") as f:
        f.write(out)
    got = losses(out)
    assert len(got) == steps, out[-6000:]
    return got, out


@pytest.fixture(scope="module")
def references(assets):
    """The CPU job's losses per parallelism (compiling changes no math: a
    compiled tpu job is held to the eager CPU job)."""
    cache = {}

    def get(parallel, nproc=2):
        key = tuple(parallel)
        if key not in cache:
            cache[key] = job(assets, "cpu-" + slug(parallel), nproc, parallel, reference=True)[0]
        return cache[key]
    return get


def slug(args):
    return "-".join(a.strip("-").replace(".", "_") for a in args)


FSDP2 = ["--parallelism.data-parallel-shard-degree", "2"]
FSDP_TP = FSDP2 + ["--parallelism.tensor-parallel-degree", "2"]
HSDP = ["--parallelism.data-parallel-replicate-degree", "2", "--parallelism.data-parallel-shard-degree", "2"]
# TorchTitan's default precision: FSDP2 gathers bf16 parameters (float32
# ones stay in the optimizer) and reduce-scatters gradients in float32.
BF16 = ["--training.mixed-precision-param", "bfloat16", "--training.mixed-precision-reduce", "float32"]
COMPILE = ["--compile.enable", "--compile.backend", "tpu"]
FULL_AC = ["--activation-checkpoint.mode", "full"]
# TorchTitan's default is layer-wise selective checkpointing (every 2nd
# block); "op" is per-op selective (saves matmuls, recomputes the rest).
OP_SAC = ["--activation-checkpoint.mode", "selective", "--activation-checkpoint.selective-ac-option", "op"]
# bf16 rounds float32 sums, and the devices order them differently: an
# element near a rounding boundary lands one bf16 ulp apart, and the losses
# drift by up to 3.3e-5 relative (measured: tpu against the CPU, 5 steps, 4
# random seed checkpoints). Float32 parameters move them 1.2e-4 and more by
# step 5, so the tolerance still tells bf16 compute from float32 compute.
BF16_RTOL = 8e-5


@pytest.mark.parametrize("parallel, nproc, extra, applied", [
    (FSDP2, 2, COMPILE, "Compiling each TransformerBlock with torch.compile"),
    (FSDP_TP, 4, FULL_AC, "Applied full activation checkpointing")], ids=["fsdp2-compiled", "fsdp2xtp2-full-ac"])
def test_losses_equal_cpu(assets, references, parallel, nproc, extra, applied):
    """The tpu job with TorchTitan's defaults otherwise: its fused AdamW,
    selective activation checkpointing (full on the 2x2 mesh; recomputing
    changes no math, so the CPU job keeps the default), and FSDP2's
    PREMUL_SUM reduction. FSDP 2 x TP 2 is 4 processes on a 2x2 mesh."""
    want = references(parallel, nproc)
    got, out = job(assets, "tpu-" + slug(parallel + extra), nproc, parallel + extra, reference=False)
    assert "TPU capacity:" in out, out[-3000:]  # TorchTitan chose the device itself
    assert applied in out, out[-3000:]
    assert_losses_equal(got, want)


def assert_losses_equal(got, want, rtol=1e-5):
    for step, (g, w) in enumerate(zip(got, want), 1):
        assert abs(g - w) <= rtol * abs(w), f"step {step}: tpu {got} cpu {want}"


def test_fsdp2_checkpoint_resume(assets, references):
    """FSDP2 with all of TorchTitan's defaults (bf16 parameters with float32
    reduction, fused AdamW, layer-wise selective activation checkpointing),
    saving a DCP checkpoint every 3 steps: its losses equal the CPU job's
    within BF16_RTOL; resumed on tpu from step 3, steps 4-5 equal the
    uninterrupted run's (1e-5); the tpu's step-3 checkpoint resumed by the
    CPU job continues it (steps 4-5 within BF16_RTOL)."""
    want = references(FSDP2 + BF16)
    every3 = FSDP2 + BF16 + ["--checkpoint.interval", "3"]
    got, out = job(assets, "tpu-ckpt", 2, every3, reference=False, env={"TORCHTPU_LOG": "compiles"})
    assert "TPU capacity:" in out, out[-3000:]
    assert "Mixed precision training is handled by fully_shard" in out, out[-3000:]
    assert "Applied selective activation checkpointing" in out, out[-3000:]
    assert "compiled aten::_fused_adamw_" in out or "loaded aten::_fused_adamw_" in out, out[-3000:]
    assert_losses_equal(got, want, BF16_RTOL)
    shutil.rmtree(assets / "tpu-ckpt" / "checkpoint" / "step-5")
    shutil.copytree(assets / "tpu-ckpt", assets / "cpu-from-tpu-ckpt")
    resumed, out = job(assets, "tpu-ckpt", 2, every3, reference=False, steps=2, seed=False)
    assert "checkpoint/step-3" in out, out[-3000:]
    assert_losses_equal(resumed, got[3:])
    on_cpu, out = job(assets, "cpu-from-tpu-ckpt", 2, every3, reference=True, steps=2, seed=False)
    assert "checkpoint/step-3" in out, out[-3000:]
    assert_losses_equal(on_cpu, got[3:], BF16_RTOL)


def test_hsdp_then_killed_process_fails_its_peers(assets, references):
    """HSDP (2 replicas of FSDP over 2) on four ranks started by hand (no
    torchrun agent to end the survivors), with per-op selective activation
    checkpointing: steps 1-5 equal the CPU HSDP job's; then rank 1 is
    killed and every other rank, in or before its next collective, exits
    with tpu_dist's error (gloo's "Connection reset/closed by peer", from
    rank 1 or from a rank that exited) instead of hanging. The group's
    timeout is set past the wait, so the error is the dead peer's, not a
    timeout. Both jobs schedule the learning rate for 1000 steps (5 of
    warmup, as the 5-step jobs have), as the tpu one runs until stopped."""
    schedule = ["--lr-scheduler.warmup-steps", "5", "--lr-scheduler.total-steps", "1000"]
    want = references(HSDP + schedule, 4)
    name, nproc = "tpu-hsdp-killed", 4
    shutil.copytree(assets / "seed" / "checkpoint", assets / name / "checkpoint")
    port = free_port()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
               WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    args = JOB + HSDP + schedule + OP_SAC + ["--training.steps", "1000", "--job.dump-folder", name,
                                             "--comm.init-timeout-seconds", "600",
                                             "--comm.train-timeout-seconds", "600"]
    logs = [assets / f"{name}-{rank}.log" for rank in range(nproc)]
    files = [open(log, "w+") for log in logs]
    procs = [subprocess.Popen([VENV_PYTHON, "-m", "torchtitan.train", *args], cwd=assets, stdout=files[rank],
                              stderr=subprocess.STDOUT, env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)),
                              start_new_session=True) for rank in range(nproc)]
    try:
        deadline = time.monotonic() + 400
        while len(losses(logs[0].read_text())) < STEPS:
            assert all(p.poll() is None for p in procs), logs[0].read_text()[-4000:]
            assert time.monotonic() < deadline, f"step {STEPS} not reached"
            time.sleep(0.2)
        out = logs[0].read_text()
        assert "Applied selective activation checkpointing" in out, out[-3000:]
        assert_losses_equal(losses(out)[:STEPS], want)
        procs[1].kill()
        for rank in (0, 2, 3):
            try:
                rc = procs[rank].wait(timeout=120)
            except subprocess.TimeoutExpired:
                pytest.fail(f"rank {rank} still runs 120 s after rank 1 was killed:\n"
                            + logs[rank].read_text()[-4000:])
            out = logs[rank].read_text()
            assert rc != 0, out[-4000:]
            assert re.search(r"Connection (reset|closed) by peer", out), out[-4000:]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for f in files:
            f.close()
