"""vLLM's Triton kernels that the model runner launches, as PyTorch ops.

vLLM's dispatcher (register_kernels) calls these with the kernels' launch
arguments; they run on whatever device the tensors live on, tpu included.
"""
import torch


def whole(t, rows=None):
    """The persistent buffer that |t|, a leading slice of it, was cut from,
    at its full length (or |rows| rows): vLLM's runner slices its buffers to
    each step's requests and tokens, and an op over such a slice compiles
    once per size; over the whole buffer, once."""
    if rows is None:
        rows = (t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()) // t.stride(0)
    return t.as_strided((rows, *t.shape[1:]), t.stride(), t.storage_offset())


def compute_slot_mapping(num_tokens, max_num_tokens, query_start_loc, positions, block_table,
                         block_table_stride, slot_mapping, KV_CACHE_BLOCK_SIZE,
                         TOTAL_CP_WORLD_SIZE=1, TOTAL_CP_RANK=0, CP_KV_CACHE_INTERLEAVE_SIZE=1,
                         PAD_ID=-1, BLOCK_SIZE=1024):
    """slot_mapping[t] = the KV-cache slot of token t: its request's block
    for its position, times the block size, plus the offset in the block;
    PAD_ID after the first num_tokens. Computed over the whole buffers
    (vLLM pads query_start_loc with the step's token count), so that every
    step runs the same programs."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("tpu: context parallelism is not supported")
    ends = whole(query_start_loc)[1:].to(torch.int64)
    tokens = torch.arange(max_num_tokens, device=positions.device)
    request = (tokens[:, None] >= ends[None, :]).sum(1).clamp_(max=block_table.shape[0] - 1)
    pos = whole(positions)[:max_num_tokens].to(torch.int64)
    column = (pos // KV_CACHE_BLOCK_SIZE).clamp_(0, block_table.shape[1] - 1)
    slots = block_table[request, column].to(torch.int64) * KV_CACHE_BLOCK_SIZE + pos % KV_CACHE_BLOCK_SIZE
    slot_mapping[:max_num_tokens] = torch.where(tokens < num_tokens, slots, PAD_ID)
