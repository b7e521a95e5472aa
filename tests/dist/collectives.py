"""Worker (run by tests/test_distributed.py under torchrun): every collective
on tpu tensors through "tpu_dist" against gloo on the same CPU tensors.
Prints one FAIL line per mismatch and exits 1 if any."""
import datetime
import sys

import torch
import torch.distributed as dist

import torchtpu  # noqa: F401
from checks import FAILS, finish

dist.init_process_group("tpu_dist", timeout=datetime.timedelta(seconds=60))
RANK, WORLD = dist.get_rank(), dist.get_world_size()
GLOO = dist.new_group(backend="gloo")
COUNT = {"ok": 0, "err": 0}
R = dist.ReduceOp


def data(shape, dtype, seed, contiguous=True):
    g = torch.Generator().manual_seed(1000 * seed + RANK)
    full = list(shape) if contiguous else list(reversed(shape))
    if dtype == torch.bool:
        x = torch.rand(full, generator=g) > 0.5
    elif dtype.is_floating_point:
        x = torch.randn(full, generator=g).to(dtype)
    else:
        x = torch.randint(-50, 50, full, generator=g, dtype=dtype)
    return x if contiguous else x.t()


def tpu(t):
    if isinstance(t, (list, tuple)):
        return [tpu(x) for x in t]
    if t.is_contiguous() or t.dim() != 2:
        return t.to("tpu")
    return t.t().contiguous().to("tpu").t()  # the same non-contiguous view on tpu


def check(name, run):
    """run(to_device, group) -> tensors to compare; CPU via gloo, tpu via tpu_dist."""
    results = []
    for mk, group in ((lambda t: t, GLOO), (tpu, None)):
        try:
            out = run(mk, group)
            results.append(("ok", [o.cpu() if isinstance(o, torch.Tensor) else o for o in out]))
        except Exception as e:  # noqa: BLE001 - compared between the two
            results.append(("err", f"{type(e).__name__}: {str(e).splitlines()[0]}"))
    (kc, vc), (kt, vt) = results
    if kc != kt:
        FAILS.append(f"{name}: gloo {kc} {vc if kc == 'err' else ''} tpu_dist {kt} {vt if kt == 'err' else ''}")
        return
    COUNT[kc] += 1
    if kc == "err":
        if RANK == 0 and "-v" in sys.argv:
            print(f"both refuse {name}: {vc} | {vt}", flush=True)
        return
    for a, b in zip(vc, vt):
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
            FAILS.append(f"{name}: values differ ({a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)})")
            return


DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool]
SHAPES = {"0d": (), "empty": (0, 3), "2d": (5, 6), "noncontig": (5, 6)}

