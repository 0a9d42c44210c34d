#pragma once
// A user scoring policy that learns one weight per feature: s = Σ_d w_d q_d k_d / √D, a diagonal
// bilinear form. Separable: queries are weighted once per row (fq = w ∘ q / √D, fk = k), so the
// pairs run on the dot-product microkernels. The weights are learnable; grad() differentiates
// them in its row pass, on the tape, with no derivative written here (g.dscore[d] = d loss / d w_d).
#include <xattn/error.hpp>
#include <xattn/learnable.hpp>

#include <cmath>
#include <cstddef>
#include <span>
#include <tuple>
#include <vector>

namespace dsl {

// [snippet weighted_dot]
struct weighted_dot {
  static constexpr bool separable = true;
  std::vector<xattn::learnable<>> w;  // one weight per feature

  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += T(w[d]) * q[d] * k[d];
    return s / T(std::sqrt(double(q.size())));
  }
  void validate(std::size_t dq, std::size_t dk) const {
    if (dq != dk || w.size() != dq)
      xattn::fail("weighted_dot: ", w.size(), " weights for queries of size ", dq, " and keys of size ", dk);
  }
  std::size_t feature_size(std::size_t dq, std::size_t) const { return dq; }
  template <class T>
  T project_query(std::span<const T> q, std::span<T> fq) const {
    const T c = T(1 / std::sqrt(double(q.size())));
    for (std::size_t d = 0; d < q.size(); ++d) fq[d] = T(w[d]) * q[d] * c;
    return 0;
  }
  template <class T>
  T project_key(std::span<const T> k, std::span<T> fk) const {
    for (std::size_t d = 0; d < k.size(); ++d) fk[d] = k[d];
    return 0;
  }
  auto parameters() const { return std::tie(w); }
};
// [end weighted_dot]

}  // namespace dsl
