#pragma once
// What a kv_cache holds and how it is split: key/value heads of head_dim features, in pages of
// page_size tokens taken from a pool of max_tokens tokens, as vLLM's paged cache.
#include "../error.hpp"
#include "../expr/rope.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>

namespace xattn {

struct kv_cache_options {
  std::size_t kv_heads = 0;
  std::size_t head_dim = 0;
  std::size_t page_size = 16;        // tokens per page
  std::size_t max_tokens = 1 << 16;  // the pool: max_tokens / page_size pages (rounded up), allocated as used
  /// Keys stored rotated: each appended key row turned by its rotary embedding at its own
  /// position in its sequence (as vLLM and llama.cpp store keys), so the queries alone take
  /// rope(Q, cache.positions(batch, n), the same options).
  std::optional<rope_options> rope{};
  /// Keys stored turned by a fixed Hadamard rotation (kernel/hadamard.hpp; after their rope, if
  /// any), which spreads outlier channels before a quantized format's scales are taken; attention
  /// turns the queries alike, so scores are unchanged but for the quantization. Scores must then
  /// be q·k (Q * trans(K)), scaled_dot, cosine or gaussian: functions of dot products and norms.
  bool rotate = false;
};

/// A sequence of a kv_cache. Ids of released sequences stay invalid (the generation tells them
/// apart from a later sequence in the same slot).
struct sequence_id {
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;
  friend bool operator==(const sequence_id&, const sequence_id&) = default;
};

namespace detail {

inline void check_cache_options(const kv_cache_options& o) {
  if (o.kv_heads == 0) fail("kv_cache: kv_heads must be > 0");
  if (o.head_dim == 0) fail("kv_cache: head_dim must be > 0");
  if (o.page_size == 0) fail("kv_cache: page_size must be > 0");
  if (o.max_tokens == 0) fail("kv_cache: max_tokens must be > 0");
  if ((o.max_tokens + o.page_size - 1) / o.page_size > UINT32_MAX)
    fail("kv_cache: max_tokens / page_size = ", o.max_tokens / o.page_size, " pages, more than 2^32 - 1");
  if (o.rope) rotary{{}, 0, *o.rope}.check(1, 1, o.head_dim, "kv_cache_options.rope keys");
  if (o.rotate && o.head_dim % 2 != 0)
    fail("kv_cache: rotate turns blocks of a power of two features; head_dim ", o.head_dim, " is odd");
}

}  // namespace detail

}  // namespace xattn
