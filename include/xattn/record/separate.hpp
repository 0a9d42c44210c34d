#pragma once
// Separation: a policy's recorded score (recorded.hpp) cut into what runs once per query row, once
// per key row and once per pair. Every value is tagged with what it depends on (nothing, the
// query, the key, both). Sums of products whose factors each depend on one side are bilinear
// forms; the largest such form the per-pair code consumes is a dot product of derived feature
// vectors, Σ_g fq_g(q) · fk_g(k) + α(q) + β(k), which the score microkernels compute. What the
// rest of the per-pair code reads of one side only (norms, projections, per-row scalars) is
// computed once per row and per key; the per-pair remainder is a short program run on lanes of
// pairs. So cosine similarity written as three sums and a quotient runs as two norms, one Q·Kᵀ
// tile and an epilogue of five operations; |q - k|² expands to |q|² - 2 q·k + |k|².
//
// Not separated (the caller then runs the policy pair by pair): no product of the query's and the
// key's values, two or more large forms (two matrix products per tile), or a per-pair remainder
// longer than `budget` operations (an L1 distance: |q_d - k_d| per feature).
#include "program.hpp"
#include "recorded.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace xattn::record {

/// What a value depends on: a bit for the query row, one for the key row.
enum class dep : std::uint8_t { none = 0, query = 1, key = 2, pair = 3 };
constexpr dep operator|(dep x, dep y) noexcept { return dep(std::uint8_t(x) | std::uint8_t(y)); }

/// A separated score. The query program maps a query row (inputs: its dq values) to outputs
/// [fq_0 .. fq_n) then its scalars; the key program a key row likewise to [fk_0 .. fk_n) then its
/// scalars. The pair program's inputs are slot 0, Σ fq_g fk_g, then the query's scalars, then the
/// key's; its outputs are the score, then the guards' conditions (expect[g]: the value under which
/// the separated code is the policy's).
struct separated {
  program query, key, pair;
  std::size_t features = 0, query_scalars = 0, key_scalars = 0;
  std::vector<std::uint8_t> expect;
  std::vector<const void*> params;  // the learnable behind each param node's index
  bool by_key = true;               // features grouped by the key's factors (else the query's)
};

/// The outcome: separated, or why not. A recording that does not separate but holds the whole
/// code (no value left it) runs pair by pair on lanes: then `lanes` holds and parts.pair is the
/// recording itself (inputs q[0, dq) then k[0, dk); outputs the score, then the guards'
/// conditions, parts.expect their recorded values), parts.params its learnables.
struct separation {
  bool ok = false;
  bool lanes = false;
  std::string reason;
  separated parts;
};

namespace detail {

struct monomial {
  double coef = 1;
  std::vector<std::uint32_t> f;            // factors: nodes that depend on one side or on nothing
  std::uint32_t pair = std::uint32_t(-1);  // or a per-pair value that is not a form, times coef
};
using form = std::vector<monomial>;

class separator {
 public:
  separator(const recording& r, std::size_t budget) : r_(r), code_(r.code.code), budget_(budget) {}

  separation run() {
    separation out;
    if (r_.escaped)
      return fail(out,
                  "a value left the recorded code: a call qualified with std:: (write `using std::sqrt;` and "
                  "call sqrt(x)) or a conversion to double");
    classify();
    std::vector<char> forced(code_.size(), 0);  // roots kept as per-pair operations
    std::uint32_t dot_root = none;
    form dot_form;
    for (;;) {
      find_forms(forced);
      const std::vector<std::uint32_t> roots = find_roots();
      bool changed = false;
      dot_root = none;
      std::size_t large = 0, best = 0;
      for (std::uint32_t n : roots) {
        form f = flatten(n);
        const std::size_t g = groups(f);
        if (g == 0) continue;  // no product: per-pair code as written
        if (g < 3) {           // a rank-1 or rank-2 product (|q|·|k|) is cheaper per pair than a tile product
          forced[n] = 1;
          changed = true;
        } else {
          ++large;
          if (g > best) best = g, dot_root = n, dot_form = std::move(f);
        }
      }
      if (changed) continue;
      if (large > 1) return fail(out, std::to_string(large) + " separate products of query and key features");
      break;
    }
    if (dot_root == none) {  // the largest small product then (a single feature or two)
      find_forms(std::vector<char>(code_.size(), 0));
      std::size_t best = 0;
      for (std::uint32_t n : find_roots())
        if (const std::size_t g = groups(flatten(n)); g > best) best = g, dot_root = n;
      if (dot_root == none) {
        std::size_t ops = 0;
        for (std::size_t i = 0; i < code_.size(); ++i) ops += needed_[i] && pairs(std::uint32_t(i));
        return fail(out,
                    "no product of the query's and the key's values; " + std::to_string(ops) + " operations per pair");
      }
      // keep the other small roots per pair, this one as the product
      std::vector<char> keep(code_.size(), 0);
      for (std::uint32_t n : find_roots())
        if (n != dot_root) keep[n] = 1;
      find_forms(keep);
      if (!is_form_[dot_root]) return fail(out, "no product of the query's and the key's values");
      dot_form = flatten(dot_root);
    }
    build(dot_root, dot_form, out.parts);
    const std::size_t ops = out.parts.pair.operations();
    if (ops > budget_)
      return fail(out, "a per-pair remainder of " + std::to_string(ops) + " operations (more than " +
                           std::to_string(budget_) + ")");
    out.ok = true;
    return out;
  }

