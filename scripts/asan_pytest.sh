#!/usr/bin/env bash
# Python tests against an AddressSanitizer build of the extension (optional,
# slow): the C runtime, lowerings and C++ glue as PyTorch drives them.
#
#   scripts/asan_pytest.sh tests/test_foreach.py tests/test_optim.py
#
# Builds build/asan (the extension with -fsanitize=address), copies the
# package beside it and runs pytest on it with libasan preloaded (python
# itself is not instrumented; libstdc++ is preloaded too so that ASan finds
# __cxa_throw when PyTorch raises). Leaks are not checked: PyTorch and XLA
# keep process-lifetime allocations. Reports go to build/asan/report.*.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
root=$PWD
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B build/asan "${gen[@]}" -DPython3_EXECUTABLE="$(command -v "$PY")" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTORCHTPU_ASAN=ON -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$root/build/asan/lib" >/dev/null
cmake --build build/asan --target _C
rm -rf build/asan/pkg build/asan/report.*
mkdir -p build/asan/pkg
cp -r torchtpu build/asan/pkg/
cp build/asan/lib/_C*.so build/asan/pkg/torchtpu/
preload="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so.6)"
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(tests)
for i in "${!args[@]}"; do [ -e "${args[$i]}" ] && args[$i]="$root/${args[$i]}"; done
# From another directory, so that the instrumented copy is the one imported.
cd build/asan
status=0
PYTHONPATH="$root/build/asan/pkg" LD_PRELOAD="$preload" \
ASAN_OPTIONS="detect_leaks=0:verify_asan_link_order=0:log_path=$root/build/asan/report" \
  "$PY" -m pytest -q -p no:cacheprovider "${args[@]}" || status=$?
if ls report.* >/dev/null 2>&1; then
  echo "AddressSanitizer reports:" build/asan/report.*
  status=1
fi
exit $status
