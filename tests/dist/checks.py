"""What the workers in this directory share: a mismatch is recorded, not
raised (every rank reports its own, and the collectives after it still run),
and finish() prints them and the summary line the test counts, then exits 1
if there were any."""
import sys

import torch
import torch.distributed as dist

FAILS = []


def same(name, got, want, rtol=1e-6, atol=1e-6):
    """Records a failure unless |got| (tensors on any device, or lists of
    them) equals the CPU's |want| within the tolerances."""
    def cpu(x):
        return [cpu(v) for v in x] if isinstance(x, (list, tuple)) else x.detach().cpu()
    try:
        torch.testing.assert_close(cpu(got), cpu(want), rtol=rtol, atol=atol)
    except AssertionError as e:
        FAILS.append(f"{name}: {' '.join(str(e).split())[-300:]}")


def finish(summary):
    rank = dist.get_rank()
    for f in FAILS:
        print(f"rank {rank} FAIL {f}", flush=True)
    print(f"rank {rank}: {summary}, {len(FAILS)} failures", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if FAILS else 0)