 private:
  static constexpr std::uint32_t none = std::uint32_t(-1);

  static separation& fail(separation& s, std::string why) {
    s.ok = false;
    s.reason = std::move(why);
    return s;
  }

  void classify() {
    deps_.assign(code_.size(), dep::none);
    needed_.assign(code_.size(), 0);
    for (std::size_t i = 0; i < code_.size(); ++i) {
      const node& x = code_[i];
      if (x.o == op::input)
        deps_[i] = x.a < r_.dq ? dep::query : dep::key;
      else
        for (int k = 0; k < arity(x.o); ++k) deps_[i] = deps_[i] | deps_[operand(x, k)];
    }
    outputs_.assign(1, r_.score);
    for (std::size_t g = 0; g < r_.guards.size(); ++g)
      if (deps_[r_.guards[g]] != dep::none) {  // a condition on the learnables alone held when recorded
        outputs_.push_back(r_.guards[g]);
        expect_.push_back(r_.expect[g]);
      }
    for (std::uint32_t o : outputs_) needed_[o] = 1;
    for (std::size_t i = code_.size(); i-- > 0;)
      if (needed_[i])
        for (int k = 0; k < arity(code_[i].o); ++k) needed_[operand(code_[i], k)] = 1;
  }

  static std::uint32_t operand(const node& x, int k) { return k == 0 ? x.a : k == 1 ? x.b : x.c; }
  bool pairs(std::uint32_t n) const { return deps_[n] == dep::pair; }

  /// Which pair values are bilinear forms (is_form_) and how many monomials each has, given the
  /// nodes forced to stay per-pair operations.
  void find_forms(const std::vector<char>& forced) {
    is_form_.assign(code_.size(), 0);
    has_opaque_.assign(code_.size(), 0);
    size_.assign(code_.size(), 1);
    // a per-pair operation is a form of one opaque monomial in a sum, and no form in a product
    const auto operand_size = [&](std::uint32_t n, bool sum) -> std::size_t {
      if (!pairs(n)) return 1;
      return is_form_[n] ? size_[n] : sum ? 1 : 0;
    };
    constexpr std::size_t cap = std::size_t(1) << 20;
    for (std::size_t i = 0; i < code_.size(); ++i) {
      if (!needed_[i] || !pairs(std::uint32_t(i)) || forced[i]) continue;
      const node& x = code_[i];
      std::size_t s = 0;
      switch (x.o) {
        case op::add:
        case op::sub:
          s = std::min(cap, operand_size(x.a, true) + operand_size(x.b, true));
          break;
        case op::neg:
          s = operand_size(x.a, true);
          break;
        case op::mul: {
          const std::size_t a = operand_size(x.a, false), b = operand_size(x.b, false);
          if (a && b && (std::min(a, b) == 1 || a * b <= 16) && !opaque(x.a) && !opaque(x.b)) s = std::min(cap, a * b);
          break;
        }
        default:
          break;
      }
      is_form_[i] = s > 0;
      size_[i] = s;
      if (s > 0)
        for (int k = 0; k < arity(x.o); ++k) {
          const std::uint32_t a = operand(x, k);
          has_opaque_[i] = has_opaque_[i] || (pairs(a) && (!is_form_[a] || has_opaque_[a]));
        }
    }
  }

  /// Whether form n holds a per-pair value that is not a form (products of such are not forms).
  bool opaque(std::uint32_t n) const {
    if (!pairs(n) || !is_form_[n]) return false;
    return has_opaque_[n];
  }