seed = 0
for dtype in DTYPES:
    for sname, shape in SHAPES.items():
        contig = sname != "noncontig"
        tag = f"{dtype}/{sname}"
        seed += 1
        x = data(shape, dtype, seed, contig)
        ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG] + ([R.BAND, R.BOR, R.BXOR] if not dtype.is_floating_point else [])
        for op in ops:
            def ar(mk, g, op=op):
                t = mk(x.clone())
                dist.all_reduce(t, op=op, group=g)
                return [t]
            check(f"all_reduce {op} {tag}", ar)
        if dtype.is_floating_point:
            def premul(mk, g):
                t = mk(x.clone())
                if g is GLOO:  # gloo has no PREMUL_SUM: the same math by hand
                    t.mul_(0.25)
                    dist.all_reduce(t, group=g)
                else:
                    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.25), group=g)
                return [t]
            check(f"all_reduce PREMUL_SUM {tag}", premul)

        def bc(mk, g):
            t = mk(x.clone())
            dist.broadcast(t, src=WORLD - 1, group=g)
            return [t]
        check(f"broadcast {tag}", bc)

        def rd(mk, g):
            t = mk(x.clone())
            dist.reduce(t, dst=0, group=g)
            return [t]
        check(f"reduce {tag}", rd)

        def ag(mk, g):
            outs = [mk(torch.zeros_like(x)) for _ in range(WORLD)]
            dist.all_gather(outs, mk(x.clone()), group=g)
            return outs
        check(f"all_gather {tag}", ag)

        def agt(mk, g):
            xc = x.contiguous()
            out = mk(torch.zeros((WORLD * max(xc.numel(), 0),), dtype=dtype))
            dist.all_gather_into_tensor(out, mk(xc.reshape(-1)), group=g)
            return [out]
        check(f"all_gather_into_tensor {tag}", agt)

        def gat(mk, g):
            outs = [mk(torch.zeros_like(x)) for _ in range(WORLD)] if RANK == 0 else None
            dist.gather(mk(x.clone()), outs, dst=0, group=g)
            return outs or []
        check(f"gather {tag}", gat)

        def sca(mk, g):
            out = mk(torch.zeros_like(x))
            ins = [mk(x.clone() if i % 2 else torch.zeros_like(x)) for i in range(WORLD)] if RANK == 0 else None
            dist.scatter(out, ins, src=0, group=g)
            return [out]
        check(f"scatter {tag}", sca)

        def rs(mk, g):
            out = mk(torch.zeros_like(x))
            dist.reduce_scatter(out, [mk(x.clone()) for _ in range(WORLD)], group=g)
            return [out]
        check(f"reduce_scatter {tag}", rs)

        for op in (R.SUM, R.AVG, R.MAX):
            def rst(mk, g, op=op):
                n = x.numel()
                inp = mk(data((WORLD * n,), dtype, seed + 500))
                out = mk(torch.zeros((n,), dtype=dtype))
                dist.reduce_scatter_tensor(out, inp, op=op, group=g)
                return [out]
            check(f"reduce_scatter_tensor {op} {tag}", rst)

        def a2a(mk, g):
            inp = mk(data((WORLD * 3, 2), dtype, seed + 600))
            out = mk(torch.zeros((WORLD * 3, 2), dtype=dtype))
            dist.all_to_all_single(out, inp, group=g)
            return [out]
        check(f"all_to_all_single {tag}", a2a)

        def a2a_uneven(mk, g):
            in_splits = [(RANK + j) % 3 for j in range(WORLD)]
            out_splits = [(j + RANK) % 3 for j in range(WORLD)]
            inp = mk(data((sum(in_splits), 2), dtype, seed + 700))
            out = mk(torch.zeros((sum(out_splits), 2), dtype=dtype))
            dist.all_to_all_single(out, inp, out_splits, in_splits, group=g)
            return [out]
        check(f"all_to_all_single uneven {tag}", a2a_uneven)

        def a2a_list(mk, g):
            ins = [mk(data((3,), dtype, seed + 800 + j)) for j in range(WORLD)]
            outs = [mk(torch.zeros((3,), dtype=dtype)) for _ in range(WORLD)]
            dist.all_to_all(outs, ins, group=g)
            return outs
        check(f"all_to_all {tag}", a2a_list)

        def p2p(mk, g):
            t = mk(x.clone())
            out = mk(torch.zeros_like(x))
            nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
            ops = [dist.P2POp(dist.isend, t, nxt, group=g), dist.P2POp(dist.irecv, out, prv, group=g)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            return [out]
        check(f"batch_isend_irecv {tag}", p2p)

        def sr(mk, g):
            t = mk(x.clone())
            if RANK == 0:
                dist.send(t, dst=1, group=g)
            elif RANK == 1:
                dist.recv(t, src=0, group=g)
            return [t]
        check(f"send/recv {tag}", sr)

# 16 MiB (float32)
big = data((4 << 20,), torch.float32, 99)
for name, fn in (("all_reduce", lambda t, g: dist.all_reduce(t, group=g)),
                 ("broadcast", lambda t, g: dist.broadcast(t, src=0, group=g))):
    def run_big(mk, g, fn=fn):
        t = mk(big.clone())
        fn(t, g)
        return [t]
    check(f"{name} 16MiB", run_big)


def big_in_place(mk, g):
    """A large all_reduce works in the storage's own buffer: a clone made
    before keeps its values, a program launched before reads the old bytes,
    and only the view's bytes change."""
    t = mk(big.clone())
    before = t.clone()
    tripled = t * 3
    mid = t[1 << 20: 3 << 20]
    dist.all_reduce(mid, group=g)
    return [t, before, tripled, mid + 1]
check("all_reduce 16MiB in place, a view", big_in_place)


def agt_big(mk, g):
    out = mk(torch.zeros((WORLD * big.numel(),)))
    dist.all_gather_into_tensor(out, mk(big), group=g)
    return [out]
check("all_gather_into_tensor 16MiB", agt_big)


# async_op, futures, a view written in place, gathering from a slice of the output (FSDP2)
def async_ops(mk, g):
    a = mk(data((64,), torch.float32, 3))
    base = mk(data((4, 8), torch.float32, 4))
    view = base[1:3]  # a partial view: the rest of the storage must survive
    w1 = dist.all_reduce(a, async_op=True, group=g)
    w2 = dist.all_reduce(view, op=R.MAX, async_op=True, group=g)
    fut = w1.get_future()
    w2.wait()
    w1.wait()
    val = fut.wait()
    assert isinstance(val, list) and len(val) == 1
    out = mk(torch.zeros(WORLD * 5))
    out[RANK * 5:(RANK + 1) * 5] = mk(torch.arange(5.0) + RANK)
    dist.all_gather_into_tensor(out, out[RANK * 5:(RANK + 1) * 5], group=g)
    return [a, base, val[0], out]
check("async + views + in-place gather", async_ops)


def coalesced(mk, g):
    ins = [mk(data((3, 2), torch.float32, 5)), mk(data((7,), torch.float32, 6))]
    outs = [mk(torch.zeros(WORLD * 3, 2)), mk(torch.zeros(WORLD * 7))]
    name = (g or dist.group.WORLD).group_name
    res = torch.ops._c10d_functional.all_gather_into_tensor_coalesced(ins, WORLD, name)
    res = [torch.ops._c10d_functional.wait_tensor(r) for r in res]
    rs_in = [mk(data((WORLD * 2,), torch.float32, 7)), mk(data((WORLD * 3,), torch.float32, 8))]
    rs = torch.ops._c10d_functional.reduce_scatter_tensor_coalesced(rs_in, "sum", WORLD, name)
    rs = [torch.ops._c10d_functional.wait_tensor(r) for r in rs]
    ar = [mk(data((5,), torch.float32, 9)), mk(data((2, 2), torch.float32, 10))]
    ar = torch.ops._c10d_functional.all_reduce_coalesced(ar, "avg", name)
    ar = [torch.ops._c10d_functional.wait_tensor(r) for r in ar]
    return res + rs + ar + outs[:0]
check("functional coalesced", coalesced)

dist.barrier()
assert dist.get_backend() == "tpu_dist", dist.get_backend()
finish(f"{COUNT['ok']} equal, {COUNT['err']} refused by both")
