"""Paged attention over vLLM's KV cache as a composite of PyTorch ops on tpu.

One call serves a ragged batch: any mix of prefills, chunked prefills (a
query that continues a cached context, prefix-cache hits included) and
decodes. The cache is vLLM's per-layer [blocks, kv_heads, block_size,
2 * head_size] (KVCacheLayout.LBHNC): a token's key is the first half of its
row, its value the second. The write scatters the step's keys and values to
their slots (slot_mapping); the read gathers each request's blocks
(block_table) into a padded [requests, kv_heads, keys, head_size], pads the
queries to [requests, heads, longest query, head_size], and attends with a
mask built from positions: causal, within the sequence, within the sliding
window where the layer has one. GQA, ALiBi and logit soft-capping as vLLM's
models ask. The padding shapes come from the step's host-side metadata, so
the builder reads no device tensor.
"""
from dataclasses import dataclass, field
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


class TpuAttentionBackend(AttentionBackend):
    forward_includes_kv_cache_update: bool = False
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


@dataclass
class TpuAttentionMetadata:
    num_actual_tokens: int
    # The step's requests padded: query token t sits at row rows[t] of
    # [requests * longest query]; query_pos[r, i] is the position of
    # request r's i-th query token (-1 on padding rows, which see no key).
    rows: torch.Tensor
    query_pos: torch.Tensor
    max_query_len: int
    block_table: torch.Tensor  # [requests, blocks covering the longest sequence]
    slot_mapping: torch.Tensor
    masks: dict = field(default_factory=dict)

    def mask(self, num_keys: int, window: int) -> torch.Tensor:
        """[requests, 1, longest query, keys]: which keys each query sees."""
        key = (window, num_keys)
        if key not in self.masks:
            k = torch.arange(num_keys, device=self.query_pos.device)
            q = self.query_pos[:, :, None]
            seen = k <= q
            if window > 0:
                seen = seen & (k > q - window)
            self.masks[key] = seen[:, None]
        return self.masks[key]


class TpuAttentionMetadataBuilder(AttentionMetadataBuilder[TpuAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> TpuAttentionMetadata:
        m = common_attn_metadata
        num_reqs, num_tokens = m.num_reqs, m.num_actual_tokens
        starts = m.query_start_loc_cpu[:num_reqs + 1].to(torch.int64)
        seq_lens = m.seq_lens_cpu_upper_bound
        seq_lens = (m.seq_lens.cpu() if seq_lens is None else seq_lens)[:num_reqs].to(torch.int64)
        query_lens = starts[1:] - starts[:-1]
        longest = int(query_lens.max()) if num_reqs else 0
        # Host-side index arithmetic, one copy to the device per tensor.
        request = torch.repeat_interleave(torch.arange(num_reqs), query_lens)
        within = torch.arange(num_tokens) - starts[request]
        rows = request * longest + within
        i = torch.arange(longest)
        query_pos = torch.where(i < query_lens[:, None],
                                (seq_lens - query_lens)[:, None] + i, torch.full_like(i, -1))
        num_blocks = -(-int(m.max_seq_len) // self.block_size)
        return TpuAttentionMetadata(
            num_actual_tokens=num_tokens,
            rows=rows.to(self.device),
            query_pos=query_pos.to(self.device),
            max_query_len=longest,
            block_table=m.block_table_tensor[:num_reqs, :num_blocks],
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

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping) -> None:
        """Writes the step's keys and values to their slots. Padding tokens
        (slot -1) land in block 0, vLLM's null block, which no request reads."""
        n = slot_mapping.shape[0]
        block_size = kv_cache.shape[2]
        slots = slot_mapping.clamp(min=0)
        rows = torch.cat([key[:n], value[:n]], dim=-1).to(kv_cache.dtype)
        kv_cache[slots // block_size, :, slots % block_size] = rows

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output,
                output_scale=None, output_block_scale=None):
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("tpu: fused output quantization is not supported")
        if attn_metadata is None:  # vLLM's profiling run
            return output
        m = attn_metadata
        t, d = m.num_actual_tokens, self.head_size
        num_reqs, blocks = m.block_table.shape
        _, kv_heads, block_size, _ = kv_cache.shape
        num_keys = blocks * block_size
        # [requests, blocks, kv_heads, block_size, 2d] -> [requests, kv_heads, keys, 2d]
        kv = kv_cache[m.block_table.to(torch.int64)].transpose(1, 2)
        kv = kv.reshape(num_reqs, kv_heads, num_keys, 2 * d).to(query.dtype)
        k, v = kv[..., :d], kv[..., d:]
        group = self.num_heads // kv_heads
        if group > 1:
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        q = query.new_zeros(num_reqs * m.max_query_len, self.num_heads, d)
        q = q.index_copy(0, m.rows, query[:t].reshape(t, self.num_heads, d))
        q = q.reshape(num_reqs, m.max_query_len, self.num_heads, d).transpose(1, 2)

        scores = torch.matmul(q, k.transpose(-1, -2)).float() * self.scale
        if self.logits_soft_cap:
            scores = torch.tanh(scores / self.logits_soft_cap) * self.logits_soft_cap
        if self.alibi_slopes is not None:
            slopes = self.alibi_slopes.to(scores.device)[None, :, None, None]
            distance = (torch.arange(num_keys, device=scores.device)[None, None, None, :]
                        - m.query_pos[:, None, :, None])
            scores = scores + slopes * distance.float()
        seen = m.mask(num_keys, self.sliding_window)
        scores = scores.masked_fill(~seen, torch.finfo(torch.float32).min)
        probs = torch.softmax(scores, dim=-1).to(v.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(-1, self.num_heads, d)
        out = out.index_select(0, m.rows)
        output[:t].copy_(out.reshape(output[:t].shape))
        return output
