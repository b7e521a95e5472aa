#!/usr/bin/env bash
# TorchTitan's environment for tests/test_torchtitan.py: a virtual
# environment that sees the system's torch and torchtpu and adds TorchTitan
# 0.2.2 (the release that runs on torch 2.13: 0.3.0 calls
# torch.distributed.set_timeout, which 2.13 lacks) with its dependencies, and
# triton, which TorchTitan imports unconditionally. Made once, kept in
# .venv-titan (gitignored); the system's packages stay as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
V=.venv-titan
if [ -x "$V/bin/python" ] && "$V/bin/python" -c 'import torchtitan, triton' 2>/dev/null; then exit 0; fi
rm -rf "$V"
"$PY" -m venv --system-site-packages "$V"
"$V/bin/pip" install -q torchtitan==0.2.2 triton==3.9.0
