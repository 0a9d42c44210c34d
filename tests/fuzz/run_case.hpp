#pragma once
// Build and check one case: operands in the drawn storage, the drawn pipeline over them, then
// eval() under the drawn schedule against reference() of the same expression -- and, for the
// combinations grad_checked() names (rank-0 and packed terminals), its gradients against
// reference_grad().
#include "check.hpp"
#include "check_grad.hpp"
#include "storage.hpp"

namespace xattn::fuzz {

/// Rows rotated for vdpbf16ps are rounded to bfloat16 (relative 2^-9 per feature, on both sides),
/// the only score error beyond fp32 sums: |ds| <= 2^-8 (1 + 2^-9) scale |q|_2 |k|_2 over the rotated
/// features (rotation keeps the norm), and an output moves by at most 2 max|ds| max|V|. Operands lie in
/// [-1, 1] (Q in [-a, a]), so |q|_2 |k|_2 <= a d, and scale d <= sqrt(Dq + 16) for both rotating
/// scorers (rope: d <= Dq at 1/sqrt(Dq); sums: d <= 16 at <= 1/sqrt(Dq + d), their Q2 in [-1, 1]).
template <element E>
double rotated_bf16_rounding(const fuzz_case& c) {
  if (E != element::bf16 || !kernel::has_dpbf16 || !rotates_rows(c.scorer)) return 0;
  return 2 * 0x1p-8 * (1 + 0x1p-9) * c.q_amplitude * std::sqrt(double(c.sizes.Dq + 16));
}

/// q4 keys multiply int16 codes of the queries (kernel/qk_q4.hpp), each feature moved by at most
/// max|q| / 65534: a score by scale Σ|k| max|q| / 65534 <= a sqrt(Dq) / 65534 (cache terminals
/// score by dot at 1 / sqrt(Dq), and q4_0's values keep |k| <= 1), an output by twice that times
/// max|V|. Keys quantized per channel (q4c) are decoded to floats.
inline double q4_query_rounding(const fuzz_case& c) {
  if (!c.q4_pages || c.q4c_keys || !kernel::has_q4_products) return 0;
  return 2 * c.q_amplitude * std::sqrt(double(c.sizes.Dq)) / 65534;
}

/// Pages: a cache's page format when it is not the element type (void: the element type; pages_of<K, V>).
template <element E, terminal Kind, class Pages = void>
verdict run_on(const fuzz_case& c, testing::rng& r) {
  using T = accumulator_t<typename element_types<E>::q, typename element_types<E>::k, typename element_types<E>::v>;
  verdict v{false, "combination not instantiated (generator and tables disagree)"};
  const auto ops = operands<E, Kind, Pages>(c, r);
  with_index<scorer_names.size()>(c.scorer, [&](auto S) {
    if constexpr (scorer_allowed(E, Kind, decltype(S)::value))
      with_index<mask_names.size()>(c.masks, [&](auto M) {
        constexpr std::size_t s = decltype(S)::value, m = decltype(M)::value;
        if constexpr (allowed(E, Kind, s, m)) {
          const auto scores = hana::at_c<s>(scorers)(ops.q, ops.k, c.sizes, r);
          const auto& family = hana::at_c<m>(mask_families);
          const auto masked = family(scores, c.sizes, r);
          const auto e = [&] {
            if constexpr (takes_sinks<std::decay_t<decltype(family)>>)
              return softmax(masked, sinks(family.sink_logits(c.sizes, r))) * ops.v;  // the expression owns them
            else
              return softmax(masked) * ops.v;
          }();
          const auto want = reference(e);
          const auto got = eval(e, c.sch);
          const out_layout l = Kind == terminal::packed ? out_layout::packed
                               : c.sizes.three_d        ? out_layout::bsd
                                                        : out_layout::bhsd;
          constexpr double p_rounding = takes_value_pairs_v<T, typename element_types<E>::v> ? 0x1p-9 : 0;
          v = compare<T>(got, l, want, c.sizes, 1.0, p_rounding + rotated_bf16_rounding<E>(c) + q4_query_rounding(c));
          if constexpr (grad_checked(E, Kind, s, m) && xattn::has_fused_backward_v<decltype(make_plan(e))>)
            if (v.ok && grad_affordable(s, c.sizes)) v = check_grad<T>(e, l, want, c.sizes, c.sch, r);
        }
      });
  });
  return v;
}

template <element E>
verdict run_typed(const fuzz_case& c, testing::rng& r);

extern template verdict run_typed<element::f32>(const fuzz_case&, testing::rng&);
extern template verdict run_typed<element::f64>(const fuzz_case&, testing::rng&);
#if XATTN_FUZZ_16BIT  // off in CI's sanitizer build, to keep it within its time (run_16bit.cpp)
extern template verdict run_typed<element::bf16>(const fuzz_case&, testing::rng&);
extern template verdict run_typed<element::f16>(const fuzz_case&, testing::rng&);
extern template verdict run_typed<element::mixed>(const fuzz_case&, testing::rng&);
#endif

/// Run case c, whose generator has already drawn the plan; exceptions become failures.
inline verdict run_case(const fuzz_case& c, testing::rng& r) {
  try {
    switch (c.elem) {
      case element::f64:
        return run_typed<element::f64>(c, r);
#if XATTN_FUZZ_16BIT
      case element::bf16:
        return run_typed<element::bf16>(c, r);
      case element::f16:
        return run_typed<element::f16>(c, r);
      case element::mixed:
        return run_typed<element::mixed>(c, r);
#endif
      default:
        return run_typed<element::f32>(c, r);
    }
  } catch (const std::exception& e) {
    return {false, std::string("exception: ") + e.what()};
  }
}

}  // namespace xattn::fuzz
