// torchtpu::paged_attention's meta function: the checks a caller's mistakes
// meet first (PyTorch's error types, the process lives on) and the output's
// shape, [tokens, heads, head_size] in the query's dtype. The op itself is
// the rule of csrc/lower/paged_attention.c, which says what it computes;
// torchtpu/vllm/attention.py calls it.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace torchtpu {
namespace {

void check_index(const at::Tensor& t, const char* name, int64_t rank) {
  TORCH_CHECK(t.dim() == rank, "paged_attention: ", name, " must be ", rank, "-d, got ", t.dim(), "-d");
  TORCH_CHECK(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong, "paged_attention: ", name,
              " must be int32 or int64, got ", t.scalar_type());
}

at::Tensor paged_attention_meta(const at::Tensor& query, const std::optional<at::Tensor>& key,
                                const std::optional<at::Tensor>& value, at::Tensor& kv_cache,
                                const at::Tensor& slot_mapping, const at::Tensor& block_table,
                                const at::Tensor& seq_lens, const at::Tensor& query_start_loc, int64_t max_query_len,
                                double scale, int64_t sliding_window, double soft_cap,
                                const std::optional<at::Tensor>& alibi_slopes) {
  TORCH_CHECK(query.dim() == 3, "paged_attention: query must be [tokens, heads, head_size], got ", query.sizes());
  TORCH_CHECK(at::isFloatingType(query.scalar_type()), "paged_attention: query must be floating point, got ",
              query.scalar_type());
  const int64_t heads = query.size(1), d = query.size(2);
  TORCH_CHECK(kv_cache.dim() == 4 && kv_cache.size(3) == 2 * d,
              "paged_attention: kv_cache must be [blocks, kv_heads, block_size, 2 * head_size] with head_size ", d,
              ", got ", kv_cache.sizes());
  TORCH_CHECK(at::isFloatingType(kv_cache.scalar_type()), "paged_attention: kv_cache must be floating point, got ",
              kv_cache.scalar_type());
  const int64_t kv_heads = kv_cache.size(1);
  TORCH_CHECK(kv_heads > 0 && heads % kv_heads == 0, "paged_attention: query heads (", heads,
              ") must be a multiple of the cache's kv heads (", kv_heads, ")");
  TORCH_CHECK(kv_cache.size(2) > 0, "paged_attention: block_size must be positive");
  TORCH_CHECK(key.has_value() == value.has_value(), "paged_attention: key and value must be given together");
  check_index(slot_mapping, "slot_mapping", 1);
  if (key.has_value()) {
    for (const at::Tensor* t : {&*key, &*value})
      TORCH_CHECK(t->dim() == 3 && t->size(1) == kv_heads && t->size(2) == d &&
                      t->size(0) >= slot_mapping.size(0),
                  "paged_attention: key and value must be [tokens, kv_heads, head_size] = [>= ", slot_mapping.size(0),
                  ", ", kv_heads, ", ", d, "], got ", t->sizes());
  }
  check_index(block_table, "block_table", 2);
  check_index(seq_lens, "seq_lens", 1);
  check_index(query_start_loc, "query_start_loc", 1);
  const int64_t reqs = block_table.size(0);
  TORCH_CHECK(seq_lens.size(0) == reqs && query_start_loc.size(0) == reqs + 1, "paged_attention: ", reqs,
              " requests in block_table need seq_lens of ", reqs, " and query_start_loc of ", reqs + 1,
              ", got ", seq_lens.size(0), " and ", query_start_loc.size(0));
  TORCH_CHECK(max_query_len >= 0, "paged_attention: max_query_len must be non-negative, got ", max_query_len);
  TORCH_CHECK(sliding_window >= 0, "paged_attention: sliding_window must be non-negative, got ", sliding_window);
  TORCH_CHECK(soft_cap >= 0, "paged_attention: soft_cap must be non-negative, got ", soft_cap);
  if (alibi_slopes.has_value())
    TORCH_CHECK(alibi_slopes->dim() == 1 && alibi_slopes->size(0) == heads,
                "paged_attention: alibi_slopes must be [heads] = [", heads, "], got ", alibi_slopes->sizes());
  return at::empty(query.sizes(), query.options().device(at::kMeta));
}

}  // namespace
}  // namespace torchtpu

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) { m.impl("paged_attention", &torchtpu::paged_attention_meta); }
