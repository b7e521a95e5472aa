"""The torch.tpu device module, the stats, and the command-line info."""
import gc
import os
import re
import subprocess
import sys

import pytest
import torch

import torchtpu


def test_device_module():
    assert torch.tpu.is_available()
    assert torch.tpu.device_count() == 1
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(0)
    torch.tpu.synchronize()
    with torch.tpu.device(0):
        assert torch.ones(1, device="tpu").device == torch.device("tpu", 0)
    assert torch.device("tpu").type == "tpu"
    assert torch.ones(2).tpu().is_tpu


def test_streams_and_device_properties():
    """torch.cuda's stream API has its tpu counterpart: one in-order queue
    per device, so every stream is the device's default one (with its
    index, also for torch.Stream(device="tpu")) and work in a stream
    context runs in order."""
    for s in (torch.tpu.current_stream(), torch.tpu.default_stream(), torch.tpu.Stream(),
              torch.Stream(device="tpu"), torch.accelerator.current_stream()):
        assert s.device == torch.device("tpu", 0), s
    with torch.tpu.stream(torch.tpu.Stream()):
        x = torch.ones(3, device="tpu") + 1
    with torch.tpu.stream(None):
        x = x * 2
    torch.tpu.current_stream().synchronize()
    assert x.cpu().tolist() == [4.0, 4.0, 4.0]
    # query: whether the work launched so far has finished (launches return
    # at once; 8 products of 2048^3, 137 GFLOP, are far from done right after)
    a = torch.randn(2048, 2048, device="tpu")
    torch.tpu.synchronize()
    assert torch.tpu.current_stream().query()
    for _ in range(8):
        a = a @ a / 2048
    assert not torch.tpu.current_stream().query()
    torch.tpu.current_stream().synchronize()
    assert torch.tpu.current_stream().query()
    props = torch.tpu.get_device_properties(0)
    assert props.name == torch.tpu.get_device_name(0) and props.total_memory == torch.tpu.mem_get_info()[1]


def test_peak_flops_property(monkeypatch):
    """The peak MFU is computed against: None until TORCHTPU_PEAK_FLOPS
    gives it (no plugin reports one), a ValueError naming it when it is not
    a positive number."""
    monkeypatch.delenv("TORCHTPU_PEAK_FLOPS", raising=False)
    assert torch.tpu.get_device_properties(0).peak_flops is None
    monkeypatch.setenv("TORCHTPU_PEAK_FLOPS", "1.5e12")
    assert torch.tpu.get_device_properties(0).peak_flops == 1.5e12
    assert "peak_flops=1500000000000.0" in repr(torch.tpu.get_device_properties(0))
    for bad in ("fast", "0", "-3", "inf", "nan"):
        monkeypatch.setenv("TORCHTPU_PEAK_FLOPS", bad)
        with pytest.raises(ValueError, match="TORCHTPU_PEAK_FLOPS"):
            torch.tpu.get_device_properties(0)


def test_seeding_is_reproducible():
    torch.tpu.manual_seed(123)
    assert torch.tpu.initial_seed() == 123
    a = torch.rand(100, device="tpu").cpu()
    torch.manual_seed(123)  # seeds the tpu generator too
    b = torch.rand(100, device="tpu").cpu()
    assert torch.equal(a, b)
    state = torch.tpu.get_rng_state()
    c = torch.randn(10, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.randn(10, device="tpu").cpu(), c)
    assert torch.tpu.seed() == torch.tpu.initial_seed()


def test_stats_count_hits_misses_and_bytes():
    torchtpu.reset_stats()
    x = torch.ones(1000, device="tpu")  # 4000 bytes in
    for _ in range(5):
        y = x + x
    y.cpu()
    s = torchtpu.stats()
    assert s["ops"] >= 6
    assert s["cache_hits"] >= 4
    assert s["h2d_bytes"] >= 0 and s["d2h_bytes"] == 4000
    assert s["fallbacks"] == {}
    assert set(s) >= {"ops", "cache_hits", "cache_misses", "compile_seconds", "fallbacks", "h2d_bytes", "d2h_bytes"}
    torchtpu.reset_stats()
    assert torchtpu.stats()["ops"] == 0


