#pragma once
// Every (scorer, mask family) pair, a few random cases each, plus packed (B, S, H*D) operands.
#include "differential_cases.hpp"

#include <boost/hana.hpp>

namespace xattn::testing {

template <class T>
int run_all_pairs(std::uint64_t seed, int cases_per_pair) {
  namespace hana = boost::hana;
  constexpr auto scorers = hana::make_tuple(dot_scores{}, scaled_dot_scores{}, additive_scores{}, bilinear_scores{},
                                            gaussian_scores{}, cosine_scores{}, user_scores{});
  constexpr auto masks =
      hana::make_tuple(no_mask{}, lengths_1d{}, lengths_2d_zero{}, causal_any{}, window_any{}, bool_mask_broadcast{},
                       softcap_bias{}, alibi_lengths_causal{}, predicate_offsets{}, documents_causal{});
  int run = 0;
  std::uint64_t pair = 0;
  hana::for_each(scorers, [&](auto sc) {
    hana::for_each(masks, [&](auto mk) {
      differential<T>("", seed + pair++, cases_per_pair, decltype(sc)::same_dim, false, sc, mk);
      run += cases_per_pair;
    });
    differential<T>("packed", seed + pair++, cases_per_pair, decltype(sc)::same_dim, true, sc, causal_any{});
    run += cases_per_pair;
  });
  hana::for_each(masks, [&](auto mk) {
    differential<T>("packed", seed + pair++, cases_per_pair, true, true, dot_scores{}, mk);
    run += cases_per_pair;
  });
  return run;
}

}  // namespace xattn::testing
