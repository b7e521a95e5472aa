"""Differential fuzzer: random short programs run on the CPU and on tpu, every
live tensor and gradient compared after every step.

    python -m torchtpu.fuzz --minutes 30            # eager and compiled, until time is up
    python -m torchtpu.fuzz --seed 17 --mode eager  # one program, printed, then run
    python -m torchtpu.fuzz --replay failure.json   # a saved (shrunk) program

A program is a list of instructions over numbered tensors: fresh tensors
(some at the sizes where XLA's CPU plugin takes library paths: products with
k = 128..1024), views (transpose, slice, narrow, expand, permute, diagonal,
as_strided ...), elementwise ops out of place, in place and with out=,
products in every layout, reductions, indexing, _foreach_ ops, random ops on
a seeded generator, backward, optimizer steps, frees; and the patterns that
run a cached program again on changed data: a block of instructions repeated
after its inputs were mutated, a tensor freed and another made in its place,
training steps. Each instruction is Python source over its operands ("{0}
.add_({1}, alpha=0.5)"), so a program prints as the code it runs.

The program runs three times in lockstep: on tpu, on the CPU in float32 and
on the CPU in float64 (the referee). After every instruction (eager) or
block (compiled: runs of instructions become one function, compiled with
torch.compile(backend="tpu") on tpu and run eagerly on the CPU) every live
tensor and every gradient is compared: sizes, strides, dtype, values with
torch.testing's tolerances; float values that differ more pass when tpu's
are as close to the float64 run as the CPU's (summation order differs).
An instruction the CPU refuses must be refused on tpu with the same
exception type and message. Random ops are checked for reproducibility under
their seed and their values handed to the CPU runs (tpu's streams differ from
the CPU's by design).

Programs run in a worker process, so a crash or a hang costs one program and
is reported as such. A failing program is shrunk (instructions removed while
it fails the same way) and written as JSON (replayable) and as a listing.

Modules, by job: generate (programs from seeds), run (a program on tpu, the
CPU and float64, in lockstep), compare (the comparison after each step),
shrink (a failing program made smaller), drive (the worker process, listings
and the command line).
"""
from .drive import main, render  # noqa: F401
from .generate import generate  # noqa: F401
from .run import Env, Failure, Refused, run_program  # noqa: F401
from .shrink import shrink  # noqa: F401
