#pragma once
// Separation: a policy's recorded score (recorded.hpp) cut into what runs once per query row, once
// per key row and once per pair. Every value is tagged with what it depends on (nothing, the
// query, the key, both). Sums of products whose factors each depend on one side are bilinear
// forms; the largest such form the per-pair code consumes is a dot product of derived feature
// vectors, Σ_g fq_g(q) · fk_g(k) + α(q) + β(k), which the score microkernels compute. What the
// rest of the per-pair code reads of one side only (norms, projections, per-row scalars) is
// computed once per row and per key; the per-pair remainder is a short program run on lanes of
// pairs; when that remainder only scales the product by one row's values, fold.hpp moves them into
// the features. So cosine similarity written as three sums and a quotient runs as normalised rows
// and one Q·Kᵀ tile; |q - k|² expands to |q|² - 2 q·k + |k|².
//
// A sum of one small per-pair body over the features (|q_d - k_d| for an L1 distance) is kept as a
// feature map: the body runs on lanes of (feature, key), once for every feature, and the sum is an
// input of the per-pair program.
//
// Not separated (the caller then runs the policy pair by pair): neither a product of the query's
// and the key's values nor a feature map, two or more of them, or a per-pair remainder longer
// than `budget` operations.
#include "fold.hpp"
#include "linear.hpp"
#include "program.hpp"
#include "recorded.hpp"
#include "separated.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <initializer_list>
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

namespace detail {

/// Thrown when a product has more factors than `factors` holds: the score is not separated.
struct too_many_factors {};

/// A monomial's factors, kept inline: a form has thousands of monomials (a bilinear form's
/// D·D), and each would otherwise allocate.
struct factors {
  static constexpr std::size_t capacity = 8;
  std::array<std::uint32_t, capacity> v{};
  std::uint8_t n = 0;

  factors() = default;
  factors(std::initializer_list<std::uint32_t> l) {
    for (std::uint32_t x : l) push_back(x);
  }
  template <class It>
  factors(It first, It last) {
    for (; first != last; ++first) push_back(*first);
  }
  std::uint32_t* begin() noexcept { return v.data(); }
  std::uint32_t* end() noexcept { return v.data() + n; }
  const std::uint32_t* begin() const noexcept { return v.data(); }
  const std::uint32_t* end() const noexcept { return v.data() + n; }
  bool empty() const noexcept { return n == 0; }
  std::size_t size() const noexcept { return n; }
  void push_back(std::uint32_t x) {
    if (n == capacity) throw too_many_factors{};
    v[n++] = x;
  }
  friend bool operator==(const factors& a, const factors& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator<(const factors& a, const factors& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }
};

struct monomial {
  double coef = 1;
  factors f;                               // factors: nodes that depend on one side or on nothing
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
    try {
      return separate(out);
    } catch (const too_many_factors&) {
      return fail(out, "a product of more than " + std::to_string(factors::capacity) + " factors");
    }
  }

