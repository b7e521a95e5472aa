"""The test machinery (the fuzzer, the sweeps) lives in torchtpu_tools, apart
from the runtime: `import torchtpu` loads none of it, and the old commands
(python -m torchtpu.fuzz, python -m torchtpu.coverage) still reach it."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_import_torchtpu_loads_no_tool():
    r = _run("import sys, torchtpu, torch\n"
             "torch.ones(2, device='tpu').sum().item()\n"
             "print(sorted(m for m in sys.modules if m.startswith('torchtpu_tools') or m in "
             "('torchtpu.fuzz', 'torchtpu.coverage', 'torchtpu._models_sweep')))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_old_commands_forward_to_the_tools():
    # python -m torchtpu.fuzz --help, ... run as runpy runs them, in one process.
    r = _run("import runpy, sys\n"
             "for argv in (['torchtpu.fuzz', '--help'], ['torchtpu.coverage', '--help'],\n"
             "             ['torchtpu.coverage', 'models', '--help']):\n"
             "    sys.argv = argv\n"
             "    try:\n"
             "        runpy.run_module(argv[0], run_name='__main__', alter_sys=True)\n"
             "    except SystemExit as e:\n"
             "        assert e.code == 0, e.code\n"
             "    print('=====')\n")
    assert r.returncode == 0, r.stderr
    fuzz, cov, models, _ = r.stdout.split("=====\n")
    assert "usage: python -m torchtpu.fuzz" in fuzz and "--replay" in fuzz
    assert "usage: python -m torchtpu.coverage" in cov and "{ops,errors,modules,models,report}" in cov
    assert "usage: python -m torchtpu.coverage models" in models and "--only" in models
