#pragma once
// Which score path a plan's base takes, decided at compile time from the policy's capabilities.
#include "../policy/concepts.hpp"
#include "plan.hpp"

namespace xattn {

enum class score_path {
  dot_identity,   // Q·Kᵀ straight from the operands (dot, Q * trans(K))
  dot_features,   // separable with projections: project once, then the dot-product path
  pair_features,  // projections + combine(fq, fk) per pair (additive)
  pair_raw,       // only operator()(q, k): called per pair on the raw rows
  tensor          // scores given as a tensor
};

template <class Base>
constexpr score_path path_of() {
  if constexpr (requires { std::declval<Base>().x; }) {
    return score_path::tensor;
  } else {
    using P = decltype(std::declval<Base>().policy);
    constexpr bool features = decltype(caps::has_features(std::declval<P>()))::value;
    constexpr bool combine = decltype(caps::has_combine(std::declval<P>()))::value;
    if constexpr (caps::separable<P>())
      return features ? score_path::dot_features : score_path::dot_identity;
    else if constexpr (features && combine)
      return score_path::pair_features;
    else
      return score_path::pair_raw;
  }
}

}  // namespace xattn
