"""The cost of torchtpu being installed: `python -c "import torch"` with
PyTorch's device-backend autoload off (TORCH_DEVICE_BACKEND_AUTOLOAD=0) and
on (torchtpu imported), runs interleaved, medians side by side.

    python bench/import_torch.py [runs]      (default 15 each)"""
import os
import statistics
import subprocess
import sys
import time


def run_once(autoload):
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD=autoload)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], env=env, check=True)
    return time.perf_counter() - start


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    check = subprocess.run([sys.executable, "-c", "import sys, torch; print('torchtpu' in sys.modules)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    if check != "True":
        sys.exit("torchtpu is not autoloaded here (installed? TORCH_DEVICE_BACKEND_AUTOLOAD set?)")
    times = {"0": [], "1": []}
    run_once("0"), run_once("1")  # warm the file cache
    for _ in range(runs):
        for autoload in ("0", "1"):
            times[autoload].append(run_once(autoload))
    off, on = statistics.median(times["0"]), statistics.median(times["1"])
    print(f"import torch, {runs} runs each, interleaved (median, min-max):")
    print(f"  autoload off (PyTorch alone): {off:.3f} s  ({min(times['0']):.3f}-{max(times['0']):.3f})")
    print(f"  autoload on (torchtpu):       {on:.3f} s  ({min(times['1']):.3f}-{max(times['1']):.3f})")
    print(f"  on/off: {on / off:.2f}x, +{on - off:.3f} s")


if __name__ == "__main__":
    main()
