"""vLLM's Triton kernels that the model runner launches, as PyTorch ops.

vLLM's dispatcher (register_kernels) calls these with the kernels' launch
arguments; they run on whatever device the tensors live on, tpu included.
"""
import torch


def compute_slot_mapping(num_tokens, max_num_tokens, query_start_loc, positions, block_table,
                         block_table_stride, slot_mapping, KV_CACHE_BLOCK_SIZE,
                         TOTAL_CP_WORLD_SIZE=1, TOTAL_CP_RANK=0, CP_KV_CACHE_INTERLEAVE_SIZE=1,
                         PAD_ID=-1, BLOCK_SIZE=1024):
    """slot_mapping[t] = the KV-cache slot of token t: its request's block
    for its position, times the block size, plus the offset in the block;
    PAD_ID after the first num_tokens."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("tpu: context parallelism is not supported")
    ends = query_start_loc[1:].to(torch.int64)
    tokens = torch.arange(num_tokens, device=positions.device)
    request = (tokens[:, None] >= ends[None, :]).sum(1)
    pos = positions[:num_tokens].to(torch.int64)
    block = block_table[request, pos // KV_CACHE_BLOCK_SIZE].to(torch.int64)
    slot_mapping[:num_tokens] = block * KV_CACHE_BLOCK_SIZE + pos % KV_CACHE_BLOCK_SIZE
    slot_mapping[num_tokens:max_num_tokens] = PAD_ID