@pytest.mark.strict_eager
def test_dump_dir(tmp_path):
    code = ("import torch, torchtpu; x = torch.ones(3, device='tpu'); (x.sin() * 3).cpu()")
    env = dict(os.environ, TORCHTPU_DUMP_DIR=str(tmp_path))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    dumps = list(tmp_path.glob("*.mlir"))
    assert any("sin" in p.name for p in dumps)
    assert all("func.func public @main" in p.read_text() for p in dumps)


def test_info_command():
    out = subprocess.run([sys.executable, "-m", "torchtpu", "info"], check=True, capture_output=True, text=True).stdout
    assert "platform:          cpu" in out
    assert "PJRT API version:  0." in out
    assert "xla_cpu_pjrt" in out
    kernels = "attention" if os.environ.get("TORCHTPU_KERNELS", "1") not in ("0", "matmul") else ""
    assert re.search(r"^kernels: +" + (kernels or "none"), out, re.M), out
    env = dict(os.environ, TORCHTPU_KERNELS="0")
    out = subprocess.run([sys.executable, "-m", "torchtpu", "info"], check=True, capture_output=True, text=True,
                         env=env).stdout
    assert re.search(r"^kernels: +none \(XLA only\)$", out, re.M), out


def test_missing_plugin_message():
    code = "import torch, torchtpu; torch.ones(1, device='tpu')"
    env = dict(os.environ, TORCHTPU_PLATFORM="cuda")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if r.returncode == 0:  # a CUDA plugin is installed here: nothing to check
        return
    assert "pip install jax-cuda13-pjrt" in r.stderr


def test_fallback_warns_once_and_counts():
    torchtpu.reset_stats()
    import warnings
    x, c = torch.eye(2, device="tpu"), torch.ones(3, 2, device="tpu")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        torch.ops.aten._compute_linear_combination(x, c)  # an internal op without a rule
        torch.ops.aten._compute_linear_combination(x, c)
    fb = torchtpu.stats()["fallbacks"]
    assert sum(fb.values()) >= 2 and all(k.startswith("aten::") for k in fb)


def test_decomposition_runs_before_fallback():
    """An op without a rule but with a PyTorch decomposition runs on tpu,
    decomposed, and is counted apart from fallbacks."""
    torchtpu.reset_stats()
    x = torch.randn(5, 4)
    got = torch.nn.functional.hardshrink(x.to("tpu"), 0.5)
    torch.testing.assert_close(got.cpu(), torch.nn.functional.hardshrink(x, 0.5))
    s = torchtpu.stats()
    assert s["fallbacks"] == {}
    assert s["decompositions"].get("aten::hardshrink.out") == 1


def test_program_cache_is_capped(tmp_path):
    """A process that keeps compiling new signatures stays under the cap of
    loaded programs (each maps memory; Linux allows ~65k maps a process) and
    still computes right: evicted programs come back from the disk cache."""
    code = (
        "import torch, torchtpu\n"
        "for n in list(range(1, 41)) + list(range(1, 41)):\n"
        "    x = torch.arange(n, dtype=torch.float32)\n"
        "    y = (x.to('tpu') * 2 + 1).cpu()\n"
        "    torch.testing.assert_close(y, x * 2 + 1)\n"
        "    assert torchtpu.stats()['cached_programs'] <= 8, torchtpu.stats()\n"
        "print(torchtpu.stats()['cache_loads'])\n")
    env = dict(os.environ, TORCHTPU_MAX_CACHED_PROGRAMS="8", TORCHTPU_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) > 0  # the second pass loaded evicted programs from disk


