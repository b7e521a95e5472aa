"""vLLM's worker and model runner on tpu.

The model runner is vLLM's GPU model runner, as vLLM's XPU and CPU runners
are: it keeps each input buffer twice (a host copy the scheduler's output is
written into, a device copy the model reads) and copies one to the other
each step, so the model, the attention metadata and the sampler all run on
tpu tensors. What it asks of CUDA (streams and events) it gets from
torch.tpu. Compiled (no enforce_eager), each step's token count is padded
to a power of two (at most the step's token budget): torchtpu compiles one
XLA program per input shape, so the forward has one program per bucket. The worker is vLLM's CPU worker less its NUMA binding, with the
device, the process group ("tpu_dist") and the memory budget of tpu.
"""
import dataclasses
from contextlib import contextmanager, nullcontext

import torch
from vllm.config import CompilationMode
from vllm.logger import init_logger
from vllm.platforms import current_platform
from vllm.utils.mem_utils import format_gib
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm.v1.worker.cpu_worker import CPUWorker
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment

logger = init_logger(__name__)


@contextmanager
def _cuda_streams_from_tpu():
    """The runner's constructor makes CUDA streams and events: tpu's instead."""
    saved = {name: getattr(torch.cuda, name)
             for name in ("Stream", "Event", "current_stream", "stream")}

    def event(*args, blocking=None, **kwargs):
        return torch.tpu.Event(*args, **kwargs)

    torch.cuda.Stream = torch.tpu.Stream
    torch.cuda.Event = event
    torch.cuda.current_stream = torch.tpu.current_stream
    torch.cuda.stream = torch.tpu.stream
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(torch.cuda, name, value)


class TpuModelRunner(CPUModelRunner):
    """vLLM's GPU model runner with its buffers on tpu; loading, warm-up and
    the host-side steps (no CUDA graphs, no events) are the CPU runner's."""

    def __init__(self, vllm_config, device: torch.device):
        with _cuda_streams_from_tpu():
            GPUModelRunner.__init__(self, vllm_config, device)
        self.use_cuda_graph = False
        self.token_buckets = self.compilation_config.mode != CompilationMode.NONE

    def _determine_batch_execution_and_padding(self, num_tokens, *args, **kwargs):
        """vLLM pads a step's tokens to the batch descriptor's count (its CUDA
        graphs' sizes; they are off here): tpu's buckets instead. The padding
        tokens' slots are -1 and the logits read only the real ones."""
        mode, batch, *rest = super()._determine_batch_execution_and_padding(
            num_tokens, *args, **kwargs)
        if self.token_buckets and batch.num_tokens > 0:
            padded = min(self.max_num_tokens, 1 << (batch.num_tokens - 1).bit_length())
            batch = dataclasses.replace(batch, num_tokens=max(padded, batch.num_tokens))
        return (mode, batch, *rest)

    def _sync_device(self) -> None:
        torch.tpu.synchronize(self.device)

    def initialize_kv_cache_tensors(self, kv_cache_config, kernel_block_sizes,
                                    kv_cache_allocation_context=None):
        """vLLM places every layer's KV cache in one allocation, a layer a
        view of it. A tpu program writes a buffer whole: a step's cache write
        through one layer's view would copy that layer's part out of the
        allocation and back (measured: ~60 ms a layer and step for an 88M
        Llama's 100 MB layers, most of a decode step). So each layer's view
        gets a storage of its own, same shape, dtype and dim order, zeroed;
        the shared allocation goes first, so memory peaks at one cache."""
        kv_caches = super().initialize_kv_cache_tensors(kv_cache_config, kernel_block_sizes,
                                                        kv_cache_allocation_context)

        def bound(name):  # the view the layer reads (vLLM may keep it in a list)
            view = getattr(self.compilation_config.static_forward_context.get(name), "kv_cache", None)
            return (view[0] if view else None) if isinstance(view, list) else view

        if any(bound(name) is not None and bound(name) is not view for name, view in kv_caches.items()):
            logger.warning("tpu: layers read KV cache views of their own; the shared "
                           "allocation is kept (a cache write copies its layer)")
            return kv_caches
        views = list({id(t): t for t in kv_caches.values()}.values())
        layouts = [(t.shape, t.stride(), t.dtype) for t in views]
        for t in views:
            t.set_()  # lets go of the shared allocation
        for t, (shape, stride, dtype) in zip(views, layouts):
            order = sorted(range(len(shape)), key=lambda d: -stride[d])
            dense, step = [0] * len(shape), 1
            for d in reversed(order):
                dense[d], step = step, step * shape[d]
            own = torch.zeros(step, dtype=dtype, device=self.device)
            t.set_(own.untyped_storage(), 0, shape, dense)
        return kv_caches


class TpuWorker(CPUWorker):
    def __init__(self, vllm_config, local_rank, rank, distributed_init_method,
                 is_driver_worker=False):
        Worker.__init__(self, vllm_config, local_rank, rank, distributed_init_method,
                        is_driver_worker=is_driver_worker)
        self.parallel_config.disable_custom_all_reduce = True
        from .moe import register  # tpu's MoE method, before the model is built
        register()

    def init_device(self):
        self.device = torch.device("tpu", self.local_rank % torch.tpu.device_count())
        current_platform.set_device(self.device)
        init_worker_distributed_environment(self.vllm_config, self.rank,
                                            self.distributed_init_method, self.local_rank,
                                            current_platform.dist_backend)
        set_random_seed(self.model_config.seed)
        self.model_runner = TpuModelRunner(self.vllm_config, self.device)

    def _maybe_get_memory_pool_context(self, tag):
        if self.vllm_config.model_config.enable_sleep_mode:
            raise NotImplementedError("tpu: sleep mode is not supported")
        return nullcontext()

    def determine_available_memory(self) -> int:
        """The KV cache's bytes: the size asked for, else the device's share
        (gpu_memory_utilization) less what the weights and warm-up hold."""
        if self._should_warm_up_model():
            self.model_runner.warming_up_model()
        explicit = self.cache_config.kv_cache_memory_bytes
        if explicit is not None:
            return explicit
        total = torch.tpu.get_device_properties(self.device).total_memory
        used = torch.tpu.memory_allocated(self.device)
        budget = int(total * self.cache_config.gpu_memory_utilization) - used
        if budget <= 0:
            raise ValueError(
                f"tpu: the weights take {format_gib(used)} GiB of the "
                f"{format_gib(total * self.cache_config.gpu_memory_utilization)} GiB that "
                "gpu_memory_utilization allows: raise it or set kv_cache_memory_bytes")
        logger.info("tpu: %s GiB for the KV cache", format_gib(budget))
        return budget
