#!/usr/bin/env bash
# Installs everything torchtpu needs on a fresh machine (compiler toolchain,
# the PyTorch CPU wheel, XLA's CPU PJRT plugin, test tools, Hugging Face
# transformers, accelerate and peft for the tests that build models from
# configs and train them through those libraries) and builds
# the extension in place. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

missing=()
command -v g++ >/dev/null || missing+=(g++)
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}"
fi

# PyTorch 2.11-2.15 works; without one, take the 2.13 CPU wheel (any other
# request can pull a multi-GB CUDA build).
if ! TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY -c 'import torch, sys; v = tuple(map(int, torch.__version__.split("+")[0].split(".")[:2])); sys.exit(not (2, 11) <= v <= (2, 15))' 2>/dev/null; then
  $PY -m pip install -q torch==2.13.0
fi
$PY -m pip install -q xla-cpu-pjrt numpy pytest expecttest transformers==5.24.0 accelerate==1.16.0 peft==0.21.2
# --no-build-isolation: build against the torch installed above.
$PY -m pip install -q --no-build-isolation -e .
