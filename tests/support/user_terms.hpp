#pragma once
// Softmax terms written as a user would, outside the library (policy/terms/term.hpp's protocol):
// tests put them into the pass, the ring and the oracle to show that a new term is one type.
#include <xattn/policy/problem.hpp>

#include <xtensor/xtensor.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace xattn::testing {

/// softmax_1 (Evan Miller's "attention is off by one"): weight_j = e^{s_j} / (1 + Σ_k e^{s_k}).
struct off_by_one {
  static double logit(std::size_t, std::size_t) { return 0.0; }
  void check(const problem&) const {}
  static std::size_t parameters(const problem&) { return 0; }
  void add_gradient(std::size_t, std::size_t, double, double*) const {}
  static std::string name() { return "off by one"; }
  static std::string describe() { return "a logit 0 in every row's normaliser"; }
};

/// One learnable logit per (batch row, query head), read from t (B, Hq) when evaluated.
struct batch_head_logits {
  const xt::xtensor<double, 2>* t;
  double logit(std::size_t b, std::size_t h) const { return (*t)(b, h); }
  void check(const problem& pr) const {
    if (t->shape(0) != pr.batch || t->shape(1) != pr.q_heads)
      throw std::invalid_argument("batch_head_logits: t must be (batch, query heads)");
  }
  std::size_t parameters(const problem&) const { return t->size(); }
  void add_gradient(std::size_t b, std::size_t h, double g, double* d) const { d[b * t->shape(1) + h] += g; }
  static std::string name() { return "per (b, h)"; }
  static std::string describe() { return "a learnable logit per batch row and head"; }
};

}  // namespace xattn::testing
