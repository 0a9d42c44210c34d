#pragma once
// Build and check one case: operands in the drawn storage, the drawn pipeline over them, then
// eval() under the drawn schedule against reference() of the same expression -- and, for the
// combinations grad_checked() names (rank-0 and packed terminals), its gradients against
// reference_grad().
#include "check.hpp"
#include "check_grad.hpp"
#include "storage.hpp"

namespace xattn::fuzz {

template <class T, terminal Kind>
verdict run_on(const fuzz_case& c, testing::rng& r) {
  verdict v{false, "combination not instantiated (generator and tables disagree)"};
  const auto ops = operands<T, Kind>(c, r);
  with_index<scorer_names.size()>(c.scorer, [&](auto S) {
    with_index<mask_names.size()>(c.masks, [&](auto M) {
      constexpr std::size_t s = decltype(S)::value, m = decltype(M)::value;
      if constexpr (allowed(std::is_same_v<T, double>, Kind, s, m)) {
        const auto scores = hana::at_c<s>(scorers)(ops.q, ops.k, c.sizes, r);
        const auto e = softmax(hana::at_c<m>(mask_families)(scores, c.sizes, r)) * ops.v;
        const auto want = reference(e);
        const auto got = eval(e, c.sch);
        const out_layout l = Kind == terminal::packed ? out_layout::packed
                             : c.sizes.three_d        ? out_layout::bsd
                                                      : out_layout::bhsd;
        v = compare<T>(got, l, want, c.sizes, 1.0);  // |V| <= 1 by construction
        if constexpr (grad_checked(Kind, s, m) && xattn::detail::has_fused_backward_v<decltype(make_plan(e))>)
          if (v.ok && grad_affordable(s, c.sizes)) v = check_grad<T>(e, l, want, c.sizes, c.sch, r);
      }
    });
  });
  return v;
}

template <class T>
verdict run_typed(const fuzz_case& c, testing::rng& r);

extern template verdict run_typed<float>(const fuzz_case&, testing::rng&);
extern template verdict run_typed<double>(const fuzz_case&, testing::rng&);

/// Run case c, whose generator has already drawn the plan; exceptions become failures.
inline verdict run_case(const fuzz_case& c, testing::rng& r) {
  try {
    return c.is_double ? run_typed<double>(c, r) : run_typed<float>(c, r);
  } catch (const std::exception& e) {
    return {false, std::string("exception: ") + e.what()};
  }
}

}  // namespace xattn::fuzz
