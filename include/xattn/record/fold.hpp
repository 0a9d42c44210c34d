#pragma once
// Folding: a separated score (separate.hpp) whose per-pair code is the product scaled by values of
// one row each -- cosine's qk / (√(qq·kk)·τ), a constant 1/√D, a learnable temperature -- plus
// terms of one row each (the Gaussian's −|q|²/σ² and −|k|²/σ²) takes the factors into the rows'
// features, fq·a(q) and fk·b(k), and the terms into two features of their own (Σ a(q) beside 1,
// 1 beside Σ b(k)), so that the score is the product itself and nothing runs per pair. A guard
// that such a factor is not zero (cosine's `norm == 0`) becomes a guard per row: a row failing it
// has its features zeroed and its pairs scored by the policy. The identities used hold for real
// numbers -- √(a·b) = √a·√b for a, b ≥ 0, and a·b = 0 only where a or b is -- so where the
// policy's own products would under- or overflow (|q|·|k| below about 1e-22 in float), the folded
// score is the exact one.
#include "program.hpp"
#include "separated.hpp"

#include <cmath>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace xattn::record {

namespace detail {

class folder {
 public:
  explicit folder(separated& s) : s_(s), p_(s.pair) {}

  bool run() {
    if (s_.features == 0 || s_.map_features != 0 || s_.product_only()) return false;
    classify();
    sum terms;
    if (!expand(p_.outputs[0], terms)) return false;
    const term* product = nullptr;
    extra q_only{{}, query}, k_only{{}, key};
    std::vector<extra> extras;
    for (const term& t : terms) {
      if (t.coef == 0) continue;
      if (t.dot == 1) {
        if (product) return false;  // two products: not one tile
        product = &t;
      } else if (t.dot != 0) {
        return false;
      } else {
        bool q = false, k = false;
        for (const factor& f : t.fs) {
          k = k || dep_[f.n] == key;
          q = q || dep_[f.n] == query;
        }
        if (q && k) return false;  // a product of the rows' values beside the tile's: not separated here
        (k ? k_only : q_only).terms.push_back(&t);
      }
    }
    if (!q_only.terms.empty()) extras.push_back(q_only);
    if (!k_only.terms.empty()) extras.push_back(k_only);
    if (!product) return false;
    std::vector<guard> guards;
    for (std::size_t g = 0; g < s_.expect.size(); ++g)
      if (!row_guards(p_.outputs[1 + g], s_.expect[g] != 0, guards)) return false;
    build(*product, extras, guards);
    return true;
  }

 private:
  static constexpr std::uint8_t none = 0, query = 1, key = 2, pair = 3;
  static constexpr std::uint32_t absent = std::uint32_t(-1);
  struct factor {
    std::uint32_t n;  // a value of one side (or of neither) in the pair program
    double e;         // its power
  };
  /// coef · product^dot · Π factors
  struct term {
    double coef = 1;
    double dot = 0;
    std::vector<factor> fs;
  };
  using sum = std::vector<term>;
  /// A feature of its own: terms of one row (owner: query or key) summed there, 1 on the other side.
  struct extra {
    std::vector<const term*> terms;
    std::uint8_t owner;
  };
  struct guard {
    std::uint32_t n;  // a condition of one side in the pair program
    bool expect;      // its value where the separated code holds
    bool nonzero;     // the condition is n != 0 (n a factor), not n itself
  };

  void classify() {
    const std::size_t qs = s_.query_scalars, ks = s_.key_scalars;
    dep_.assign(p_.size(), none);
    for (std::size_t i = 0; i < p_.size(); ++i) {
      const node& x = p_.code[i];
      if (x.o == op::input)
        dep_[i] = x.a == 0 ? pair : x.a <= qs ? query : x.a <= qs + ks ? key : pair;
      else
        for (int k = 0; k < arity(x.o); ++k) dep_[i] |= dep_[operand(x, k)];
    }
  }
  static std::uint32_t operand(const node& x, int k) { return k == 0 ? x.a : k == 1 ? x.b : x.c; }
  static bool integer(double e) { return e == std::floor(e); }

