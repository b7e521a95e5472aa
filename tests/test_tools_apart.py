"""The test machinery (the fuzzer, the sweeps) lives in torchtpu_tools, apart
from the runtime: `import torchtpu` loads none of it, and the old commands
(python -m torchtpu.fuzz, python -m torchtpu.coverage) still reach it."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code_or_args):
    args = [sys.executable] + (["-c", code_or_args] if isinstance(code_or_args, str) else code_or_args)
    return subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_import_torchtpu_loads_no_tool():
    r = _run("import sys, torchtpu, torch\n"
             "torch.ones(2, device='tpu').sum().item()\n"
             "print(sorted(m for m in sys.modules if m.startswith('torchtpu_tools') or m in "
             "('torchtpu.fuzz', 'torchtpu.coverage', 'torchtpu._models_sweep')))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_old_commands_forward_to_the_tools():
    fuzz = _run(["-m", "torchtpu.fuzz", "--help"])
    assert fuzz.returncode == 0, fuzz.stderr
    assert "usage: python -m torchtpu.fuzz" in fuzz.stdout and "--replay" in fuzz.stdout
    cov = _run(["-m", "torchtpu.coverage", "--help"])
    assert cov.returncode == 0, cov.stderr
    assert "usage: python -m torchtpu.coverage" in cov.stdout and "{ops,errors,modules,models,report}" in cov.stdout
    models = _run(["-m", "torchtpu.coverage", "models", "--help"])
    assert models.returncode == 0, models.stderr
    assert "usage: python -m torchtpu.coverage models" in models.stdout
