#pragma once
// A kv_cache's sequences in a ring. The ring passes each rank's keys and values around as one
// contiguous block, so cache terminals are gathered once per call into (B, H, n, D) tensors
// (quantized pages dequantized to float, other pages in their own type) and the plan's sequence-lengths
// mask is dropped: every sequence of the batch must hold exactly this rank's rows.
#include "../cache/cache_ref.hpp"
#include "../eval/plan/plan.hpp"
#include "../hana.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace xattn::mpi::detail {

/// The element type a cache's pages travel in.
template <class T>
using gathered_t = std::conditional_t<is_quantized_v<T>, float, T>;

/// x itself, or a cache terminal's rows gathered into an owned tensor (rows past a sequence's end
/// read whatever page the view points them at; the length check refuses such batches).
template <class X>
auto gathered(const X& x) {
  if constexpr (is_cache_terminal_v<X>) {
    using T = gathered_t<typename X::value_type>;
    const auto& v = x.view;
    const auto& sh = v.at.shape;
    auto own = std::make_shared<std::vector<T>>(sh[0] * sh[1] * sh[2] * sh[3]);
    T* to = own->data();
    for (std::size_t b = 0; b < sh[0]; ++b)
      for (std::size_t h = 0; h < sh[1]; ++h)
        for (std::size_t j = 0; j < sh[2]; ++j)
          for (std::size_t d = 0; d < sh[3]; ++d) *to++ = T(v(b, h, j, d));
    tensor_ref<T, 4> t;
    t.view = {own->data(), layout<4>::row_major(sh)};
    t.owned = std::move(own);
    return t;
  } else {
    return x;
  }
}

/// Why a cache terminal cannot take part in the ring ("" if it can).
template <class X>
std::string cache_error(const X& x, const char* what) {
  if constexpr (is_cache_terminal_v<X>) {
    for (std::size_t b = 0; b < x.lengths.size(); ++b)
      if (x.lengths[b] != x.view.at.shape[2])
        return std::string(what) + ": sequence " + std::to_string(b) + " of the batch holds " +
               std::to_string(x.lengths[b]) + " tokens and the longest " + std::to_string(x.view.at.shape[2]) +
               "; in a ring every sequence holds this rank's rows (local_rows())";
    if (x.rotated)
      return std::string(what) +
             ": the cache turns its keys by rope at their positions in the cache, not at the ring's global "
             "positions; construct it without .rope and apply rope() to Q and K before appending";
  }
  return {};
}

/// The plan p with its cache terminals gathered and the sequence-lengths mask that reading a cache
/// added dropped; error says why this rank's caches cannot take part ("" if they can). A plan
/// without cache terminals is p itself (a reference, not a copy).
template <class Plan>
decltype(auto) without_cache(const Plan& p, std::string& error) {
  if constexpr (reads_cache_v<Plan>) {
    using base_t = std::decay_t<decltype(p.base)>;
    static_assert(!base_t::tensor_scores && !is_sum_base_v<base_t>);  // refused by check_ring_expression
    static_assert(std::is_same_v<std::decay_t<decltype(hana::back(p.masks))>, sequence_lengths_mask>);
    error = cache_error(p.base.k, "the keys");
    if (error.empty()) error = cache_error(p.v, "the values");
    auto k = gathered(p.base.k);
    auto v = gathered(p.v);
    auto masks = hana::drop_back(p.masks);
    using B = policy_base<typename base_t::policy_type, decltype(p.base.q), decltype(k)>;
    return with_values(with_masks(with_base(p, B{p.base.policy, p.base.q, std::move(k)}), std::move(masks)),
                       std::move(v));
  } else {
    return p;
  }
}

}  // namespace xattn::mpi::detail
