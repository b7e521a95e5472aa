"""Tools that test torchtpu against PyTorch on the CPU: the differential fuzzer
(fuzz/), the OpInfo and ModuleInfo sweeps (coverage, coverage_tasks), the
Hugging Face architecture sweep (models_sweep) and the float64 referee they
share (referee). None of it is part of the runtime: `import torchtpu` loads no
module of this package. The commands keep their names:

    python -m torchtpu.fuzz ...        (= python -m torchtpu_tools.fuzz)
    python -m torchtpu.coverage ...    (= python -m torchtpu_tools.coverage)
"""
