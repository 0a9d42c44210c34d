#pragma once
// A softmax term: a logit t(b, h) that joins the normaliser of every row of batch row b and head h
// as a key every row sees and that holds no value (attention sinks are one). The pass reads a term only through this
// protocol: the online softmax starts each row from it (max t, sum 1), the backward finds its
// weight e^{t - lse} in the row's log-sum-exp, and the row's gradient at t, -e^{t - lse} · Δ
// (Δ = rowsum(dO ∘ O)), is handed back for the term to add to its parameters. So a new term is one
// type; the workers, the oracle, the ring's merge and explain take it unchanged.
#include "../problem.hpp"

#include <concepts>
#include <cstddef>
#include <limits>
#include <string>

namespace xattn {

// clang-format off
/// What softmax(scores, term) needs of a term:
///   logit(b, h)              the extra logit of batch row b, query head h, natural units; -inf: none
///   check(problem)           throws std::invalid_argument when the term does not fit the sizes
///   parameters(problem)      how many gradients it has (0: nothing to learn); grad's `dsinks`
///   add_gradient(b, h, g, d) adds the gradient g at logit(b, h) to d[0, parameters)
///   name(), describe()       explain's line: its word and what it does
template <class T>
concept softmax_term = requires(const T& t, const problem& pr, std::size_t n, double g, double* d) {
  { t.logit(n, n) } -> std::convertible_to<double>;
  t.check(pr);
  { t.parameters(pr) } -> std::convertible_to<std::size_t>;
  t.add_gradient(n, n, g, d);
  { t.name() } -> std::convertible_to<std::string>;
  { t.describe() } -> std::convertible_to<std::string>;
};
// clang-format on

/// softmax without a term: every logit -inf.
struct no_softmax_term {
  static constexpr double logit(std::size_t, std::size_t) noexcept { return -std::numeric_limits<double>::infinity(); }
  void check(const problem&) const noexcept {}
  static constexpr std::size_t parameters(const problem&) noexcept { return 0; }
  void add_gradient(std::size_t, std::size_t, double, double*) const noexcept {}
  static std::string name() { return "no term"; }
  static std::string describe() { return "none"; }
};

}  // namespace xattn
