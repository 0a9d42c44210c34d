#pragma once
// The scorers and mask families of the differential fuzzer (tests/fuzz/pipelines.hpp); every
// built-in policy and mask appears.
#include "differential.hpp"
#include "support/random.hpp"

#include <xattn/xattn.hpp>

#include <cmath>

namespace xattn::testing {

/// Scorers: (Q, K, sizes, rng) -> score expression, and whether they need Dq == Dk.
struct dot_scores {
  static constexpr bool same_dim = true;
  auto operator()(auto Q, auto K, const case_sizes& s, rng&) const { return Q * trans(K) / std::sqrt(double(s.Dq)); }
};
struct scaled_dot_scores {
  static constexpr bool same_dim = true;
  auto operator()(auto Q, auto K, const case_sizes&, rng&) const { return score(scaled_dot{}, Q, K); }
};
struct additive_scores {
  static constexpr bool same_dim = false;
  auto operator()(auto Q, auto K, const case_sizes& s, rng& r) const {
    const std::size_t h = r.size(1, 40);
    return score(additive{r.tensor<float>({h, s.Dq}), r.tensor<float>({h, s.Dk}), r.tensor<float>({h})}, Q, K);
  }
};
struct bilinear_scores {
  static constexpr bool same_dim = false;
  auto operator()(auto Q, auto K, const case_sizes& s, rng& r) const {
    return score(bilinear{r.tensor<double>({s.Dq, s.Dk}, -0.5, 0.5)}, Q, K);
  }
};
struct gaussian_scores {
  static constexpr bool same_dim = true;
  auto operator()(auto Q, auto K, const case_sizes& s, rng& r) const {
    return score(gaussian{r.uniform(0.5, 2) * std::sqrt(double(s.Dq))}, Q, K);
  }
};
struct cosine_scores {
  static constexpr bool same_dim = true;
  auto operator()(auto Q, auto K, const case_sizes&, rng& r) const { return score(cosine{r.uniform(0.1, 2)}, Q, K); }
};
/// A user policy of (q, k) only: the pair-by-pair path. It reads min(dq, dk) features, so it says
/// in validate() that it accepts queries and keys of different sizes; its weight is learnable.
struct mixed_l1 {
  learnable<> w = 1.0;
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::abs;  // generic: the backward differentiates it (and w) on the tape
    T s = T(w) * q[0] * k[0];
    for (std::size_t d = 1; d < std::min(q.size(), k.size()); ++d) s += abs(q[d] - k[d]);
    return s;
  }
  void validate(std::size_t, std::size_t) const {}
  auto parameters() const { return std::tie(w); }
};
struct user_scores {
  static constexpr bool same_dim = false;
  auto operator()(auto Q, auto K, const case_sizes&, rng& r) const { return score(mixed_l1{r.uniform(0.5, 2)}, Q, K); }
};

/// Mask families: (scores, sizes, rng) -> masked expression.
struct no_mask {
  auto operator()(auto s, const case_sizes&, rng&) const { return s; }
};
struct lengths_1d {
  auto operator()(auto s, const case_sizes& z, rng& r) const {
    xt::xtensor<int, 1> lens = xt::xtensor<int, 1>::from_shape({z.B});
    for (auto& l : lens) l = int(r.size(0, z.Skv));
    return mask(s, lengths(lens));
  }
};
struct lengths_2d_zero {
  auto operator()(auto s, const case_sizes& z, rng& r) const {
    xt::xtensor<long, 2> lens = xt::xtensor<long, 2>::from_shape({z.B, z.Sq});
    for (auto& l : lens) l = long(r.size(0, z.Skv));
    return mask(s, lengths(lens, masked_rows::zero));
  }
};
struct causal_any {
  auto operator()(auto s, const case_sizes&, rng& r) const {
    return mask(s, causal(r.coin() ? align::top_left : align::bottom_right));
  }
};
struct window_any {
  auto operator()(auto s, const case_sizes&, rng& r) const {
    return mask(s, window(std::int64_t(r.size(0, 20)), std::int64_t(r.size(0, 20)),
                          r.coin() ? align::top_left : align::bottom_right));
  }
};
struct bool_mask_broadcast {
  auto operator()(auto s, const case_sizes& z, rng& r) const {
    xt::xarray<bool> m = r.coin() ? xt::xarray<bool>::from_shape({z.Sq, z.Skv}) : xt::xarray<bool>::from_shape({z.Skv});
    for (auto& x : m) x = r.coin(0.7);
    return mask(s, bool_mask(std::move(m)));  // moved: the expression owns it
  }
};
struct softcap_bias {
  auto operator()(auto s, const case_sizes& z, rng& r) const {
    xt::xarray<float> b = r.tensor<float>({z.Sq, z.Skv}, -3, 3);
    for (auto& x : b)
      if (r.coin(0.2)) x = -std::numeric_limits<float>::infinity();
    return softcap(s, r.uniform(0.5, 5)) + bias(std::move(b));
  }
};
struct alibi_lengths_causal {  // filled and excluded masks together, modifiers first
  auto operator()(auto s, const case_sizes& z, rng& r) const {
    xt::xtensor<int, 1> lens = xt::xtensor<int, 1>::from_shape({z.B});
    for (auto& l : lens) l = int(r.size(0, z.Skv));
    return mask(mask(alibi(s, alibi_op::standard_slopes(z.Hq())), lengths(lens)), causal());
  }
};
struct predicate_offsets {
  auto operator()(auto s, const case_sizes& z, rng& r) const {
    std::vector<int> off(z.B);
    for (auto& o : off) o = int(r.size(0, 10)) - 5;
    auto p = predicate(
        [](std::size_t b, std::size_t h, std::size_t i, std::size_t j) { return (b + 3 * h + i * j) % 5 != 1; });
    return mask(mask(softcap(s, 4.0) * 0.7, causal_offsets(off)), p);
  }
};
struct documents_causal {  // packed documents in runs (ids per batch, or from offsets), or ids in no order
  auto operator()(auto s, const case_sizes& z, rng& r) const {
    const auto ids_for = [&](std::size_t n, bool runs) {
      std::vector<int> ids(n);
      int id = 0;
      for (auto& x : ids) x = runs ? (id += r.coin(0.15)) : int(r.size(0, 3));
      return ids;
    };
    const bool runs = r.coin(0.8);
    xt::xtensor<int, 2> q = xt::xtensor<int, 2>::from_shape({z.B, z.Sq}),
                        k = xt::xtensor<int, 2>::from_shape({z.B, z.Skv});
    for (std::size_t b = 0; b < z.B; ++b) {
      const auto qi = ids_for(z.Sq, runs), ki = z.Sq == z.Skv && r.coin() ? qi : ids_for(z.Skv, runs);
      std::copy(qi.begin(), qi.end(), &q(b, 0));
      std::copy(ki.begin(), ki.end(), &k(b, 0));
    }
    return mask(mask(s, documents(q, k)), causal(r.coin() ? align::top_left : align::bottom_right));
  }
};

}  // namespace xattn::testing
