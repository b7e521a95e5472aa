"""The tpu platform for vLLM: what vLLM asks of a device, answered for tpu.

vLLM's own machinery does the serving: its scheduler, its GPU model runner
(batching, slot mapping, KV-cache allocation, sampling; see worker.py) and
its models, whose CustomOps run their native PyTorch paths on tpu. This
class names the pieces torchtpu brings: the worker, the attention backend
over vLLM's paged KV cache (attention.py), "tpu_dist" for collectives and
"tpu" as the torch.compile backend.
"""
import os

import torch
from vllm.logger import init_logger
from vllm.platforms.interface import Platform, PlatformEnum

logger = init_logger(__name__)


class TpuPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name: str = "tpu"
    device_type: str = "tpu"
    dispatch_key: str = "PrivateUse1"
    dist_backend: str = "tpu_dist"
    simple_compile_backend: str = "tpu"
    device_control_env_var: str = "TORCHTPU_VISIBLE_DEVICES"

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.float32, torch.bfloat16, torch.float16]

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None) -> str:
        if attn_selector_config.use_mla or attn_selector_config.use_sparse:
            raise NotImplementedError("tpu: MLA and sparse attention are not supported")
        return "torchtpu.vllm.attention.TpuAttentionBackend"

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.tpu.get_device_name(device_id)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return torch.tpu.get_device_properties(device_id).total_memory

    @classmethod
    def get_current_memory_usage(cls, device=None) -> float:
        return float(torch.tpu.memory_allocated(device))

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.tpu.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.tpu.manual_seed_all(seed)

    @classmethod
    def inference_mode(cls):
        return torch.no_grad()

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return False

    @classmethod
    def import_kernels(cls) -> None:
        """tpu needs none of vLLM's compiled CPU or CUDA ops."""

    @classmethod
    def opaque_attention_op(cls) -> bool:
        return True

    @classmethod
    def support_hybrid_kv_cache(cls) -> bool:
        return True

    @classmethod
    def supports_structured_output(cls) -> bool:
        return True

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return "vllm.distributed.device_communicators.base_device_communicator.DeviceCommunicatorBase"

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        """The runner's Triton kernels, as PyTorch ops that run on tpu."""
        from vllm.triton_utils.dispatcher import register_kernels

        from .kernels import compute_slot_mapping

        register_kernels({
            "vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel": compute_slot_mapping,
        })

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        from vllm.config import CompilationMode, CUDAGraphMode
        from vllm.utils.mem_constants import GiB_bytes

        cache_config = vllm_config.cache_config
        if not cache_config.user_specified_block_size:
            cache_config.block_size = 16
        # Like vLLM's CPU platform: VLLM_CPU_KVCACHE_SPACE (GiB) sizes the cache.
        space = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "")
        if space:
            cache_config.kv_cache_memory_bytes = int(space) * GiB_bytes

        # Steps run one after another: the runner's async overlap needs CUDA streams.
        vllm_config.scheduler_config.async_scheduling = False
        parallel_config = vllm_config.parallel_config
        if parallel_config.worker_cls == "auto":
            parallel_config.worker_cls = "torchtpu.vllm.worker.TpuWorker"
        parallel_config.enable_dbo = False
        parallel_config.disable_custom_all_reduce = True

        compilation_config = vllm_config.compilation_config
        compilation_config.cudagraph_capture_sizes = []
        compilation_config.cudagraph_mode = CUDAGraphMode.NONE
        if compilation_config.mode == CompilationMode.VLLM_COMPILE:
            # The whole forward as one graph for torchtpu's compile backend
            # (vLLM's piecewise splitting exists for CUDA graphs).
            compilation_config.mode = CompilationMode.DYNAMO_TRACE_ONCE
            compilation_config.backend = "tpu"
            # torch's aot_compile, vLLM's default, wants a serializable
            # compiled function; torchtpu's persist through its own caches.
            os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")
        vllm_config.profiler_config.torch_profiler_dump_cuda_time_total = False
        # The engine process must not inherit an initialized tpu client.
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
