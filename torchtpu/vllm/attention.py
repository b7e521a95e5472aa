"""vLLM's attention backend on tpu: torch.ops.torchtpu.paged_attention per layer.

One call per layer and step serves a ragged batch, any mix of prefills,
chunked prefills (a query that continues a cached context, prefix-cache hits
included) and decodes, and writes the step's keys and values to the cache
on the way (forward_includes_kv_cache_update): the op's rule is a
hand-written kernel that walks the block tables on the CPU plugin and XLA's
composite (gather + masked attention) elsewhere. The cache is vLLM's
per-layer [blocks, kv_heads, block_size, 2 * head_size]
(KVCacheLayout.LBHNC): a token's key is the first half of its row, its
value the second. GQA, sliding window, ALiBi and logit soft-capping as
vLLM's models ask.

The metadata passes the step's device tensors as vLLM builds them
(block_table, seq_lens, query_start_loc), so the builder reads no device
tensor. Two host-side sizes shape the program: the block table's width and
the composite's query padding (max_query_len), each rounded up to a power
of two, so that steps of neighbouring lengths share one program.
"""
from dataclasses import dataclass
from typing import ClassVar

import torch
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
    MultipleOf,
)
from vllm.v1.kv_cache_layout import KVCacheLayout
from .kernels import whole


class TpuAttentionBackend(AttentionBackend):
    forward_includes_kv_cache_update: bool = True
    accept_output_buffer: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "float32", "bfloat16", "float16"]

    @staticmethod
    def get_name() -> str:
        # vLLM's registry has no name for out-of-tree backends; "CUSTOM" is its slot.
        return "CUSTOM"

    @staticmethod
    def get_impl_cls():
        return TpuAttentionImpl

    @staticmethod
    def get_builder_cls():
        return TpuAttentionMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        return [MultipleOf(1)]

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return []

    @classmethod
    def supports_head_size(cls, head_size: int) -> bool:
        return head_size > 0

    @classmethod
    def supported_kv_cache_layouts(cls):
        return (KVCacheLayout.LBHNC,)

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER


def _bucket(n: int) -> int:
    """The power of two at or above |n| (0 stays 0)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


@dataclass
class TpuAttentionMetadata:
    num_actual_tokens: int
    max_query_len: int  # bucketed: sizes the composite's padding
    block_table: torch.Tensor  # [requests, blocks covering the longest sequence, bucketed]
    seq_lens: torch.Tensor  # [requests]
    query_start_loc: torch.Tensor  # [requests + 1]
    slot_mapping: torch.Tensor


class TpuAttentionMetadataBuilder(AttentionMetadataBuilder[TpuAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> TpuAttentionMetadata:
        m = common_attn_metadata
        table = m.block_table_tensor
        num_blocks = min(_bucket(-(-int(m.max_seq_len) // self.block_size)), table.shape[1])
        # Requests padded to a power of two (within the runner's buffers),
        # so that the attention compiles once per bucket, not per count:
        # the padding requests have no query tokens (vLLM pads
        # query_start_loc with the step's token count), so nothing reads
        # their block table rows or lengths.
        rows = min(_bucket(m.num_reqs), whole(table).shape[0], whole(m.seq_lens).shape[0],
                   whole(m.query_start_loc).shape[0] - 1)
        return TpuAttentionMetadata(
            num_actual_tokens=m.num_actual_tokens,
            max_query_len=_bucket(int(m.max_query_len)),
            block_table=whole(table, rows)[:, :num_blocks],
            seq_lens=whole(m.seq_lens, rows),
            query_start_loc=whole(m.query_start_loc, rows + 1),
            slot_mapping=m.slot_mapping,
        )


class TpuAttentionImpl(AttentionImpl):
    def __init__(self, num_heads, head_size, scale, num_kv_heads, alibi_slopes, sliding_window,
                 kv_cache_dtype, logits_soft_cap=None, attn_type=AttentionType.DECODER,
                 kv_sharing_target_layer_name=None, sinks=None):
        if attn_type != AttentionType.DECODER:
            raise NotImplementedError(f"tpu: attention type {attn_type} is not supported")
        if sinks is not None:
            raise NotImplementedError("tpu: attention sinks are not supported")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.alibi_slopes = (None if alibi_slopes is None
                             else torch.tensor(alibi_slopes, dtype=torch.float32))
        self.sliding_window = sliding_window or 0
        self.logits_soft_cap = logits_soft_cap or 0.0
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.attn_type = attn_type

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output,
                output_scale=None, output_block_scale=None):
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("tpu: fused output quantization is not supported")
        if attn_metadata is None:  # vLLM's profiling run
            return output
        m = attn_metadata
        if self.alibi_slopes is not None and self.alibi_slopes.device != query.device:
            self.alibi_slopes = self.alibi_slopes.to(query.device)
        writes = self.kv_sharing_target_layer_name is None and key is not None and value is not None
        query = query.view(-1, self.num_heads, self.head_size)
        # The compiled forward pads the step's tokens to a bucket: the slot
        # mapping too (the runner's buffer holds PAD_ID past the step's tokens).
        slots = m.slot_mapping
        if slots.shape[0] < query.shape[0] <= whole(slots).shape[0]:
            slots = whole(slots, query.shape[0])
        out = torch.ops.torchtpu.paged_attention(
            query, key if writes else None, value if writes else None, kv_cache, slots,
            m.block_table, m.seq_lens, m.query_start_loc, m.max_query_len, self.scale,
            self.sliding_window, self.logits_soft_cap, self.alibi_slopes)
        output.copy_(out.view(output.shape))
        return output
