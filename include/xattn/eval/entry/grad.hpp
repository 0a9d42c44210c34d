#pragma once
// grad(e, f, d_out): the fused backward of an attention expression. f = eval_with_lse(e) supplies
// the output and each row's log-sum-exp; nothing of size Sq x Skv is allocated (except for the
// gradient of a bias tensor, which is that size before its broadcast axes are summed).
#include "../backward/backward.hpp"
#include "../paths/select.hpp"
#include "../plan/resolve.hpp"
#include "eval.hpp"
#include "plumbing.hpp"

#include <type_traits>

namespace xattn {

/// Gradients of sum(d_out ∘ output) with respect to Q, K, V (or X), bias tensors and the scoring
/// policy's parameters, given f = eval_with_lse(e). Results hold the accumulator type, each in
/// the shape (and form) of its operand.
template <expression E, class F, class DOut>
auto grad(const E& e, const F& f, const DOut& d_out, const schedule& sch = {}) {
  if constexpr (check_grammar<E>()) {
    const auto p = make_plan(e);
    using P = std::decay_t<decltype(p)>;
    if constexpr (check_backward<P>()) {
      const problem pr = resolve(p);
      check_gradient_inputs(p, pr, f, d_out, "grad(e, f, d_out)");
      const backward_schedule bs = schedule_for(p, pr, sch, pass_kind::attention).backward;
      return gradients_of(p, pr, f, d_out, bs.threads, [&](const auto& in, const auto& out) {
        const backward_report rep = run_backward<accumulator_of_t<P>>(p, pr, bs, in, out);
        // the probabilities recomputed from f.lse must sum to 1: a log-sum-exp of another
        // expression (or other inputs) would give silently wrong gradients
        const double tol = std::is_same_v<accumulator_of_t<P>, float> ? 1e-3 : 1e-9;
        if (rep.worst_row_sum_error > tol)
          fail("grad(e, f, d_out): f.lse does not belong to e: with it a row's probabilities sum to 1 +- ",
               rep.worst_row_sum_error, "; f must be eval_with_lse(e) of this expression and these inputs");
      });
    }
  }
}

}  // namespace xattn
