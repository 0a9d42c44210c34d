#pragma once
// The linear part of a row program (separate.hpp): outputs that are Σ_i c_i · x_i of the row's
// inputs x, with coefficients c_i of the learnables and constants alone (a bilinear form's Wᵀq, a
// weight per feature, the features themselves). Those outputs are one matrix product per block of
// rows, y = x · M, M evaluated once per evaluation from its own program; the other outputs stay
// on the lane machine, their program pruned to what they need. The backward is the product's:
// dx = dy · Mᵀ, dM = xᵀ · dy, and dM taken back through M's program to the learnables.
#include "program.hpp"

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace xattn::record {

struct linear_split {
  std::vector<std::uint32_t> linear;  // indices in p.outputs of the linear outputs, in order
  std::vector<std::uint32_t> rest;    // the others, in order
  program matrix;                     // no inputs; outputs M row-major: (p.inputs) x (linear.size())
  program others;                     // p's inputs; outputs: the rest, in order (dead code dropped)
  bool any() const noexcept { return !linear.empty(); }
};

namespace detail {

class linear_finder {
 public:
  explicit linear_finder(const program& p) : p_(p), reads_(p.size(), 0) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      const node& x = p.code[i];
      reads_[i] = x.o == op::input;
      for (int k = 0; k < arity(x.o); ++k) reads_[i] = reads_[i] || reads_[operand(x, k)];
    }
  }

  linear_split run() {
    linear_split s;
    s.matrix.inputs = 0;
    s.others.inputs = p_.inputs;
    std::vector<std::vector<std::pair<std::uint32_t, std::uint32_t>>> found;  // per linear output: (input, coef)
    for (std::uint32_t o = 0; o < p_.outputs.size(); ++o) {
      if (auto f = form_of(p_.outputs[o])) {
        s.linear.push_back(o);
        found.push_back(std::move(*f));
      } else {
        s.rest.push_back(o);
      }
    }
    // M row-major: entry (i, l) the coefficient of input i in linear output l (0 when absent)
    const std::uint32_t zero = s.matrix.push({op::constant, 0, 0, 0, 0.0});
    std::vector<std::uint32_t> m(p_.inputs * found.size(), zero);
    for (std::size_t l = 0; l < found.size(); ++l)
      for (const auto& [input, coef] : found[l]) {
        std::uint32_t& at = m[input * found.size() + l];
        const std::uint32_t c = copy_coef(s.matrix, coef);
        at = at == zero ? c : s.matrix.push({op::add, at, c});
      }
    s.matrix.outputs = std::move(m);
    std::unordered_map<std::uint32_t, std::uint32_t> map;
    for (std::uint32_t o : s.rest) s.others.outputs.push_back(copy(s.others, map, p_.outputs[o]));
    return s;
  }

 private:
  using terms = std::vector<std::pair<std::uint32_t, std::uint32_t>>;  // (input slot, coefficient node)

  static std::uint32_t operand(const node& x, int k) { return k == 0 ? x.a : k == 1 ? x.b : x.c; }

  /// n as Σ coefficient · input, coefficients as nodes of coef_ (a program of its own), or none.
  std::optional<terms> form_of(std::uint32_t n) {
    if (const auto it = memo_.find(n); it != memo_.end()) return it->second;
    std::optional<terms> r;
    const node& x = p_.code[n];
    const auto scaled = [&](std::uint32_t lin, std::uint32_t c, bool divide) -> std::optional<terms> {
      auto f = form_of(lin);
      if (!f) return std::nullopt;
      const std::uint32_t cc = copy_coef_source(c);
      for (auto& [i, k] : *f) k = coef_.push({divide ? op::div : op::mul, k, cc});
      return f;
    };
    if (x.o == op::input) {
      r = terms{{x.a, coef_.push({op::constant, 0, 0, 0, 1.0})}};
    } else if (!reads_[n]) {
      r = std::nullopt;  // a constant term: affine, not linear
    } else if (x.o == op::add || x.o == op::sub) {
      auto a = form_of(x.a), b = form_of(x.b);
      if (a && b) {
        for (auto [i, k] : *b) a->push_back({i, x.o == op::sub ? coef_.push({op::neg, k}) : k});
        r = std::move(a);
      }
    } else if (x.o == op::neg) {
      if (auto a = form_of(x.a)) {
        for (auto& [i, k] : *a) k = coef_.push({op::neg, k});
        r = std::move(a);
      }
    } else if (x.o == op::mul) {
      if (!reads_[x.a])
        r = scaled(x.b, x.a, false);
      else if (!reads_[x.b])
        r = scaled(x.a, x.b, false);
    } else if (x.o == op::div && !reads_[x.b]) {
      r = scaled(x.a, x.b, true);
    }
    return memo_[n] = std::move(r);
  }

  /// Node c of p (it reads no input) in coef_.
  std::uint32_t copy_coef_source(std::uint32_t c) { return copy(coef_, coef_map_, c); }

  /// Node k of coef_ copied into m.
  std::uint32_t copy_coef(program& m, std::uint32_t k) { return copy(m, matrix_map_, k, &coef_); }

  /// Node n of `from` (p_ by default) copied into `to`, operands first, memoised.
  std::uint32_t copy(program& to, std::unordered_map<std::uint32_t, std::uint32_t>& map, std::uint32_t n,
                     const program* from = nullptr) const {
    const program& src = from ? *from : p_;
    if (const auto it = map.find(n); it != map.end()) return it->second;
    node x = src.code[n];
    for (int k = 0; k < arity(x.o); ++k) {
      const std::uint32_t m = copy(to, map, operand(x, k), from);
      (k == 0 ? x.a : k == 1 ? x.b : x.c) = m;
    }
    return map[n] = to.push(x);
  }

  const program& p_;
  std::vector<char> reads_;  // the node depends on an input
  std::unordered_map<std::uint32_t, std::optional<terms>> memo_;
  program coef_;  // the coefficients as they are built
  std::unordered_map<std::uint32_t, std::uint32_t> coef_map_, matrix_map_;
};

}  // namespace detail

/// The linear outputs of p and the rest.
inline linear_split split_linear(const program& p) { return detail::linear_finder(p).run(); }

}  // namespace xattn::record