  /// Forms consumed by a per-pair operation or an output.
  std::vector<std::uint32_t> find_roots() const {
    std::vector<char> root(code_.size(), 0);
    for (std::uint32_t o : outputs_)
      if (is_form_[o]) root[o] = 1;
    for (std::size_t i = 0; i < code_.size(); ++i)
      if (needed_[i] && pairs(std::uint32_t(i)) && !is_form_[i])
        for (int k = 0; k < arity(code_[i].o); ++k)
          if (const std::uint32_t a = operand(code_[i], k); is_form_[a]) root[a] = 1;
    std::vector<std::uint32_t> out;
    for (std::size_t i = 0; i < root.size(); ++i)
      if (root[i]) out.push_back(std::uint32_t(i));
    return out;
  }

  /// Node n as a sum of monomials, like monomials merged.
  form flatten(std::uint32_t n) const {
    form f = expand(n);
    for (monomial& m : f) std::sort(m.f.begin(), m.f.end());
    const auto less = [](const monomial& a, const monomial& b) {
      return std::tie(a.pair, a.f) < std::tie(b.pair, b.f);
    };
    std::sort(f.begin(), f.end(), less);
    form out;
    for (std::size_t i = 0; i < f.size();) {
      std::size_t j = i + 1;
      double c = f[i].coef;
      for (; j < f.size() && f[j].pair == f[i].pair && f[j].f == f[i].f; ++j) c += f[j].coef;
      if (c != 0) out.push_back({c, std::move(f[i].f), f[i].pair});
      i = j;
    }
    return out;
  }
  form expand(std::uint32_t n) const {
    const node& x = code_[n];
    if (pairs(n) && !is_form_[n]) return {{1, {}, n}};
    if (!pairs(n)) {  // a factor; a product of factors is its factors, so that they group
      if (x.o == op::constant) return {{x.value, {}}};
      if (x.o == op::neg) {
        form a = expand(x.a);
        a[0].coef = -a[0].coef;
        return a;
      }
      if (x.o != op::mul) return {{1, {n}}};
    }
    switch (x.o) {
      case op::add:
      case op::sub: {
        form a = expand(x.a), b = expand(x.b);
        for (monomial& m : b) {
          if (x.o == op::sub) m.coef = -m.coef;
          a.push_back(std::move(m));
        }
        return a;
      }
      case op::neg: {
        form a = expand(x.a);
        for (monomial& m : a) m.coef = -m.coef;
        return a;
      }
      default: {  // mul (no opaque parts: find_forms)
        const form a = expand(x.a), b = expand(x.b);
        form out;
        out.reserve(a.size() * b.size());
        for (const monomial& u : a)
          for (const monomial& v : b) {
            monomial m{u.coef * v.coef, u.f, none};
            m.f.insert(m.f.end(), v.f.begin(), v.f.end());
            out.push_back(std::move(m));
          }
        return out;
      }
    }
  }

  /// The factors of m that depend on side s.
  std::vector<std::uint32_t> side(const monomial& m, dep s) const {
    std::vector<std::uint32_t> out;
    for (std::uint32_t f : m.f)
      if (deps_[f] == s) out.push_back(f);
    return out;
  }
  bool is_term(const monomial& m) const {
    return m.pair == none && !side(m, dep::query).empty() && !side(m, dep::key).empty();
  }

  /// Feature groups of form f's products: by the key's factors or by the query's.
  std::map<std::vector<std::uint32_t>, std::vector<const monomial*>> grouping(const form& f, bool by_key) const {
    std::map<std::vector<std::uint32_t>, std::vector<const monomial*>> g;
    for (const monomial& m : f)
      if (is_term(m)) g[side(m, by_key ? dep::key : dep::query)].push_back(&m);
    return g;
  }
  std::size_t groups(const form& f) const {
    std::size_t best = 0;
    for (const dep s : {dep::key, dep::query}) {
      std::vector<std::vector<std::uint32_t>> keys;
      for (const monomial& m : f)
        if (is_term(m)) keys.push_back(side(m, s));
      std::sort(keys.begin(), keys.end());
      const auto n = std::size_t(std::unique(keys.begin(), keys.end()) - keys.begin());
      best = s == dep::key ? n : std::min(best, n);
    }
    return best;
  }

  // ---- building the three programs ----

  /// Node n of the record copied into p (its operands first), memoised in map.
  std::uint32_t copy(program& p, std::unordered_map<std::uint32_t, std::uint32_t>& map, std::uint32_t n,
                     std::size_t slot_base) const {
    if (const auto it = map.find(n); it != map.end()) return it->second;
    node x = code_[n];
    if (x.o == op::input)
      x.a -= std::uint32_t(slot_base);
    else
      for (int k = 0; k < arity(x.o); ++k) {
        const std::uint32_t m = copy(p, map, operand(x, k), slot_base);
        (k == 0 ? x.a : k == 1 ? x.b : x.c) = m;
      }
    return map[n] = p.push(x);
  }

