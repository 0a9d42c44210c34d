#pragma once
// Pipelines the shared differential families (tests/eval/oracle/differential_cases.hpp) do not reach:
// scores given as a tensor, rows that no key survives in, and excluding masks mixed with filling
// ones. Same calling convention as those families.
#include "eval/oracle/differential_cases.hpp"

#include <limits>

namespace xattn::fuzz {

/// d2l's masked_softmax(X, valid_lens): the scores are a tensor (B, H, Sq, Skv) or (B, Sq, Skv).
struct tensor_scores {
  static constexpr bool same_dim = false;
  template <class Q, class K>
  auto operator()(Q, K, const testing::case_sizes& s, testing::rng& r) const {
    using T = typename Q::value_type;
    const auto shape =
        s.three_d ? std::vector<std::size_t>{s.B, s.Sq, s.Skv} : std::vector<std::size_t>{s.B, s.Hq(), s.Sq, s.Skv};
    return ref(r.tensor<T>(shape, -3, 3)) / r.uniform(0.5, 2);  // a temporary: the terminal owns it
  }
};

/// A bool mask hiding whole query rows (and random keys elsewhere), under bottom-right causal,
/// which hides the first Sq - Skv rows on its own when Sq > Skv.
struct dead_rows {
  auto operator()(auto s, const testing::case_sizes& z, testing::rng& r) const {
    xt::xarray<bool> m = xt::xarray<bool>::from_shape({z.Sq, z.Skv});
    for (std::size_t i = 0; i < z.Sq; ++i) {
      const bool dead = r.coin(0.3);
      for (std::size_t j = 0; j < z.Skv; ++j) m(i, j) = !dead && r.coin(0.8);
    }
    return mask(mask(s, bool_mask(std::move(m))), causal(align::bottom_right));
  }
};

/// -inf bias rows (excluded) under d2l's filling lengths mask: a row can end up seeing only
/// filled keys, or nothing.
struct inf_bias_fill {
  auto operator()(auto s, const testing::case_sizes& z, testing::rng& r) const {
    xt::xarray<double> b =
        z.three_d ? r.tensor<double>({z.B, z.Sq, z.Skv}, -2, 2) : r.tensor<double>({z.B, 1, z.Sq, z.Skv}, -2, 2);
    for (auto& x : b)
      if (r.coin(0.25)) x = -std::numeric_limits<double>::infinity();
    xt::xtensor<int, 1> lens = xt::xtensor<int, 1>::from_shape({z.B});
    for (auto& l : lens) l = int(r.size(0, z.Skv));
    return mask(s + bias(std::move(b)), lengths(lens));
  }
};

/// A window around the diagonal, intersected with per-row lengths that zero dead rows.
struct window_rows_zero {
  auto operator()(auto s, const testing::case_sizes& z, testing::rng& r) const {
    xt::xtensor<std::int64_t, 2> lens = xt::xtensor<std::int64_t, 2>::from_shape({z.B, z.Sq});
    for (auto& l : lens) l = r.coin(0.2) ? 0 : std::int64_t(r.size(0, z.Skv));
    const auto w = window(std::int64_t(r.size(0, 40)), std::int64_t(r.size(0, 40)),
                          r.coin() ? align::top_left : align::bottom_right);
    return mask(mask(s, w), lengths(lens, masked_rows::zero));
  }
};

/// Learned sinks (some heads without one: -inf) under a sliding window that keeps sink tokens;
/// run_on puts sink_logits() into the softmax.
struct sinks_window {
  static constexpr bool softmax_sinks = true;
  auto operator()(auto s, const testing::case_sizes& z, testing::rng& r) const {
    (void)z;
    return mask(s, window(std::int64_t(r.size(0, 40)), std::int64_t(r.size(0, 40)),
                          sink_tokens(std::int64_t(r.size(0, 6))), r.coin() ? align::top_left : align::bottom_right));
  }
  xt::xtensor<float, 1> sink_logits(const testing::case_sizes& z, testing::rng& r) const {
    xt::xtensor<float, 1> t = r.vector<float>(z.Hq(), -2, 3);
    for (auto& x : t)
      if (r.coin(0.2)) x = -std::numeric_limits<float>::infinity();
    return t;
  }
};

template <class F>
concept takes_sinks = F::softmax_sinks;

}  // namespace xattn::fuzz
