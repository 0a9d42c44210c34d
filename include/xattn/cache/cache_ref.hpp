#pragma once
// cache.keys(batch) and cache.values(batch): a batch of a kv_cache's sequences as a terminal of any
// attention expression, (B, kv_heads, longest, head_dim), read in place from the pages. Each
// sequence keeps its own length: planning excludes the keys past it (sequence_lengths_mask), and
// bottom-right alignment (causal, window, ALiBi) is per sequence.
#include "../expr/base.hpp"
#include "../expr/tensor_ref.hpp"
#include "../form.hpp"
#include "../types.hpp"
#include "paged_view.hpp"

#include <memory>
#include <vector>

namespace xattn {

template <class T>
struct cache_ref : expr_base<cache_ref<T>> {
  static_assert(is_cache_element_v<T>, "xattn: cache terminals hold the pages of a format of cache/formats.hpp");
  using value_type = T;
  static constexpr std::size_t rank = 4;
  static constexpr bool packed = false;

  paged_view<T> view;
  form how = form::bhsd;
  std::shared_ptr<const void> owned;  // the page table
  std::vector<std::size_t> lengths;   // each sequence's tokens
  bool rotated = false;               // keys turned by rope at their positions in the cache
  std::size_t hadamard = 0;           // keys turned by a Hadamard rotation of blocks of this size (options.rotate)

  std::vector<std::size_t> user_shape() const {
    const auto& s = view.at.shape;
    return {s[0], s[1], s[2], s[3]};
  }
};

template <class T>
inline constexpr bool is_terminal_v<cache_ref<T>> = true;
template <class T>
inline constexpr bool is_cache_terminal_v<cache_ref<T>> = true;

/// rope() of a cache terminal: the cache turns its keys as they are appended instead, each at its
/// own position in its sequence (a rotation at read time would recompute every step's angles).
template <class T, class... A>
auto rope(const cache_ref<T>&, A&&...) {
  static_assert(sizeof(T) == 0,
                "xattn: rope(cache.keys(...)): a kv_cache stores its keys rotated as they are appended; construct it "
                "with .rope = rope_options{...} and apply rope() to the queries only");
}

}  // namespace xattn
