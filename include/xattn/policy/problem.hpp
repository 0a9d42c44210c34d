#pragma once
// The sizes of one evaluation, as policies see them when they are bound (bind(problem)).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace xattn {

struct problem {
  std::size_t batch = 0, q_heads = 1, kv_heads = 1, q_len = 0, kv_len = 0;
  std::size_t q_dim = 0, k_dim = 0, v_dim = 0;
  std::size_t score_rank = 4;        // 3 when Q was (B, S, D): scores are (B, Sq, Skv)
  std::vector<std::size_t> kv_lens;  // keys of each batch row when they differ (a cache's sequences); else empty

  /// The keys batch row b has: kv_len, or its sequence's length.
  std::size_t keys_of(std::size_t b) const noexcept { return kv_lens.empty() ? kv_len : kv_lens[b]; }
  /// How far batch row b's last query is from its first key when queries are the newest tokens
  /// (align::bottom_right): Skv - Sq, with each sequence's own Skv.
  std::int64_t bottom_right_shift(std::size_t b) const noexcept {
    return std::int64_t(keys_of(b)) - std::int64_t(q_len);
  }

  /// The user-facing shape of the score matrix that masks and biases broadcast against.
  std::vector<std::size_t> score_shape() const {
    if (score_rank == 3) return {batch, q_len, kv_len};
    return {batch, q_heads, q_len, kv_len};
  }
};

/// How a mask sees a block of (query, key) pairs; lets the kernel skip or take a fast path.
enum class block { hidden, visible, partial };

}  // namespace xattn
