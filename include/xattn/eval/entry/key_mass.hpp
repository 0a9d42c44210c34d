#pragma once
// eval_with_key_mass(e): the attention output and the attention each key received -- its softmax
// weights summed over the queries and over the query heads that share its key head -- from the
// same fused pass, which keeps each task's probabilities as it streams the keys and normalises
// them once the rows are finished (forward/key_mass_record.hpp). What eviction policies (H2O,
// SnapKV, scissorhands) rank cached tokens by, without a second pass over the keys.
#include "eval.hpp"

#include <tuple>

namespace xattn {

template <class Out, class Mass>
struct attention_with_key_mass {
  Out output;     // as eval() returns it
  Mass key_mass;  // (B, Skv) for (B, S, D) operands, (B, Hkv, Skv) for 4-D ones and caches, (B, Skv, Hkv)
                  // for heads(): the weights before dropout, each key's sum over the queries and query heads
};

/// softmax(...) * V and the softmax weight each key received (in the accumulator type): keys past
/// a sequence's length, or hidden from every query, received 0; a row that sees no key adds nothing.
template <class Out = void, expression E>
auto eval_with_key_mass(const E& e, const schedule& sch = {}) {
  if constexpr (check_grammar<E>() && check_output_type<Out>()) {
    const auto p = make_plan(e);
    using P = std::decay_t<decltype(p)>;
    static_assert(P::has_values, "xattn: eval_with_key_mass needs an attention expression: softmax(...) * V");
    static_assert(!selects_v<P>, "xattn: eval_with_key_mass: keys chosen by select(K, idx) have no mass of their own");
    if constexpr (P::has_values && !selects_v<P>) {
      using O = output_element_t<Out, P>;
      using Acc = accumulator_of_t<P>;
      using lead = lead_terminal_t<P>;
      const problem pr = resolve(p);
      const auto fs = schedule_for(p, pr, sch, pass_kind::attention).forward;
      const form how = lead_terminal(p.base).how;
      attention_with_key_mass<result_t<O, lead::rank>, result_t<Acc, lead::rank == 0 ? 0
                                                                     : lead::packed  ? 3
                                                                                     : lead::rank - 1>>
          r;
      layout<4> at;
      std::tie(r.output, at) = allocate_in<decltype(r.output)>(how, {pr.batch, pr.q_heads, pr.q_len, pr.v_dim});
      problem keys = pr;  // the keys' rows in the form the log-sum-exp's rows take
      keys.q_heads = pr.kv_heads, keys.q_len = pr.kv_len;
      const auto [mass_shape, mass_at] = lse_form(how, keys);
      r.key_mass = allocate<decltype(r.key_mass)>(mass_shape);
      run_fused<Acc>(p, pr, fs, strided_view<O>{r.output.data(), at}, {},
                     strided_view<Acc, 3>{r.key_mass.data(), mass_at});
      return r;
    }
  }
}

}  // namespace xattn
