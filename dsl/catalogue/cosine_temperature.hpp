#pragma once
// A user scoring policy with nothing but operator(): cosine similarity sharpened by a
// temperature. The plan runs it pair by pair inside the fused loop (no projections declared);
// written generically, so grad() differentiates it without a derivative written here -- the
// temperature too, which parameters() lists as learnable (g.dscore[0]).
#include <xattn/learnable.hpp>

#include <cmath>
#include <span>
#include <tuple>

namespace dsl {

// [snippet cosine_temperature]
struct cosine_with_temperature {
  xattn::learnable<> tau = 0.1;

  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::sqrt;  // unqualified below: grad() differentiates it on xattn::var
    T qk = 0, qq = 0, kk = 0;
    for (std::size_t d = 0; d < q.size(); ++d) {
      qk += q[d] * k[d];
      qq += q[d] * q[d];
      kk += k[d] * k[d];
    }
    const T norm = sqrt(qq * kk);
    return norm == 0 ? T(0) : qk / (norm * T(tau));
  }
  auto parameters() const { return std::tie(tau); }  // what grad() differentiates
};
// [end cosine_temperature]

}  // namespace dsl