  /// m's power e into t.
  static void times(term& t, const term& m, double e) {
    t.coef *= std::pow(m.coef, e);
    t.dot += m.dot * e;
    for (const factor& f : m.fs) t.fs.push_back({f.n, f.e * e});
  }

  /// Node n of the pair program as a sum of terms; false if it is not such a sum (a product of two
  /// sums, a function of the product, a fractional power of what may be negative).
  bool expand(std::uint32_t n, sum& out) const {
    const node& x = p_.code[n];
    if (x.o == op::input && x.a == 0) {
      out = {{1, 1, {}}};
      return true;
    }
    if (x.o == op::constant) {
      out = {{x.value, 0, {}}};
      return true;
    }
    if (dep_[n] != pair) {
      out = {{1, 0, {{n, 1}}}};
      return true;
    }
    sum a, b;
    switch (x.o) {
      case op::add:
      case op::sub:
        if (!expand(x.a, a) || !expand(x.b, b)) return false;
        for (term& t : b) {
          if (x.o == op::sub) t.coef = -t.coef;
          a.push_back(std::move(t));
        }
        out = std::move(a);
        return true;
      case op::neg:
        if (!expand(x.a, out)) return false;
        for (term& t : out) t.coef = -t.coef;
        return true;
      case op::mul:
      case op::div: {
        if (!expand(x.a, a) || !expand(x.b, b)) return false;
        if (x.o == op::mul && b.size() != 1) std::swap(a, b);
        if (b.size() != 1) return false;
        for (term& t : a) times(t, b[0], x.o == op::mul ? 1 : -1);
        out = std::move(a);
        return true;
      }
      case op::sqrt:
      case op::pow: {
        const double c = x.o == op::sqrt ? 0.5 : x.value;
        if (!expand(x.a, a) || a.size() != 1) return false;
        const term& t = a[0];
        // a fractional power splits over factors none of which is negative, never over the product
        if (!integer(c)) {
          if (t.dot != 0 || t.coef < 0) return false;
          for (const factor& f : t.fs)
            if (!nonnegative(f.n)) return false;
        }
        term u{1, 0, {}};
        times(u, t, c);
        out = {std::move(u)};
        return true;
      }
      default:
        return false;
    }
  }

  /// Whether node n of program p is never negative (inputs: as `input(slot)` says).
  template <class Input>
  static bool nonnegative(const program& p, std::uint32_t n, const Input& input) {
    const node& x = p.code[n];
    const auto sub = [&](std::uint32_t m) { return nonnegative(p, m, input); };
    switch (x.o) {
      case op::input:
        return input(x.a);
      case op::constant:
        return x.value >= 0;
      case op::mul:
        return x.a == x.b || (sub(x.a) && sub(x.b));
      case op::add:
      case op::div:
      case op::min:
        return sub(x.a) && sub(x.b);
      case op::max:
        return sub(x.a) || sub(x.b);
      case op::sqrt:
      case op::exp:
      case op::abs:
        return true;
      case op::pow:
        return (integer(x.value) && std::fmod(x.value, 2.0) == 0) || sub(x.a);
      case op::select:
        return sub(x.b) && sub(x.c);
      default:
        return is_logical(x.o);
    }
  }
  /// Whether the pair program's node n is never negative, looking into the row programs.
  bool nonnegative(std::uint32_t n) const {
    const auto row = [](const program& r, std::uint32_t at) {
      return nonnegative(r, at, [](std::uint32_t) { return false; });  // a row's own values may be anything
    };
    return nonnegative(p_, n, [&](std::uint32_t slot) {
      const std::size_t qs = s_.query_scalars;
      if (slot == 0 || slot > qs + s_.key_scalars) return false;
      return slot <= qs ? row(s_.query, s_.query.outputs[s_.features + slot - 1])
                        : row(s_.key, s_.key.outputs[s_.features + slot - 1 - qs]);
    });
  }

