#pragma once
// The pipeline tables: every scorer and mask family of tests/eval/oracle/differential_cases.hpp plus the
// fuzzer's own, and which (element type, storage, scorer, masks) combinations are instantiated.
// The full cross product for float on rank-0 terminals (XATTN_FUZZ_CROSS; without it, each scorer
// with the branch_masks and dot with every family); the other terminal types and double get the
// combinations that exercise what differs for them (addressing, SIMD width) without multiplying
// compile time.
#include "extra_families.hpp"

#include <boost/hana.hpp>

#include <array>
#include <string_view>
#include <type_traits>
#include <utility>

namespace xattn::fuzz {

namespace hana = boost::hana;

inline constexpr auto scorers =
    hana::make_tuple(testing::dot_scores{}, testing::scaled_dot_scores{}, testing::additive_scores{},
                     testing::bilinear_scores{}, testing::gaussian_scores{}, testing::cosine_scores{},
                     testing::user_scores{}, tensor_scores{}, rope_scores{}, sum_scores{});
inline constexpr std::array<std::string_view, 10> scorer_names{
    "dot", "scaled_dot", "additive", "bilinear", "gaussian", "cosine", "user-policy", "tensor-scores", "rope", "sum"};

inline constexpr auto mask_families =
    hana::make_tuple(testing::no_mask{}, testing::lengths_1d{}, testing::lengths_2d_zero{}, testing::causal_any{},
                     testing::window_any{}, testing::bool_mask_broadcast{}, testing::softcap_bias{},
                     testing::alibi_lengths_causal{}, testing::predicate_offsets{}, dead_rows{}, inf_bias_fill{},
                     window_rows_zero{}, testing::documents_causal{}, sinks_window{}, draft_tree{});
inline constexpr std::array<std::string_view, 15> mask_names{"none",
                                                             "lengths-1d",
                                                             "lengths-2d-zero",
                                                             "causal",
                                                             "window",
                                                             "bool-mask-broadcast",
                                                             "softcap+bias",
                                                             "alibi+lengths+causal",
                                                             "predicate+causal-offsets",
                                                             "dead-rows",
                                                             "inf-bias+fill",
                                                             "window+lengths-zero",
                                                             "documents+causal",
                                                             "sinks+window-sink-tokens",
                                                             "draft-tree"};

static_assert(hana::length(scorers) == scorer_names.size() && hana::length(mask_families) == mask_names.size());

inline constexpr std::size_t dot = 0, tensor = 7, rotary = 8, summed = 9;

/// The scorers on rotated rows: their operands need at least one pair of features.
constexpr bool rotates_rows(std::size_t s) { return s == rotary || s == summed; }
inline constexpr std::size_t no_masks = 0, lengths_2d = 2, causal_masks = 3, softcap_bias = 6, dead = 9, tree = 14;

enum class terminal { rank0, raw, packed, cache };

/// Operand element types: all float, all double, all bfloat16, all float16, or mixed (float
/// queries, bfloat16 keys, float16 values: a 16-bit KV cache read by float queries).
enum class element { f32, f64, bf16, f16, mixed };

template <element E>
struct element_types {
  using q = std::conditional_t<
      E == element::f64, double,
      std::conditional_t<E == element::bf16, bfloat16, std::conditional_t<E == element::f16, float16, float>>>;
  using k = std::conditional_t<E == element::mixed, bfloat16, q>;
  using v = std::conditional_t<E == element::mixed, float16, q>;
};

constexpr bool is_16bit(element e) { return e == element::bf16 || e == element::f16 || e == element::mixed; }

/// The mask families that reach every branch of a scoring path: none, zero-length rows, causal
/// skips, modifiers with a bias, dead rows.
constexpr bool branch_masks(std::size_t m) {
  return m == no_masks || m == lengths_2d || m == causal_masks || m == softcap_bias || m == dead;
}

/// Which combinations exist (used at compile time to instantiate and at run time to draw). 16-bit
/// operands change how operands enter the tiles (widened in registers, when packed or read in
/// place; bf16 pairs for vdpbf16ps where the build has it): every family with dot, every scorer
/// without masks and with causal skips; mixed types with dot; other terminals with dot and causal.
/// Cache terminals (no double, no mixed pages) with dot, whose keys are read where the pages hold them.
constexpr bool allowed(element e, terminal t, std::size_t s, std::size_t m) {
  const bool is_double = e == element::f64;
  if (t == terminal::cache)  // a kv_cache's pages: float with every family, 16-bit with causal
    return s == dot && (e == element::f32 || ((e == element::bf16 || e == element::f16) && m == causal_masks));
  if (is_16bit(e)) {
    if (t != terminal::rank0) return s == dot && m == causal_masks;
    return s == dot || (e != element::mixed && s != tensor && (m == no_masks || m == causal_masks));
  }
  const bool crossed = XATTN_FUZZ_CROSS || branch_masks(m);
  if (s == tensor) return t == terminal::rank0 && (is_double ? m == causal_masks || m == lengths_2d : crossed);
  if (!is_double) return t == terminal::rank0 ? crossed || s == dot : s == dot || m == causal_masks;
  if (t == terminal::rank0) return s == dot || m == causal_masks || m == no_masks;
  return s == dot && (m == causal_masks || m == lengths_2d || m == softcap_bias || m == dead);
}

/// Whether scorer s takes any mask family on (e, t): run_on instantiates a scorer only then (clang
/// instantiates a scorer's call in the mask family's lambda eagerly, as it does not depend on it).
constexpr bool scorer_allowed(element e, terminal t, std::size_t s) {
  for (std::size_t m = 0; m < mask_names.size(); ++m)
    if (allowed(e, t, s, m)) return true;
  return false;
}

/// Which of those also check grad() against reference_grad() (float and double operands): dot and the
/// tensor scores with their whole mask table; the policies (feature-space backward) with the branch_masks --
/// the rest would add instantiations, not paths. (The sanitizer build of CI leaves the policies out,
/// XATTN_FUZZ_POLICY_GRADS=0: test_grad runs every policy's backward under the sanitizers, and their
/// instantiations would double its build.)
constexpr bool grad_checked(element e, terminal t, std::size_t s, std::size_t m) {
  if (t == terminal::raw || t == terminal::cache || is_16bit(e)) return false;
  if (s == dot || s == tensor || rotates_rows(s)) return true;
  return XATTN_FUZZ_POLICY_GRADS && branch_masks(m);
}

/// One instantiated pipeline: element type, terminal type, scorer, mask family.
struct combination {
  element elem;
  terminal term;
  std::size_t scorer, masks;
};

/// f(c) for every allowed combination, in a fixed order.
template <class F>
constexpr void for_each_combination(F&& f) {
  constexpr std::array<element, 5> elements{element::f32, element::f64, element::bf16, element::f16, element::mixed};
  for (std::size_t e = 0; e < (XATTN_FUZZ_16BIT ? 5 : 2); ++e)
    for (terminal t : {terminal::rank0, terminal::raw, terminal::packed, terminal::cache})
      for (std::size_t s = 0; s < scorer_names.size(); ++s)
        for (std::size_t m = 0; m < mask_names.size(); ++m)
          if (allowed(elements[e], t, s, m)) f(combination{elements[e], t, s, m});
}

/// How many combinations are allowed: the first that many cases of a run take one each.
constexpr std::size_t combination_count() {
  std::size_t n = 0;
  for_each_combination([&](combination) { ++n; });
  return n;
}

/// The reference differentiates a policy by one dual evaluation of its operator() per input
/// element and pair, O(pairs · (Dq + Dk)²·h) for additive: policies are checked on the cases with
/// at most 4096 (query, key) pairs over all heads, which keeps the fixed-seed slice
/// in seconds.
inline bool grad_affordable(std::size_t s, const testing::case_sizes& z) {
  return s == dot || s == tensor || z.B * z.Hq() * z.Sq * z.Skv <= 4096;
}

constexpr bool needs_same_dim(std::size_t s) {
  bool same = false;
  std::size_t i = 0;
  hana::for_each(scorers, [&](auto sc) { same = i++ == s ? decltype(sc)::same_dim : same; });
  return same;
}

/// f(integral_constant<I>) for the runtime index i < N.
template <std::size_t N, class F>
void with_index(std::size_t i, F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((i == I ? (f(std::integral_constant<std::size_t, I>{}), 0) : 0), ...);
  }
  (std::make_index_sequence<N>{});
}

}  // namespace xattn::fuzz