  /// Σ coef · Π factors of ms in p (factors copied there), with extra factors `also` in each.
  std::uint32_t sum_of(program& p, std::unordered_map<std::uint32_t, std::uint32_t>& map, std::size_t slot_base,
                       const std::vector<std::pair<double, std::vector<std::uint32_t>>>& ms) const {
    std::uint32_t total = none;
    for (const auto& [coef, factors] : ms) {
      std::uint32_t t = none;
      for (std::uint32_t f : factors) {
        const std::uint32_t c = copy(p, map, f, slot_base);
        t = t == none ? c : p.push({op::mul, t, c});
      }
      if (t == none)
        t = p.push({op::constant, 0, 0, 0, coef});
      else if (coef == -1)
        t = p.push({op::neg, t});
      else if (coef != 1)
        t = p.push({op::mul, p.push({op::constant, 0, 0, 0, coef}), t});
      total = total == none ? t : p.push({op::add, total, t});
    }
    return total;
  }

  void build(std::uint32_t dot_root, const form& f, separated& s) {
    s.by_key = grouping(f, true).size() <= grouping(f, false).size();
    const auto g = grouping(f, s.by_key);
    s.features = g.size();
    s.params = r_.params;
    s.query.inputs = r_.dq;
    s.key.inputs = r_.dk;
    std::unordered_map<std::uint32_t, std::uint32_t> qmap, kmap, pmap;
    using terms = std::vector<std::pair<double, std::vector<std::uint32_t>>>;
    // the features: one side's factors form the group's feature, the rest summed on the other side
    for (const auto& [key, ms] : g) {
      terms mine{{1.0, key}}, other;
      for (const monomial* m : ms) {
        std::vector<std::uint32_t> rest;
        for (std::uint32_t x : m->f)
          if (deps_[x] != (s.by_key ? dep::key : dep::query)) rest.push_back(x);
        other.push_back({m->coef, rest});
      }
      const terms& q = s.by_key ? other : mine;
      const terms& k = s.by_key ? mine : other;
      s.query.outputs.push_back(sum_of(s.query, qmap, 0, q));
      s.key.outputs.push_back(sum_of(s.key, kmap, r_.dq, k));
    }
    // α: the monomials without a key factor (constants included); β: without a query factor
    terms alpha, beta;
    std::vector<const monomial*> opaque;
    for (const monomial& m : f)
      if (m.pair != none)
        opaque.push_back(&m);
      else if (!is_term(m))
        (side(m, dep::key).empty() ? alpha : beta).push_back({m.coef, m.f});
    // the pair program: slot 0 the product, then the query's scalars, then the key's
    std::vector<std::uint32_t> qs, ks;  // record nodes (or synthesized: none) per scalar slot
    std::vector<std::uint32_t> q_out, k_out;
    const auto scalar = [&](std::uint32_t n) -> std::uint32_t {  // n's input slot in the pair program
      auto& list = deps_[n] == dep::query ? qs : ks;
      auto it = std::find(list.begin(), list.end(), n);
      if (it == list.end()) {
        list.push_back(n);
        if (deps_[n] == dep::query)
          q_out.push_back(copy(s.query, qmap, n, 0));
        else
          k_out.push_back(copy(s.key, kmap, n, r_.dq));
        it = list.end() - 1;
      }
      return std::uint32_t(it - list.begin());
    };
    if (!alpha.empty()) {
      qs.push_back(none);
      q_out.push_back(sum_of(s.query, qmap, 0, alpha));
    }
    if (!beta.empty()) {
      ks.push_back(none);
      k_out.push_back(sum_of(s.key, kmap, r_.dq, beta));
    }
    // Slots are numbered once every scalar is known; until then inputs record (side, index).
    struct pending {
      std::uint32_t node;
      bool query;
      std::uint32_t index;
    };
    std::vector<pending> inputs;
    program& p = s.pair;
    const auto input = [&](bool query, std::uint32_t index) {
      const std::uint32_t at = p.push({op::input, 0});
      inputs.push_back({at, query, index});
      return at;
    };
    const std::uint32_t dot = p.push({op::input, 0});
    std::unordered_map<std::uint64_t, std::uint32_t> input_nodes;
    const auto slot_node = [&](bool query, std::uint32_t index) {
      const std::uint64_t key = (std::uint64_t(query) << 32) | index;
      if (const auto it = input_nodes.find(key); it != input_nodes.end()) return it->second;
      return input_nodes[key] = input(query, index);
    };
    std::uint32_t root_value = dot;
    if (!alpha.empty()) root_value = p.push({op::add, root_value, slot_node(true, 0)});
    if (!beta.empty()) root_value = p.push({op::add, root_value, slot_node(false, 0)});
    // the per-pair code, from the outputs down
    const auto emit = [&](auto&& self, std::uint32_t n) -> std::uint32_t {
      if (n == dot_root) return root_value;
      if (const auto it = pmap.find(n); it != pmap.end()) return it->second;
      std::uint32_t at;
      if (deps_[n] == dep::query || deps_[n] == dep::key) {
        at = slot_node(deps_[n] == dep::query, scalar(n));
      } else {
        node x = code_[n];
        for (int k = 0; k < arity(x.o); ++k) {
          const std::uint32_t m = self(self, operand(x, k));
          (k == 0 ? x.a : k == 1 ? x.b : x.c) = m;
        }
        at = p.push(x);
      }
      return pmap[n] = at;
    };
    for (const monomial* m : opaque) {  // the per-pair parts of the sum, times their factors
      std::uint32_t t = emit(emit, m->pair);
      for (std::uint32_t x : m->f) t = p.push({op::mul, t, emit(emit, x)});
      if (m->coef == -1)
        t = p.push({op::neg, t});
      else if (m->coef != 1)
        t = p.push({op::mul, p.push({op::constant, 0, 0, 0, m->coef}), t});
      root_value = p.push({op::add, root_value, t});
    }
    for (std::uint32_t o : outputs_) p.outputs.push_back(emit(emit, o));
    s.expect = expect_;
    s.query_scalars = q_out.size();
    s.key_scalars = k_out.size();
    for (const pending& x : inputs) p.code[x.node].a = x.query ? 1 + x.index : std::uint32_t(1 + qs.size() + x.index);
    p.inputs = 1 + qs.size() + ks.size();
    s.query.outputs.insert(s.query.outputs.end(), q_out.begin(), q_out.end());
    s.key.outputs.insert(s.key.outputs.end(), k_out.begin(), k_out.end());
  }