  /// Guard n (expected `expect`) as guards of one row each; false if it is not a conjunction of such.
  bool row_guards(std::uint32_t n, bool expect, std::vector<guard>& out) const {
    if (dep_[n] != pair) {
      if (dep_[n] != none) out.push_back({n, expect, false});  // one of neither side held when recorded
      return true;
    }
    const node& x = p_.code[n];
    const bool nonzero = (x.o == op::eq && !expect) || (x.o == op::ne && expect);
    if (!nonzero) return false;
    const auto zero = [&](std::uint32_t m) { return p_.code[m].o == op::constant && p_.code[m].value == 0; };
    if (!zero(x.a) && !zero(x.b)) return false;
    return nonzero_factors(zero(x.a) ? x.b : x.a, out);
  }
  /// Node n is not zero exactly where none of its factors is: those factors' guards.
  bool nonzero_factors(std::uint32_t n, std::vector<guard>& out) const {
    if (dep_[n] != pair) {
      if (dep_[n] != none) out.push_back({n, true, true});
      return true;
    }
    const node& x = p_.code[n];
    switch (x.o) {
      case op::mul:
        return nonzero_factors(x.a, out) && nonzero_factors(x.b, out);
      case op::sqrt:
      case op::neg:
        return nonzero_factors(x.a, out);
      case op::pow:
        return x.value > 0 && nonzero_factors(x.a, out);
      default:
        return false;
    }
  }

  /// Pair program node n (of one side, or of neither) copied into row program r (memo: its copies).
  std::uint32_t into(program& r, std::unordered_map<std::uint32_t, std::uint32_t>& memo, std::uint32_t n) const {
    if (const auto it = memo.find(n); it != memo.end()) return it->second;
    node x = p_.code[n];
    std::uint32_t at;
    if (x.o == op::input) {
      const std::size_t qs = s_.query_scalars;
      at = x.a <= qs ? s_.query.outputs[s_.features + x.a - 1] : s_.key.outputs[s_.features + x.a - 1 - qs];
    } else {
      for (int k = 0; k < arity(x.o); ++k) {
        const std::uint32_t m = into(r, memo, operand(x, k));
        (k == 0 ? x.a : k == 1 ? x.b : x.c) = m;
      }
      at = r.push(x);
    }
    return memo[n] = at;
  }

  /// Term t's factors of side `which` (of neither side: with the query's) multiplied in row program
  /// r, with its coefficient when with_coef (every factor: `whole`); absent when that is 1.
  std::uint32_t part(program& r, std::unordered_map<std::uint32_t, std::uint32_t>& memo, std::uint8_t which,
                     const term& t, bool with_coef, bool whole = false) const {
    std::uint32_t num = absent, den = absent;
    const auto times = [&](std::uint32_t a, std::uint32_t b) { return a == absent ? b : r.push({op::mul, a, b}); };
    for (const factor& f : t.fs) {
      if (!whole && (dep_[f.n] == key) != (which == key)) continue;
      std::uint32_t v = into(r, memo, f.n);
      const double a = std::abs(f.e);
      if (a == 0.5)
        v = r.push({op::sqrt, v});
      else if (a != 1)
        v = r.push({op::pow, v, 0, 0, a});
      (f.e > 0 ? num : den) = times(f.e > 0 ? num : den, v);
    }
    if (with_coef && t.coef != 1) {
      const std::uint32_t c = r.push({op::constant, 0, 0, 0, t.coef});
      num = num == absent ? c : r.push({op::mul, c, num});
    }
    if (den != absent) num = r.push({op::div, num == absent ? r.push({op::constant, 0, 0, 0, 1}) : num, den});
    return num;
  }

