"""Worker (run by tests/test_distributed.py, one process per rank): the fault
cases of tpu_dist. argv[1] names the case; each rank prints "RAISED <type>:
<message>" for the error it got, or "NO ERROR"."""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import torchtpu  # noqa: F401

CASE = sys.argv[1]
dist.init_process_group("tpu_dist", timeout=datetime.timedelta(seconds=float(os.environ.get("TIMEOUT_S", "60"))))
RANK, WORLD = dist.get_rank(), dist.get_world_size()


def attempt(fn):
    try:
        fn()
        print(f"rank {RANK} NO ERROR", flush=True)
    except Exception as e:  # noqa: BLE001 - reported to the test
        print(f"rank {RANK} RAISED {type(e).__name__}: {' '.join(str(e).split())[:400]}", flush=True)


if CASE == "shape":
    attempt(lambda: dist.all_reduce(torch.ones(4 + RANK, device="tpu")))
    # the group still works afterwards
    t = torch.ones(3, device="tpu")
    dist.all_reduce(t)
    print(f"rank {RANK} AFTER {t.cpu().tolist()}", flush=True)
elif CASE == "dtype":
    attempt(lambda: dist.all_gather_into_tensor(
        torch.empty(2 * WORLD, device="tpu", dtype=torch.float32 if RANK == 0 else torch.float16),
        torch.ones(2, device="tpu", dtype=torch.float32 if RANK == 0 else torch.float16)))
elif CASE == "list_length":
    attempt(lambda: dist.all_gather([torch.empty(2, device="tpu") for _ in range(WORLD + 1)],
                                    torch.ones(2, device="tpu")))
    dist.barrier()
    print(f"rank {RANK} AFTER ok", flush=True)
elif CASE == "peer_exits":
    if RANK == WORLD - 1:
        os._exit(0)
    attempt(lambda: dist.all_reduce(torch.ones(1024, device="tpu")))
elif CASE == "peer_silent":
    if RANK == WORLD - 1:
        time.sleep(float(os.environ.get("TIMEOUT_S", "60")) * 3)
        os._exit(0)
    attempt(lambda: dist.all_reduce(torch.ones(1024, device="tpu")))
sys.stdout.flush()
os._exit(0)  # a group with a dead or silent peer cannot be destroyed cleanly
