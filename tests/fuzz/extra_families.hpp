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

/// Random rotary options for rows of d >= 2 features: either style, all or the first few features
/// (partial rotary), the default frequencies at some base or a table of them.
inline rope_options random_rope(std::size_t d, testing::rng& r) {
  rope_options o;
  o.style = r.coin() ? rope_style::half : rope_style::interleaved;
  o.dims = d % 2 == 0 && r.coin() ? 0 : 2 * r.size(1, d / 2);  // 0 (all) needs an even d
  o.base = float(r.uniform(100, 1e6));
  if (r.coin(0.2)) o.inv_freq = r.vector<float>((o.dims ? o.dims : d) / 2, 1e-4, 1.5);
  return o;
}

/// Positions of S rows in a batch of B: (S) or (B, S), anywhere up to 2^20.
inline xt::xarray<std::int64_t> random_positions(std::size_t batch, std::size_t seq, testing::rng& r) {
  xt::xarray<std::int64_t> p = xt::xarray<std::int64_t>::from_shape(r.coin() ? std::vector<std::size_t>{seq}
                                                                             : std::vector<std::size_t>{batch, seq});
  const std::size_t start = r.size(0, 1u << 20);
  const bool shuffled = r.coin(0.3);
  std::size_t k = 0;
  for (auto& x : p) x = std::int64_t(shuffled ? r.size(0, 1u << 20) : start + k++ % seq);
  return p;
}

/// rope(Q, positions, options) * trans(rope(K, ...)): both rotated, or one of them, by random
/// options (the same for both, as a model rotates); needs Dq = Dk >= 2.
struct rope_scores {
  static constexpr bool same_dim = true;
  template <class Q, class K>
  auto operator()(Q q, K k, const testing::case_sizes& s, testing::rng& r) const {
    const rope_options o = random_rope(s.Dq, r);
    auto qr = rope(q, random_positions(s.B, s.Sq, r), o);
    auto kr = rope(k, random_positions(s.B, s.Skv, r), r.coin(0.8) ? o : random_rope(s.Dq, r));
    return qr * trans(kr) / std::sqrt(double(s.Dq));
  }
};

/// Q * trans(K) + rope(Q2) * trans(rope(K2)) with each term's own scale: K2's heads one or K's,
/// Q2 and K2 of a few features of their own (MLA's decoupled rotary part), owned by the terminals.
struct sum_scores {
  static constexpr bool same_dim = true;
  template <class Q, class K>
  auto operator()(Q q, K k, const testing::case_sizes& s, testing::rng& r) const {
    using T = typename Q::value_type;
    using TK = typename K::value_type;
    const std::size_t d2 = 2 * r.size(1, 8), hk2 = r.coin() ? 1 : s.Hkv;
    auto q2 = ref(r.tensor<T>({s.B, s.Hq(), s.Sq, d2}));
    auto k2 = ref(r.tensor<TK>({s.B, hk2, s.Skv, d2}));
    const rope_options o = random_rope(d2, r);
    const double s1 = r.uniform(0.2, 1), s2 = r.uniform(0.2, 1);
    return (q * trans(k) * s1 +
            rope(q2, random_positions(s.B, s.Sq, r), o) * trans(rope(k2, random_positions(s.B, s.Skv, r), o)) * s2) /
           std::sqrt(double(s.Dq + d2));
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

/// A speculative-decoding draft tree over the newest Sq keys of each row (make_case keeps Sq within
/// every row's keys): random parents in breadth-first order, some tokens hanging from the prefix,
/// one tree for the batch or one per row; its blocks are skipped past each row block's last token.
struct draft_tree {
  auto operator()(auto s, const testing::case_sizes& z, testing::rng& r) const {
    const bool per_row = r.coin();
    xt::xarray<std::int64_t> p = xt::xarray<std::int64_t>::from_shape(per_row ? std::vector<std::size_t>{z.B, z.Sq}
                                                                              : std::vector<std::size_t>{z.Sq});
    for (std::size_t k = 0; k < p.size(); ++k) {
      const std::size_t t = k % z.Sq;
      p.data()[k] = t == 0 || r.coin(0.15) ? -1 : std::int64_t(r.size(0, t - 1));
    }
    return mask(s, tree_mask(p));
  }
};

template <class F>
concept takes_sinks = F::softmax_sinks;

}  // namespace xattn::fuzz
