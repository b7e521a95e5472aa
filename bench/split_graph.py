"""Splitting a compiled graph around ops without a rule: compile._partitions
(one pass) against PyTorch's CapabilityBasedPartitioner (merging with a cycle
check per merge), on a chain of N adds with every Kth node unsupported, each
node also reading one of the seven before it. Seconds to propose partitions
and to fuse them (fx's fuse_by_partitions), each in a process of its own.

    python bench/split_graph.py [--nodes 2000,4000] [--every 50] [--limit 600]
"""
import argparse
import subprocess
import sys

CHILD = r"""
import sys, time, torch, torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions
import torchtpu.compile as C
which, n, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
g = torch.fx.Graph()
vals = [g.placeholder("x"), g.placeholder("y")]
for i in range(n):
    a, b = vals[-1], vals[-2 - (i % 7) if len(vals) > 8 else 0]
    op = torch.ops.aten.sin.default if i % k == k - 1 else torch.ops.aten.add.Tensor
    vals.append(g.call_function(op, (a,) if op is torch.ops.aten.sin.default else (a, b)))
g.output(vals[-1])
gm = torch.fx.GraphModule(torch.nn.Module(), g)
class Support(OperatorSupport):  # sin stands for an op without a rule
    def is_node_supported(self, sub, node):
        return node.op == "call_function" and node.target is not torch.ops.aten.sin.default
start = time.perf_counter()
if which == "capability":
    p = CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=True)
    parts = [q.nodes for q in p.propose_partitions()]
else:
    C._Support = Support
    parts = C._partitions(gm)
mid = time.perf_counter()
fuse_by_partitions(gm, parts)
end = time.perf_counter()
print(f"{len(parts)} {mid - start:.3f} {end - mid:.3f}")
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", default="2000,4000")
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--limit", type=float, default=600, help="seconds allowed per run")
    args = p.parse_args()
    print(f"{'nodes':>7} {'partitioner':>12} {'programs':>9} {'propose s':>10} {'fuse s':>8}")
    for n in args.nodes.split(","):
        for which in ("partitions", "capability"):
            try:
                out = subprocess.run([sys.executable, "-c", CHILD, which, n, str(args.every)], capture_output=True,
                                     text=True, timeout=args.limit, env={**__import__("os").environ,
                                                                         "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
                parts, propose, fuse = out.stdout.split()
            except subprocess.TimeoutExpired:
                parts, propose, fuse = "-", f">{args.limit:.0f}", "-"
            except ValueError:
                sys.exit(out.stderr)
            print(f"{n:>7} {which:>12} {parts:>9} {propose:>10} {fuse:>8}", flush=True)


if __name__ == "__main__":
    main()
