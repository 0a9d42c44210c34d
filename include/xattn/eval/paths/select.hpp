#pragma once
// Which score path a plan's base takes, decided at compile time from the policy's capabilities
// (as Eigen picks an evaluator per expression type). Each path is one type in one file with the
// same members -- facts, keys (built once per evaluation), tiles (one per thread: load_queries,
// scores) -- so the worker never knows which one it runs, and a new path is one new file.
#include "../../policy/concepts.hpp"
#include "../../policy/dot.hpp"
#include "dot_features.hpp"
#include "dot_identity.hpp"
#include "dot_pairs.hpp"
#include "pair_features.hpp"
#include "pair_raw.hpp"
#include "tensor_scores.hpp"

#include <type_traits>

namespace xattn {

namespace detail {

template <class Acc, class Base>
auto select_path() {
  if constexpr (Base::tensor_scores) {
    return std::type_identity<tensor_scores_path<Acc, Base>>{};
  } else {
    using P = typename Base::policy_type;
    if constexpr (std::is_same_v<P, dot> && takes_bf16_pairs_v<Acc, Base>)
      return std::type_identity<dot_pairs_path<Acc, Base>>{};
    else if constexpr (std::is_same_v<P, dot>)  // identity projections: the keys are their own features
      return std::type_identity<dot_identity_path<Acc, Base>>{};
    else if constexpr (separable<P>())
      return std::type_identity<dot_features_path<Acc, Base>>{};
    else if constexpr (combines_in<P, float> || combines_in<P, double>)
      return std::type_identity<pair_features_path<Acc, Base>>{};
    else
      return std::type_identity<pair_raw_path<Acc, Base>>{};
  }
}

}  // namespace detail

/// The score path of a plan base, for a kernel accumulating in Acc.
template <class Acc, class Base>
using path_t = typename decltype(detail::select_path<Acc, Base>())::type;

/// Its name: "dot_identity", "dot_bf16", "dot_features", "pair_features", "pair_raw" or "tensor".
template <class Base, class Acc = float>
inline constexpr std::string_view path_name_v = path_t<Acc, Base>::name;

}  // namespace xattn