def test_program_cache_is_emptied_when_maps_run_out(tmp_path):
    """Programs that map many regions (linalg.eig's map hundreds) exhaust
    Linux's maps long before the count cap: past half of vm.max_map_count
    the cache is emptied too. The process takes most of its maps first
    (anonymous pages of alternating protections, which the kernel cannot
    merge), then loads 80 small programs: they must not all stay loaded."""
    code = (
        "import ctypes, torch, torchtpu\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.mmap.restype = ctypes.c_void_p\n"
        "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t] + [ctypes.c_int] * 3 + [ctypes.c_long]\n"
        "limit = int(open('/proc/sys/vm/max_map_count').read())\n"
        "base = libc.mmap(None, 4096 * (limit // 2 + 10), 3, 0x22, -1, 0)\n"
        "assert base not in (None, ctypes.c_void_p(-1).value)\n"
        "for i in range(0, limit // 2 + 10, 2):\n"
        "    assert libc.mprotect(ctypes.c_void_p(base + 4096 * i), 4096, 1) == 0\n"
        "for n in range(1, 81):\n"
        "    x = torch.arange(n, dtype=torch.float32)\n"
        "    torch.testing.assert_close((x.to('tpu') * 3 - 1).cpu(), x * 3 - 1)\n"
        "print(torchtpu.stats()['cached_programs'])\n")
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) < 80


def test_memory_counters():
    """torch.tpu.memory_allocated counts live storages' bytes as PyTorch
    counts CUDA's: a new tensor adds its bytes, a view adds none, freeing
    returns them; the peak holds until reset_peak_memory_stats. Resizing a
    storage counts the new size only. torch.accelerator reads the same
    statistics (the tpu allocator is PyTorch's DeviceAllocator)."""
    gc.collect()  # tensors of earlier tests in reference cycles would be freed mid-test
    gc.disable()
    try:
        _memory_counters()
    finally:
        gc.enable()


def _memory_counters():
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    x = torch.randn(1000, 250, device="tpu")
    assert torch.tpu.memory_allocated() == base + 10**6 == torch.accelerator.memory_allocated()
    v = x[10:].t()
    y = x * 2
    assert torch.tpu.memory_allocated() == base + 2 * 10**6
    del x, v, y
    assert torch.tpu.memory_allocated() == base
    assert torch.tpu.max_memory_allocated() >= base + 2 * 10**6
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == base == torch.accelerator.max_memory_allocated()
    z = torch.ones(10, device="tpu")
    z.resize_(100)
    assert torch.tpu.memory_allocated() == base + 400
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == base + 400 == torch.tpu.memory_reserved()
    assert stats["allocated_bytes.all.peak"] == torch.tpu.max_memory_allocated() >= base + 400
    torch.tpu.empty_cache()  # nothing cached: a no-op
    torch.accelerator.empty_cache()
    assert torch.tpu.memory_allocated() == base + 400


def test_memory_stats_count_storages_by_pool():
    """memory_stats as CUDA's allocator keeps it: counts and bytes of
    storages made and freed, split into the small (< 1 MiB) and large pools,
    the made/freed totals zeroed by reset_accumulated_memory_stats."""
    torch.accelerator.reset_accumulated_memory_stats()
    before = torch.accelerator.memory_stats()
    big, small = torch.empty(2**20, dtype=torch.uint8, device="tpu"), torch.empty(100, device="tpu")
    mid = torch.accelerator.memory_stats()
    del big, small
    after = torch.tpu.memory_stats()
    for pool, nbytes in (("large_pool", 2**20), ("small_pool", 400), ("all", 2**20 + 400)):
        count = 2 if pool == "all" else 1
        assert mid[f"allocated_bytes.{pool}.current"] - before[f"allocated_bytes.{pool}.current"] == nbytes
        assert mid[f"allocation.{pool}.current"] - before[f"allocation.{pool}.current"] == count
        assert after[f"allocated_bytes.{pool}.allocated"] - before[f"allocated_bytes.{pool}.allocated"] == nbytes
        assert after[f"allocated_bytes.{pool}.freed"] - before[f"allocated_bytes.{pool}.freed"] == nbytes
        assert after[f"allocation.{pool}.current"] == before[f"allocation.{pool}.current"]
        assert after[f"reserved_bytes.{pool}.current"] == after[f"allocated_bytes.{pool}.current"]
    torch.accelerator.reset_accumulated_memory_stats()
    assert torch.tpu.memory_stats()["allocated_bytes.all.freed"] == 0


def test_mem_get_info_and_capabilities():
    free, total = torch.tpu.mem_get_info()
    assert 0 < free <= total
    assert (free, total)[1] == torch.accelerator.get_memory_info()[1]
    assert torch.tpu.is_bf16_supported()


