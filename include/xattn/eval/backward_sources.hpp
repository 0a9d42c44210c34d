#pragma once
// Where the backward's scores come from, one type per kind (the worker branches on the type):
//   dot_source        S = Q·Kᵀ on the plan's own Q and K;
//   separable_source  S = fq·fkᵀ + α_i + β_j on a separable policy's projected features;
//                     both run the score and gradient products on the microkernels;
//   pair_source       S = c(fq, fk) + α_i + β_j pair by pair: a combine policy on its features,
//                     or a policy with operator() only on the raw rows (zero terms);
//   tensor_source     S = X.
// Every S above is multiplied by the plan's scale before the modifiers.
#include "../layout.hpp"
#include "../learnable.hpp"

#include <cstddef>

namespace xattn {

/// The plan's own Q and K (Q * trans(K)), read in place or packed; no terms.
template <class QV, class KV>
struct dot_source {
  QV q;               // (B, Hq, Sq, n)
  KV k;               // (B, Hkv, Skv, n)
  std::size_t n = 0;  // row length of q and k
};

/// Projected features in the accumulator type, with their additive terms.
template <class Acc>
struct features {
  strided_view<const Acc> q, k;  // (B, Hq, Sq, n), (B, Hkv, Skv, nk)
  std::size_t n = 0, nk = 0;     // equal, except for raw rows of a pair policy
  const Acc* alpha = nullptr;    // (B, Hq, Sq) row-major
  const Acc* beta = nullptr;     // (B, Hkv, Skv) row-major
};

template <class Acc>
struct separable_source {
  features<Acc> f;
};

template <class Acc, class P>
struct pair_source {
  using policy_type = P;
  features<Acc> f;
  const P* policy = nullptr;
  std::size_t params = 0;  // combine_parameter_count(policy)
  parameter_slots slots;   // automatic_slots(policy): the learnables the tape differentiates
};

struct tensor_source {};

template <class Source>
inline constexpr bool is_pair_source_v = false;
template <class Acc, class P>
inline constexpr bool is_pair_source_v<pair_source<Acc, P>> = true;
template <class Source>
inline constexpr bool is_separable_source_v = false;
template <class Acc>
inline constexpr bool is_separable_source_v<separable_source<Acc>> = true;

}  // namespace xattn