  /// One side's features: the product's features times its factors, then the extra features; zero
  /// where one of its guards fails. The guards' conditions become the row's scalars.
  void side(program& r, std::uint8_t which, const term& product, const std::vector<extra>& extras,
            const std::vector<guard>& guards, std::vector<separated::row_guard>& row_guards) const {
    std::unordered_map<std::uint32_t, std::uint32_t> memo;
    std::vector<std::uint32_t> conditions;
    std::uint32_t holds = absent;
    for (const guard& g : guards) {
      if (dep_[g.n] != which) continue;
      std::uint32_t c = into(r, memo, g.n);
      if (g.nonzero) c = r.push({op::ne, c, r.push({op::constant, 0, 0, 0, 0})});
      row_guards.push_back({conditions.size(), g.expect});
      conditions.push_back(c);
      const std::uint32_t ok = g.expect ? c : r.push({op::lnot, c});
      holds = holds == absent ? ok : r.push({op::land, holds, ok});
    }
    const auto zeroed = [&](std::uint32_t v) {
      return holds == absent ? v : r.push({op::select, holds, v, r.push({op::constant, 0, 0, 0, 0})});
    };
    std::vector<std::uint32_t> outputs(r.outputs.begin(), r.outputs.begin() + std::ptrdiff_t(s_.features));
    if (const std::uint32_t a = part(r, memo, which, product, which == query); a != absent) {
      const std::uint32_t z = zeroed(a);
      for (std::uint32_t& o : outputs) o = r.push({op::mul, o, z});
    }
    for (const extra& x : extras) {
      std::uint32_t v = absent;
      if (x.owner == which)
        for (const term* t : x.terms) {
          std::uint32_t u = part(r, memo, which, *t, true, true);
          if (u == absent) u = r.push({op::constant, 0, 0, 0, 1});
          v = v == absent ? u : r.push({op::add, v, u});
        }
      outputs.push_back(v == absent ? r.push({op::constant, 0, 0, 0, 1}) : zeroed(v));
    }
    outputs.insert(outputs.end(), conditions.begin(), conditions.end());
    r.outputs = std::move(outputs);
  }

  void build(const term& product, const std::vector<extra>& extras, const std::vector<guard>& guards) {
    program qp = s_.query, kp = s_.key;  // s_'s read by into() until both are built
    std::vector<separated::row_guard> qg, kg;
    side(qp, query, product, extras, guards, qg);  // factors of neither side go with the query's
    side(kp, key, product, extras, guards, kg);
    s_.query = std::move(qp);
    s_.key = std::move(kp);
    prune(s_.query);
    prune(s_.key);
    s_.features += extras.size();
    s_.query_scalars = qg.size();
    s_.key_scalars = kg.size();
    s_.query_guards = std::move(qg);
    s_.key_guards = std::move(kg);
    s_.expect.clear();
    program p;
    p.outputs.push_back(p.push({op::input, 0}));
    p.inputs = 1 + s_.query_scalars + s_.key_scalars;
    s_.pair = std::move(p);
  }

  /// Code no output reads removed (the input slots stay as they are).
  static void prune(program& p) {
    std::vector<char> live(p.size(), 0);
    for (std::uint32_t o : p.outputs) live[o] = 1;
    for (std::size_t i = p.size(); i-- > 0;)
      if (live[i])
        for (int k = 0; k < arity(p.code[i].o); ++k) live[operand(p.code[i], k)] = 1;
    std::vector<std::uint32_t> at(p.size(), absent);
    program out;
    out.inputs = p.inputs;
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (!live[i]) continue;
      node x = p.code[i];
      for (int k = 0; k < arity(x.o); ++k) (k == 0 ? x.a : k == 1 ? x.b : x.c) = at[operand(x, k)];
      at[i] = out.push(x);
    }
    for (std::uint32_t o : p.outputs) out.outputs.push_back(at[o]);
    p = std::move(out);
  }

  separated& s_;
  const program& p_;
  std::vector<std::uint8_t> dep_;
};

}  // namespace detail

/// Folds the score's one-row factors into the rows' features when that leaves no per-pair code
/// (see above); whether it did. s keeps its meaning either way.
inline bool fold_factors(separated& s) { return detail::folder(s).run(); }

}  // namespace xattn::record
