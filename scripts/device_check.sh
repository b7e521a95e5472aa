#!/usr/bin/env bash
# The device check: on a fresh machine with an accelerator, builds torchtpu
# against the torch installed there, selects the PJRT plugin
# (TORCHTPU_PLATFORM, default cuda) and, phase by phase, prints
# `python -m torchtpu info`, runs a platform-generic slice of the test suite,
# trains the demo, measures torchtpu beside torch on the reference device
# (torch's CUDA on cuda, its CPU otherwise: matrix products, the bench GPT's
# steps, eager host time per op) and collects a torch.profiler trace. Results
# go to $OUT (a new temporary folder when unset): device_check.log,
# results.json, summary.md, trace.json.gz. docs/device-check.md has the rest.
#
#   scripts/device_check.sh [--quick] [--no-build]
#
#   --quick     small sizes and a small suite slice (the CPU plugin's run in
#               the test suite, tests/test_device_check.py)
#   --no-build  use the extension already built in torchtpu/
#
# A phase that fails is recorded and the next one runs; the exit status is 1
# when any phase failed or did not run. Each phase has a time limit, and all
# share a budget (DEVICE_CHECK_BUDGET seconds, default 540: one command of a
# device lease runs 600 at most): a phase gets at most what is left of it,
# and the summary is written before it runs out.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
quick=0
build=1
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --no-build) build=0 ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "device_check.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done
export TORCHTPU_PLATFORM=${TORCHTPU_PLATFORM:-cuda}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d -t torchtpu-device-check.XXXXXX)}
mkdir -p "$OUT"
log="$OUT/device_check.log"
: >"$log"
phases="$OUT/.phases"
: >"$phases"
budget=${DEVICE_CHECK_BUDGET:-540}
failed=0
quick_flag=(); [ $quick = 1 ] && quick_flag=(--quick)
t_start=$SECONDS

# phase NAME LIMIT_SECONDS COMMAND...: runs it within its limit and the
# budget's rest, output to the log and the terminal, and records its exit
# status (-1: not run, the budget spent; 124: stopped at its limit) and seconds.
phase() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS rc left=$((budget - (SECONDS - t_start) - 20))
  if [ $left -lt 10 ]; then
    echo "=== $name: not run, the budget of $budget s is spent" | tee -a "$log"
    echo "$name -1 0" >>"$phases"
    failed=1
    return 0
  fi
  [ $limit -gt $left ] && limit=$left
  echo "=== $name (limit $limit s): $*" | tee -a "$log"
  timeout -k 10 $limit "$@" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$log"
  echo "$name $rc $((SECONDS - t0))" >>"$phases"
  [ "$rc" = 0 ] || failed=1
  return 0
}

env_report() {
  echo "platform setting: $TORCHTPU_PLATFORM; out: $OUT; commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  uname -srm
  command -v nvidia-smi >/dev/null && nvidia-smi -L
  "$PY" - <<'PYEOF'
import sys, torch
print(f"python {sys.version.split()[0]} at {sys.executable}; torch {torch.__version__}, "
      f"CUDA {torch.version.cuda}, cuda available: {torch.cuda.is_available()}")
if torch.cuda.is_available():
    print("cuda device:", torch.cuda.get_device_name(0))
from torchtpu import _plugin, settings
platform, path, error = _plugin.resolve(settings.platform)
print(f"plugin for '{platform}': {path or error}")
sys.exit(1 if error else 0)
PYEOF
}
export -f env_report
export PY

suite=(tests/test_semantics.py tests/test_elementwise.py tests/test_reduce.py tests/test_index.py
       tests/test_training.py tests/test_compile.py tests/test_fused_eager.py tests/test_amp.py)
[ $quick = 1 ] && suite=(tests/test_semantics.py -k TestViewWrites)

phase environment 60 bash -c env_report
if [ $build = 1 ]; then
  phase build 420 env TORCHTPU_BUILD_JOBS="${TORCHTPU_BUILD_JOBS:-$(nproc)}" "$PY" setup.py build_ext --inplace
fi
phase info 120 "$PY" -m torchtpu info
phase matmul 120 "$PY" bench/device_check.py matmul --out "$OUT" "${quick_flag[@]}"
phase gpt 240 "$PY" bench/device_check.py gpt --out "$OUT" "${quick_flag[@]}"
phase eager 90 "$PY" bench/device_check.py eager --out "$OUT" "${quick_flag[@]}"
phase trace 90 "$PY" bench/device_check.py trace --out "$OUT" "${quick_flag[@]}"
phase demo 120 "$PY" examples/train_demo.py --steps $([ $quick = 1 ] && echo 3 || echo 10)
phase suite 240 "$PY" -m pytest -q -p no:cacheprovider "${suite[@]}"

# The phases and the environment into results.json, then the summary.
"$PY" - "$OUT" "$phases" "$((SECONDS - t_start))" <<'EOF' 2>&1 | tee -a "$log"
import json, os, subprocess, sys
out, phases, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3])
path = os.path.join(out, "results.json")
r = json.load(open(path)) if os.path.exists(path) else {}
r["phases"] = [{"name": n, "rc": int(rc), "seconds": int(s)} for n, rc, s in (l.split() for l in open(phases))]
r["seconds"] = seconds
r["platform"] = os.environ["TORCHTPU_PLATFORM"]
try:
    import torch
    r["torch"] = torch.__version__
    if torch.cuda.is_available():
        r["device"] = torch.cuda.get_device_name(0)
except Exception as e:  # noqa: BLE001 - recorded, the phases said the rest
    r["torch"] = f"not importable: {e}"
r["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
json.dump(r, open(path, "w"), indent=1)
EOF
rm -f "$phases"
"$PY" bench/device_check.py summary --out "$OUT" >/dev/null 2>>"$log"
echo "device check: $([ $failed = 0 ] && echo all phases passed || echo SOME PHASES FAILED) in $((SECONDS - t_start)) s;" \
  "results in $OUT" | tee -a "$log"
exit $failed