def test_pickle_and_legacy_save():
    """pickle (and so deepcopy through it, multiprocessing, torch.save's
    legacy format) writes a tpu storage through a tensor that PyTorch wraps
    around its data pointer (this crashed): views keep their whole storage
    and geometry, modules their device."""
    import io
    import pickle
    base = torch.arange(12.0, device="tpu")
    view = base.view(3, 4)[:, 1:]
    a, v = pickle.loads(pickle.dumps((base, view)))
    assert v.device.type == "tpu" and v.untyped_storage().nbytes() == 48
    torch.testing.assert_close(v.cpu(), view.cpu())
    assert v.storage_offset() == 1 and v.stride() == (4, 1)
    torch.testing.assert_close(a.cpu(), base.cpu())
    m = torch.nn.Linear(3, 2).to("tpu")
    m2 = pickle.loads(pickle.dumps(m))
    x = torch.randn(4, 3, device="tpu")
    torch.testing.assert_close(m2(x).cpu(), m(x).cpu())
    buf = io.BytesIO()
    torch.save(view, buf, _use_new_zipfile_serialization=False)
    buf.seek(0)
    torch.testing.assert_close(torch.load(buf).cpu(), view.cpu())


def test_dlpack_round_trip_shares_the_storage():
    from torch.utils import dlpack
    x = torch.arange(4.0, device="tpu")
    y = torch.from_dlpack(dlpack.to_dlpack(x))
    assert y.device == x.device
    y.mul_(2)
    torch.testing.assert_close(x.cpu(), torch.tensor([0.0, 2, 4, 6]))


def test_zero_tensors(no_fallbacks):
    """autograd's efficient zero tensors (the gradients it knows are zero:
    sgn's, and those of functorch's transforms) are made on tpu without
    storage, read as zeros and refuse writes, as on the CPU."""
    z = torch._efficientzerotensor((2, 3), device="tpu")
    assert z._is_zerotensor() and z.device.type == "tpu"
    torch.testing.assert_close(z.cpu(), torch.zeros(2, 3))
    torch.testing.assert_close((z + torch.ones(2, 3, device="tpu")).cpu(), torch.ones(2, 3))
    with pytest.raises(RuntimeError, match="ZeroTensors are immutable"):
        z.add_(1)
    x = torch.randn(5, device="tpu", requires_grad=True)
    torch.sgn(x).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.zeros(5))
    h = torch.func.hessian(lambda t: t.pow(3).sum())(torch.ones(3, device="tpu"))
    torch.testing.assert_close(h.cpu(), torch.diag(torch.full((3,), 6.0)))


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_unsigned_fill(dtype):
    """PyTorch's barebones unsigned dtypes fill as on the CPU: a negative
    value wraps, one past the range raises c10's overflow message."""
    for value in (1, -1, 70000, 2**33, 3.7):
        try:
            want = torch.ones(3, dtype=dtype).fill_(value).tolist()
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match=re.escape(str(e))):
                torch.ones(3, dtype=dtype, device="tpu").fill_(value)
        else:
            assert torch.ones(3, dtype=dtype, device="tpu").fill_(value).cpu().tolist() == want
    assert torch.full((2,), 7, dtype=dtype, device="tpu").cpu().tolist() == [7, 7]