 private:
  separation separate(separation& out) {
    std::vector<char> forced(code_.size(), 0);  // roots kept as per-pair operations
    std::uint32_t dot_root = none;
    form dot_form;
    for (;;) {
      find_forms(forced);
      const std::vector<std::uint32_t> roots = find_roots();
      bool changed = false;
      dot_root = none;
      std::size_t large = 0;
      for (std::uint32_t n : roots) {
        form f = flatten(n);
        const std::size_t g = groups(f), m = feature_map(f).members.size();
        if (m >= min_map) {  // a feature map (and maybe a product): the sum's root
          ++large;
          dot_root = n, dot_form = std::move(f);
          continue;
        }
        if (g == 0) continue;  // no product: per-pair code as written
        if (g < 3) {           // a rank-1 or rank-2 product (|q|·|k|) is cheaper per pair than a tile product
          forced[n] = 1;
          changed = true;
        } else {
          ++large;
          dot_root = n, dot_form = std::move(f);
        }
      }
      if (changed) continue;
      if (large > 1)
        return fail(out, std::to_string(large) + " separate products of query and key features (or feature maps)");
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

  static constexpr std::uint32_t none = std::uint32_t(-1);
  static constexpr std::size_t min_map = 4;  // features a map needs: fewer stay per-pair code

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
            for (std::uint32_t x : v.f) m.f.push_back(x);
            out.push_back(std::move(m));
          }
        return out;
      }
    }
  }

  /// The factors of m that depend on side s.
  factors side(const monomial& m, dep s) const {
    factors out;
    for (std::uint32_t f : m.f)
      if (deps_[f] == s) out.push_back(f);
    return out;
  }
  bool is_term(const monomial& m) const {
    return m.pair == none && !side(m, dep::query).empty() && !side(m, dep::key).empty();
  }

  /// Feature groups of form f's products: by the key's factors or by the query's.
  std::map<factors, std::vector<const monomial*>> grouping(const form& f, bool by_key) const {
    std::map<factors, std::vector<const monomial*>> g;
    for (const monomial& m : f)
      if (is_term(m)) g[side(m, by_key ? dep::key : dep::query)].push_back(&m);
    return g;
  }
  std::size_t groups(const form& f) const {
    std::size_t best = 0;
    for (const dep s : {dep::key, dep::query}) {
      std::vector<factors> keys;
      for (const monomial& m : f)
        if (is_term(m)) keys.push_back(side(m, s));
      std::sort(keys.begin(), keys.end());
      const auto n = std::size_t(std::unique(keys.begin(), keys.end()) - keys.begin());
      best = s == dep::key ? n : std::min(best, n);
    }
    return best;
  }

  // ---- feature maps: isomorphic per-pair bodies summed ----

  /// A per-pair body (the pair values below n down to values of one side or none): its shape
  /// (operations, and where its leaves are) and its leaves in order.
  struct body {
    std::vector<std::int64_t> shape;
    std::vector<std::uint32_t> q, k, c;  // leaves of the query, of the key, of neither
  };
  body shape_of(std::uint32_t n) const {
    body b;
    std::unordered_map<std::uint32_t, std::int64_t> seen;
    const auto walk = [&](auto&& self, std::uint32_t x) -> void {
      if (const auto it = seen.find(x); it != seen.end()) {
        b.shape.push_back(-16 - it->second);  // a value met before
        return;
      }
      const node& v = code_[x];
      if (deps_[x] == dep::query) {
        b.shape.push_back(-1);
        b.q.push_back(x);
      } else if (deps_[x] == dep::key) {
        b.shape.push_back(-2);
        b.k.push_back(x);
      } else if (!pairs(x)) {  // a constant or a learnable: the same in every feature, or a value per feature
        b.shape.push_back(-3);
        b.c.push_back(x);
      } else {
        for (int k = 0; k < arity(v.o); ++k) self(self, operand(v, k));
        b.shape.push_back(std::int64_t(v.o));
        if (v.o == op::pow) b.shape.push_back(std::bit_cast<std::int64_t>(v.value));
      }
      seen.emplace(x, std::int64_t(seen.size()));
    };
    walk(walk, n);
    return b;
  }

  /// The largest group of f's per-pair parts with one body and one coefficient, without other
  /// factors: a feature map when it has min_map members or more.
  struct map_group {
    std::vector<const monomial*> members;
    std::vector<body> bodies;
  };
  map_group feature_map(const form& f) const {
    std::map<std::pair<std::vector<std::int64_t>, double>, map_group> groups;
    for (const monomial& m : f)
      if (m.pair != none && m.f.empty()) {
        body b = shape_of(m.pair);
        map_group& g = groups[{b.shape, m.coef}];
        g.members.push_back(&m);
        g.bodies.push_back(std::move(b));
      }
    map_group best;
    for (auto& [key, g] : groups)
      if (g.members.size() >= min_map && g.members.size() > best.members.size()) best = std::move(g);
    return best;
  }

  /// The map's body as a program (inputs: the query's leaves, the leaves of neither side that
  /// differ between features, the key's leaves), its per-feature values into the query and key
  /// programs' outputs.
  void build_map(const map_group& g, separated& s, std::unordered_map<std::uint32_t, std::uint32_t>& qmap,
                 std::unordered_map<std::uint32_t, std::uint32_t>& kmap) const {
    const body& first = g.bodies[0];
    const auto same = [&](std::uint32_t x, std::uint32_t y) {
      const node &u = code_[x], &v = code_[y];
      return x == y || (u.o == op::constant && v.o == op::constant && u.value == v.value);
    };
    std::vector<char> varies(first.c.size(), 0);
    for (const body& b : g.bodies)
      for (std::size_t i = 0; i < b.c.size(); ++i) varies[i] = varies[i] || !same(b.c[i], first.c[i]);
    std::vector<std::size_t> cv;  // the varying ones: per feature, on the query's side
    for (std::size_t i = 0; i < varies.size(); ++i)
      if (varies[i]) cv.push_back(i);
    s.map_features = g.members.size();
    s.map_query = first.q.size() + cv.size();
    s.map_key = first.k.size();
    program& p = s.map;
    p.inputs = s.map_query + s.map_key;
    std::unordered_map<std::uint32_t, std::uint32_t> at;  // the first body's nodes in p
    for (std::size_t i = 0; i < first.q.size(); ++i) at[first.q[i]] = p.push({op::input, std::uint32_t(i)});
    for (std::size_t i = 0; i < cv.size(); ++i)
      at[first.c[cv[i]]] = p.push({op::input, std::uint32_t(first.q.size() + i)});
    for (std::size_t i = 0; i < first.k.size(); ++i)
      at[first.k[i]] = p.push({op::input, std::uint32_t(s.map_query + i)});
    const auto put = [&](auto&& self, std::uint32_t x) -> std::uint32_t {
      if (const auto it = at.find(x); it != at.end()) return it->second;
      node v = code_[x];
      for (int k = 0; k < arity(v.o); ++k) {
        const std::uint32_t m = self(self, operand(v, k));
        (k == 0 ? v.a : k == 1 ? v.b : v.c) = m;
      }
      return at[x] = p.push(v);  // a shared leaf of neither side, or an operation of the body
    };
    p.outputs.assign(1, put(put, g.members[0]->pair));
    for (const body& b : g.bodies) {
      for (std::uint32_t x : b.q) s.query.outputs.push_back(copy(s.query, qmap, x, 0));
      for (std::size_t i : cv) s.query.outputs.push_back(copy(s.query, qmap, b.c[i], 0));
      for (std::uint32_t x : b.k) s.key.outputs.push_back(copy(s.key, kmap, x, r_.dq));
    }
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
      terms mine{{1.0, std::vector<std::uint32_t>(key.begin(), key.end())}}, other;
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
    const map_group mg = feature_map(f);
    std::vector<const monomial*> opaque;
    for (const monomial& m : f)
      if (m.pair != none) {
        if (std::find(mg.members.begin(), mg.members.end(), &m) == mg.members.end()) opaque.push_back(&m);
      } else if (!is_term(m)) {
        (side(m, dep::key).empty() ? alpha : beta)
            .push_back({m.coef, std::vector<std::uint32_t>(m.f.begin(), m.f.end())});
      }
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
    // the root's value: the product (when it has features), α, β, the map's sum, the other parts
    std::uint32_t root_value = s.features ? dot : none;
    const auto add = [&](std::uint32_t x) { root_value = root_value == none ? x : p.push({op::add, root_value, x}); };
    if (!alpha.empty()) add(slot_node(true, 0));
    if (!beta.empty()) add(slot_node(false, 0));
    std::uint32_t map_sum = none;  // its slot is numbered last
    if (!mg.members.empty()) {
      map_sum = p.push({op::input, 0});
      const double c = mg.members[0]->coef;
      add(c == 1    ? map_sum
          : c == -1 ? p.push({op::neg, map_sum})
                    : p.push({op::mul, p.push({op::constant, 0, 0, 0, c}), map_sum}));
    }
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
      add(t);
    }
    for (std::uint32_t o : outputs_) p.outputs.push_back(emit(emit, o));
    s.expect = expect_;
    s.query_scalars = q_out.size();
    s.key_scalars = k_out.size();
    for (const pending& x : inputs) p.code[x.node].a = x.query ? 1 + x.index : std::uint32_t(1 + qs.size() + x.index);
    p.inputs = 1 + qs.size() + ks.size();
    if (map_sum != none) p.code[map_sum].a = std::uint32_t(p.inputs++);
    s.query.outputs.insert(s.query.outputs.end(), q_out.begin(), q_out.end());
    s.key.outputs.insert(s.key.outputs.end(), k_out.begin(), k_out.end());
    if (!mg.members.empty()) build_map(mg, s, qmap, kmap);  // its values after the scalars
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
  if (s.ok) {
    fold_factors(s.parts);
    s.parts.query_linear = split_linear(s.parts.query);
    s.parts.key_linear = split_linear(s.parts.key);
  }
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