  const recording& r_;
  const std::vector<node>& code_;
  std::size_t budget_;
  std::vector<dep> deps_;
  std::vector<char> needed_, is_form_, has_opaque_;
  std::vector<std::size_t> size_;
  std::vector<std::uint32_t> outputs_;
  std::vector<std::uint8_t> expect_;
};

}  // namespace detail

/// The separation of recording r, with at most `budget` operations per pair.
inline separation separate(const recording& r, std::size_t budget = 48) {
  separation s = detail::separator(r, budget).run();
  if (!s.ok && !r.escaped) {
    s.lanes = true;
    s.parts = separated{};
    s.parts.pair = r.code;
    s.parts.pair.outputs.assign(1, r.score);
    s.parts.pair.outputs.insert(s.parts.pair.outputs.end(), r.guards.begin(), r.guards.end());
    s.parts.expect = r.expect;
    s.parts.params = r.params;
  }
  return s;
}

/// Whether two recordings are the same code with the same values (the learnables may be others).
inline bool same_code(const recording& a, const recording& b) {
  if (a.dq != b.dq || a.dk != b.dk || a.score != b.score || a.guards != b.guards || a.expect != b.expect ||
      a.params.size() != b.params.size() || a.code.size() != b.code.size())
    return false;
  for (std::size_t i = 0; i < a.code.size(); ++i) {
    const node &x = a.code.code[i], &y = b.code.code[i];
    if (x.o != y.o || x.a != y.a || x.b != y.b || x.c != y.c || x.value != y.value) return false;
  }
  return true;
}

/// P's score on rows of dq and dk features, recorded and separated. The last separation of a P is
/// kept per thread and reused while the recording is the same (the plan asks for it several times
/// per evaluation, and a training step's forward and backward record the same code).
template <class P>
std::shared_ptr<const separation> separate_policy(const P& p, std::size_t dq, std::size_t dk) {
  thread_local recording last;
  thread_local std::shared_ptr<const separation> kept;
  recording r = record_score(p, dq, dk);
  if (!kept || !same_code(r, last)) {
    kept = std::make_shared<const separation>(separate(r));
    last = std::move(r);
  } else if (r.params != last.params) {  // the same code on another copy of the policy
    auto s = std::make_shared<separation>(*kept);
    s->parts.params = r.params;
    kept = std::move(s);
    last = std::move(r);
  }
  return kept;
}

}  // namespace xattn::record