def test_events_time_the_work_between_them():
    """torch.Event(enable_timing=True) on tpu: an event is reached when the
    work launched before it has finished; elapsed_time lies within the host
    time around the work; re-recording replaces the point."""
    import time
    a = torch.randn(1024, 1024, device="tpu")
    torch.tpu.synchronize()
    start, end = torch.tpu.Event(enable_timing=True), torch.Event("tpu", enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(4):
        a = a @ a / 32
    end.record()
    end.synchronize()
    host_ms = (time.perf_counter() - t0) * 1e3
    assert end.query() and start.query()
    assert 0 <= start.elapsed_time(end) <= host_ms
    end.record()  # again, with nothing in flight: reached at once
    assert end.query() and start.elapsed_time(end) >= 0
    with pytest.raises(ValueError, match="recorded"):
        start.elapsed_time(torch.Event("tpu", enable_timing=True))


def test_an_in_place_update_does_not_wait_for_the_last_one():
    """An in-place op donates the tensor's buffer to its program, and the
    CPU plugin's destroy of a donated buffer waits for that program: each
    `x.mul_` waited for the one before it (1.5 ms each on 64 MB). The runtime
    keeps such buffers until their launches finish (launch.c), so the host
    goes on: the event after six updates is not reached when the loop
    returns. The values are the CPU's, and the buffers are destroyed once
    their launches end (the process does not keep 60 freed 64 MB buffers)."""
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    x, want = torch.ones(16 << 20, device="tpu"), torch.ones(16 << 20)
    x.mul_(1.0001)  # compiles
    want.mul_(1.0001)
    torch.tpu.synchronize()
    before = rss()
    done = torch.tpu.Event()
    for _ in range(6):
        x.mul_(1.0001)
    done.record()
    assert not done.query(), "an in-place update waited for the one before it"
    for _ in range(54):
        x.mul_(1.0001)
    for _ in range(60):
        want.mul_(1.0001)
    torch.tpu.synchronize()
    assert rss() - before < (1 << 30)
    torch.testing.assert_close(x.cpu(), want)


def test_freed_operands_of_running_programs_from_threads():
    """Threads free the operands of each other's launches in flight (the
    runtime's list of buffers waiting for their launches is shared): every
    thread's result is the CPU's, at re-execution after each update."""
    import threading

    def work(seed, out):
        g = torch.Generator().manual_seed(seed)
        x0, w0 = torch.randn(64, 512, generator=g), torch.randn(512, 512, generator=g) / 16
        x, w = x0.to("tpu"), w0.to("tpu")
        for _ in range(20):
            x = torch.tanh(x @ w) + 0.5
            w.mul_(0.999)  # an in-place update the next product reads
            x0 = torch.tanh(x0 @ w0) + 0.5
            w0.mul_(0.999)
        out[seed] = (x.cpu(), x0)

    out = {}
    threads = [threading.Thread(target=work, args=(i, out)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(out) == [0, 1, 2, 3]
    for got, want in out.values():
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_exit_after_a_backward_does_not_abort():
    """A tpu backward's graph task can be released by the device's autograd
    thread after backward() returns; PyTorch 2.13 puts a Python object in it,
    and a release during interpreter shutdown aborted the process ("terminate
    called without an active exception", exit 134: 12 of 100 such processes,
    four at a time, before torchtpu's exit hook; 16 of them all passing had a
    chance of 13%)."""
    code = "import torch, torchtpu\n" \
           "w = torch.randn(64, 64, device='tpu', requires_grad=True)\n" \
           "(w * 2).sum().backward()\n"
    for _ in range(4):
        runs = [subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE) for _ in range(4)]
        for run in runs:
            _, err = run.communicate(timeout=120)
            assert run.returncode == 0, err.decode()[-500:]


def test_a_storage_without_a_buffer_keys_as_the_buffer_its_program_gives_it():
    """One key builder (eager.c) for eager calls and compiled graphs: a
    storage without a buffer yet keys as the 1-D buffer of its first
    tensor's dtype that its program reads it as, however the program's first
    read views it. Here fill_ reads its value through an int32 view of the
    float32 self before anything else, and the program built on a storage
    without a buffer serves the next call, whose storage has that buffer."""
    torchtpu.reset_stats()
    for step in range(2):
        x = torch.empty(4, device="tpu") if step == 0 else torch.full((4,), 1.5, device="tpu")
        x.fill_(x.view(torch.int32)[1])
    assert torchtpu.stats()["cache_hits"] >= 1
    want = torch.full((4,), 1.5)
    want.fill_(want.view(torch.int32)[1])
    assert torch.equal(x.cpu(), want)
    sig = torchtpu._C._graph_signature
    fresh = torch.empty(4, device="tpu")
    assert sig([fresh]) == sig([torch.zeros(4, device="tpu")])
    assert sig([fresh]) != sig([torch.zeros(2, 2, device="tpu").view(4)])  # another buffer layout
    assert sig([fresh]) != sig([torch.empty(4, dtype=torch.int32, device="tpu")])
