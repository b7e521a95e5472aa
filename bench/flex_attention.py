"""FlexAttention benchmark: flex_attention with a score function and a causal
block mask, forward and forward + backward, on tpu compiled (the backend
traces the op's dense implementation into the graph's program) and eager (the
same implementation op by op, as compiled graphs ran it before they traced it
in), beside PyTorch on the CPU (eager and Inductor; the CPU has no
FlexAttention backward), side by side in one process.

    python bench/flex_attention.py [--repeats 7] [--batch 4 --heads 8 --seq 256 --dim 64]

Rounds interleave the systems; medians in ms, with each system's program runs
per call on tpu.
"""
import argparse
import statistics
import time
import warnings


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--dim", type=int, default=64)
    a = p.parse_args()
    warnings.simplefilter("ignore")  # eager FlexAttention's note that it is slow without torch.compile
    import torch
    import torchtpu
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def score_mod(score, b, h, i, j):
        return score + (i - j) * 0.01

    def causal(b, h, i, j):
        return i >= j

    torch.manual_seed(0)
    shape = (a.batch, a.heads, a.seq, a.dim)
    cpu = [torch.randn(shape) for _ in range(3)]
    tpu = [x.to("tpu").requires_grad_() for x in cpu]
    masks = {d: create_block_mask(causal, None, None, a.seq, a.seq, device=d) for d in ("cpu", "tpu")}
    compiled_tpu = torch.compile(flex_attention, backend="tpu")
    compiled_cpu = torch.compile(flex_attention)

    def case(fn, args, device, backward):
        def run():
            out = fn(*args, score_mod=score_mod, block_mask=masks[device])
            if backward:
                out.sum().backward()
            elif device == "tpu":
                out = out.detach()
            if device == "tpu":
                torch.tpu.synchronize()
        return run

    cases = {
        "tpu compiled": (case(compiled_tpu, tpu, "tpu", False), case(compiled_tpu, tpu, "tpu", True)),
        "tpu eager": (case(flex_attention, tpu, "tpu", False), case(flex_attention, tpu, "tpu", True)),
        "torch cpu eager": (case(flex_attention, cpu, "cpu", False), None),
        "torch inductor (cpu)": (case(compiled_cpu, cpu, "cpu", False), None),
    }
    times = {(name, i): [] for name in cases for i in range(2)}
    runs = {}
    for name, fns in cases.items():  # warm up: compiles
        for i, fn in enumerate(fns):
            if fn is not None:
                fn()
                if name.startswith("tpu"):
                    torchtpu.reset_stats()
                    fn()
                    runs[(name, i)] = torchtpu.stats()["executions"]
    for _ in range(a.repeats):
        for name, fns in cases.items():
            for i, fn in enumerate(fns):
                if fn is not None:
                    t0 = time.perf_counter()
                    fn()
                    times[(name, i)].append(time.perf_counter() - t0)
    print(f"flex_attention, B={a.batch} H={a.heads} S={a.seq} D={a.dim}, causal block mask and a score function; "
          f"medians of {a.repeats} in ms (program runs per call)")
    print("| system | forward | forward + backward |")
    print("|---|---|---|")
    for name in cases:
        cells = []
        for i in range(2):
            if not times[(name, i)]:
                cells.append("-")
                continue
            cell = f"{statistics.median(times[(name, i)]) * 1e3:.1f}"
            cells.append(cell + (f" ({runs[(name, i)]})" if (name, i) in runs else ""))
        print(f"| {name} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
