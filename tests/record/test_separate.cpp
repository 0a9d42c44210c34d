// The recording of user code, its separation into per-row and per-pair programs, and the lane
// machine that runs them: every separated score against the policy itself, evaluated pair by pair
// in double; the machine's reverse pass against the tape's (var.hpp) derivatives.
#include "catalogue/cosine_temperature.hpp"
#include "catalogue/plain_scores.hpp"

#include <catch2/catch.hpp>
#include <xattn/learnable.hpp>
#include <xattn/record/machine.hpp>
#include <xattn/record/separate.hpp>
#include <xattn/select.hpp>
#include <xattn/var.hpp>

#include <cmath>
#include <random>
#include <span>
#include <vector>

using namespace xattn;
using record::machine;

namespace {

std::vector<double> random_row(std::mt19937& g, std::size_t n) {
  std::normal_distribution<double> d;
  std::vector<double> x(n);
  for (double& v : x) v = d(g);
  return x;
}

/// The separated score of one pair, evaluated by the machine in double; guards_hold: whether the
/// pair's guard conditions went the recorded way.
struct separated_score {
  double score;
  bool guards_hold;
};
separated_score run_separated(const record::separated& s, const std::vector<double>& q, const std::vector<double>& k) {
  constexpr std::size_t w = simd::width<double>;
  machine<double> m;
  const auto outputs = [&](const record::program& p, const std::vector<double>& x) {
    std::vector<machine<double>::input> in(p.inputs);
    for (std::size_t i = 0; i < p.inputs; ++i) in[i] = {&x[i], true};
    m.run(p, w, in.data());
    std::vector<double> out;
    for (std::uint32_t o : p.outputs) out.push_back(m.value(o)[0]);
    return out;
  };
  const std::vector<double> fq = outputs(s.query, q), fk = outputs(s.key, k);
  const std::size_t nq = s.features + s.query_scalars, nk = s.features + s.key_scalars;
  REQUIRE(fq.size() == nq + s.map_features * s.map_query);
  REQUIRE(fk.size() == nk + s.map_features * s.map_key);
  std::vector<double> in{0.0};
  for (std::size_t g = 0; g < s.features; ++g) in[0] += fq[g] * fk[g];
  in.insert(in.end(), fq.begin() + std::ptrdiff_t(s.features), fq.begin() + std::ptrdiff_t(nq));
  in.insert(in.end(), fk.begin() + std::ptrdiff_t(s.features), fk.begin() + std::ptrdiff_t(nk));
  if (s.map_features) {  // the feature map's sum
    double sum = 0;
    for (std::size_t g = 0; g < s.map_features; ++g) {
      std::vector<double> x(fq.begin() + std::ptrdiff_t(nq + g * s.map_query),
                            fq.begin() + std::ptrdiff_t(nq + (g + 1) * s.map_query));
      x.insert(x.end(), fk.begin() + std::ptrdiff_t(nk + g * s.map_key),
               fk.begin() + std::ptrdiff_t(nk + (g + 1) * s.map_key));
      sum += outputs(s.map, x)[0];
    }
    in.push_back(sum);
  }
  const std::vector<double> out = outputs(s.pair, in);
  bool hold = true;
  for (std::size_t g = 0; g < s.expect.size(); ++g) hold = hold && (out[1 + g] != 0) == bool(s.expect[g]);
  for (const auto& g : s.query_guards) hold = hold && (fq[s.features + g.scalar] != 0) == g.expect;
  for (const auto& g : s.key_guards) hold = hold && (fk[s.features + g.scalar] != 0) == g.expect;
  return {out[0], hold};
}

template <class P>
record::separation separated_of(const P& p, std::size_t dq, std::size_t dk, std::size_t budget = 48) {
  return record::separate(record::record_score(p, dq, dk), budget);
}

/// The separated score of p against p itself on random pairs.
template <class P>
void check_pairs(const P& p, const record::separated& s, std::size_t dq, std::size_t dk, double tol = 1e-12) {
  std::mt19937 g(7);
  for (int t = 0; t < 20; ++t) {
    const auto q = random_row(g, dq), k = random_row(g, dk);
    const double want = p(std::span<const double>(q), std::span<const double>(k));
    const separated_score got = run_separated(s, q, k);
    CHECK(got.guards_hold);
    CHECK(std::abs(got.score - want) <= tol * (1 + std::abs(want)));
  }
}

/// q·k + Σ|q_d - k_d|: a product and a per-feature remainder.
struct dot_plus_l1 {
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::abs;
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += q[d] * k[d] + abs(q[d] - k[d]);
    return s;
  }
};

/// (Σ q_d k_d) · (Σ q_d k_{d+1}): two different products.
struct two_products {
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T a = 0, b = 0;
    for (std::size_t d = 0; d < q.size(); ++d) {
      a += q[d] * k[d];
      b += q[d] * k[(d + 1) % k.size()];
    }
    return a * b;
  }
};

/// The square of a dot product with a key-only bias: one product consumed twice.
struct squared_dot {
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T s = 0, kk = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += q[d] * k[d], kk += k[d];
    return s * s + tanh(kk);
  }
};

/// Cosine with its zero case as data (no guard).
struct cosine_select {
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::sqrt;
    T qk = 0, qq = 0, kk = 0;
    for (std::size_t d = 0; d < q.size(); ++d) qk += q[d] * k[d], qq += q[d] * q[d], kk += k[d] * k[d];
    const T norm = sqrt(qq * kk);
    return select(norm == T(0), T(0), qk / select(norm == T(0), T(1), norm));
  }
};

/// Every operation of the machine, for its reverse pass.
struct every_op {
  xattn::learnable<> c = 0.7;
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::abs, std::exp, std::log, std::max, std::min, std::pow, std::sqrt, std::tanh;
    const T a = q[0] * k[0] - q[1] / (T(2) + k[1] * k[1]);
    const T b = exp(-abs(q[2] - k[2])) + log(T(1) + q[1] * q[1]) + tanh(k[0] * T(c));
    const T e = max(q[0], k[1]) - min(q[2], k[0]) + pow(T(1.5) + sqrt(k[2] * k[2] + T(1)), 3.0);
    return select(a > b, a * b, -e) + e * T(c);
  }
  auto parameters() const { return std::tie(c); }
};

/// qᵀWk with W (3, 5), entries sin(1 + n).
dsl::bilinear_score bilinear_3x5() {
  dsl::bilinear_score p;
  p.cols = 5;
  for (int n = 0; n < 15; ++n) p.w.push_back(std::sin(1.0 + n));
  return p;
}

}  // namespace

TEST_CASE("cosine as written folds into normalised rows, one product and nothing per pair", "[record]") {
  const dsl::cosine_with_temperature p{0.25};
  const auto s = separated_of(p, 16, 16);
  REQUIRE(s.ok);
  CHECK(s.parts.features == 16);  // q / (|q| τ) and k / |k|
  CHECK(s.parts.product_only());
  CHECK(s.parts.pair.operations() == 0);
  CHECK(s.parts.expect.empty());
  REQUIRE(s.parts.query_guards.size() == 1);  // |q|² != 0
  REQUIRE(s.parts.key_guards.size() == 1);    // |k|² != 0
  CHECK(s.parts.query_scalars == 1);
  CHECK(s.parts.key_scalars == 1);
  check_pairs(p, s.parts, 16, 16);
  // a zero row takes the other branch: its guard says so, and its features are zero, not NaN
  const std::vector<double> zero(16, 0.0), k(16, 0.5);
  const auto q0 = run_separated(s.parts, zero, k), k0 = run_separated(s.parts, k, zero);
  CHECK_FALSE(q0.guards_hold);
  CHECK_FALSE(k0.guards_hold);
  CHECK(q0.score == 0);
  CHECK(k0.score == 0);
}

/// qk / (|q| |k|) written with the norms apart, the product's sign taken out by a negation and a
/// square root of one side's negative value: which of them fold.
struct cosine_apart {
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::sqrt;
    T qk = 0, qq = 0, kk = 0;
    for (std::size_t d = 0; d < q.size(); ++d) qk += q[d] * k[d], qq += q[d] * q[d], kk += k[d] * k[d];
    return -qk / (sqrt(qq) * sqrt(kk) * T(2));
  }
};
struct root_of_signed {  // √((−q₀²)·(−k₀²)) = |q₀ k₀| may not split: each factor is negative
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::sqrt;
    T qk = 0;
    for (std::size_t d = 0; d < q.size(); ++d) qk += q[d] * k[d];
    return qk * sqrt((-(q[0] * q[0])) * (-(k[0] * k[0])));
  }
};
struct key_factor_as_query {  // the same score with a key-only factor in the denominator
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    T qk = 0, kk = 0;
    for (std::size_t d = 0; d < q.size(); ++d) qk += q[d] * k[d], kk += k[d] * k[d];
    return qk / (T(1) + kk);
  }
};

TEST_CASE("folding takes one-row factors into the features, and only those", "[record]") {
  const auto a = separated_of(cosine_apart{}, 9, 9);
  REQUIRE(a.ok);
  CHECK(a.parts.product_only());
  CHECK(a.parts.query_guards.empty());
  check_pairs(cosine_apart{}, a.parts, 9, 9);
  const auto r = separated_of(root_of_signed{}, 6, 6);  // kept per pair
  REQUIRE(r.ok);
  CHECK_FALSE(r.parts.product_only());
  check_pairs(root_of_signed{}, r.parts, 6, 6);
  const auto k = separated_of(key_factor_as_query{}, 7, 7);
  REQUIRE(k.ok);
  CHECK(k.parts.product_only());
  check_pairs(key_factor_as_query{}, k.parts, 7, 7);
  // the key's factor is on the key's side: queries that differ only in it would show otherwise
  std::mt19937 g(3);
  const auto q = random_row(g, 7), k1 = random_row(g, 7);
  auto k2 = k1;
  for (double& x : k2) x *= 3;
  const double want1 = key_factor_as_query{}(std::span<const double>(q), std::span<const double>(k1));
  const double want2 = key_factor_as_query{}(std::span<const double>(q), std::span<const double>(k2));
  CHECK(run_separated(k.parts, q, k1).score == Approx(want1).epsilon(1e-12));
  CHECK(run_separated(k.parts, q, k2).score == Approx(want2).epsilon(1e-12));
}

TEST_CASE("select records both sides: no guard", "[record]") {
  const auto s = separated_of(cosine_select{}, 8, 8);
  REQUIRE(s.ok);
  CHECK(s.parts.expect.empty());
  check_pairs(cosine_select{}, s.parts, 8, 8);
  const std::vector<double> zero(8, 0.0), k(8, 0.5);
  const auto got = run_separated(s.parts, zero, k);
  CHECK(got.guards_hold);
  CHECK(got.score == 0);
}

TEST_CASE("the Gaussian kernel expands to norms and one product", "[record]") {
  const dsl::gaussian_score p{0.8};
  const auto s = separated_of(p, 12, 12);
  REQUIRE(s.ok);
  CHECK(s.parts.features == 14);  // q and k, then (−|q|²/σ², 1) and (1, −|k|²/σ²) folded in
  CHECK(s.parts.product_only());
  CHECK(s.parts.query_scalars == 0);
  CHECK(s.parts.key_scalars == 0);
  check_pairs(p, s.parts, 12, 12, 1e-10);
}

TEST_CASE("a bilinear form of different sizes groups by the smaller side", "[record]") {
  const dsl::bilinear_score p = bilinear_3x5();
  const auto s = separated_of(p, 3, 5);
  REQUIRE(s.ok);
  CHECK(s.parts.features == 3);
  CHECK_FALSE(s.parts.by_key);
  check_pairs(p, s.parts, 3, 5);
  const auto t = separated_of(p, 5, 3);  // W read as (5, 3) now: the keys' side is smaller
  dsl::bilinear_score p2 = p;
  p2.cols = 3;
  const auto t2 = separated_of(p2, 5, 3);
  REQUIRE(t2.ok);
  CHECK(t2.parts.features == 3);
  CHECK(t2.parts.by_key);
  check_pairs(p2, t2.parts, 5, 3);
}

TEST_CASE("weighted dot: the weights go to the query side", "[record]") {
  dsl::weighted_dot_score p;
  for (int d = 0; d < 10; ++d) p.w.push_back(1 + 0.3 * d);
  const auto s = separated_of(p, 10, 10);
  REQUIRE(s.ok);
  CHECK(s.parts.features == 10);
  CHECK(s.parts.query_scalars == 0);
  CHECK(s.parts.key_scalars == 0);
  check_pairs(p, s.parts, 10, 10);
}

/// Σ_d w_d |q_d - k_d|: a feature map whose body reads a learnable per feature.
struct weighted_l1 {
  std::vector<xattn::learnable<>> w;
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::abs;
    T s = 0;
    for (std::size_t d = 0; d < q.size(); ++d) s += T(w[d]) * abs(q[d] - k[d]);
    return s;
  }
};

/// A per-pair remainder of 3 operations per feature, in no sum: max over features.
struct chebyshev {
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    using std::abs, std::max;
    T m = abs(q[0] - k[0]);
    for (std::size_t d = 1; d < q.size(); ++d) m = max(m, abs(q[d] - k[d]));
    return -m;
  }
};

TEST_CASE("feature maps: a sum over features of one body runs once per feature and key", "[record]") {
  const auto l1 = separated_of(dsl::laplace_score{2.0}, 64, 64);
  REQUIRE(l1.ok);
  CHECK(l1.parts.features == 0);
  CHECK(l1.parts.map_features == 64);
  CHECK(l1.parts.map_query == 1);
  CHECK(l1.parts.map_key == 1);
  CHECK(l1.parts.map.operations() == 2);   // |q - k|
  CHECK(l1.parts.pair.operations() == 2);  // -s / bandwidth
  check_pairs(dsl::laplace_score{2.0}, l1.parts, 64, 64);
  weighted_l1 w;
  for (int d = 0; d < 9; ++d) w.w.push_back(0.5 + 0.1 * d);
  const auto wl = separated_of(w, 9, 9);
  REQUIRE(wl.ok);
  CHECK(wl.parts.map_query == 2);  // q_d and w_d, per feature
  check_pairs(w, wl.parts, 9, 9);
  const auto part = separated_of(dot_plus_l1{}, 64, 64);  // a product and a map
  REQUIRE(part.ok);
  CHECK(part.parts.features == 64);
  CHECK(part.parts.map_features == 64);
  check_pairs(dot_plus_l1{}, part.parts, 64, 64);
}

TEST_CASE("what does not factor is reported, what partly factors keeps a per-pair remainder", "[record]") {
  const auto two = separated_of(two_products{}, 8, 8);
  CHECK_FALSE(two.ok);
  CHECK_THAT(two.reason, Catch::Contains("2 separate products"));
  const auto part = separated_of(dot_plus_l1{}, 3, 3);
  REQUIRE(part.ok);
  CHECK(part.parts.features == 3);
  CHECK(part.parts.map_features == 0);  // three features: per pair
  check_pairs(dot_plus_l1{}, part.parts, 3, 3);
  const auto max_d = separated_of(chebyshev{}, 64, 64);
  CHECK_FALSE(max_d.ok);
  CHECK_THAT(max_d.reason, Catch::Contains("no product"));
  const auto sq = separated_of(squared_dot{}, 6, 6);
  REQUIRE(sq.ok);
  CHECK(sq.parts.features == 6);
  CHECK(sq.parts.key_scalars == 1);
  check_pairs(squared_dot{}, sq.parts, 6, 6);
}

TEST_CASE("the machine's reverse pass gives the tape's derivatives", "[record]") {
  const every_op p;
  const auto r = record::record_score(p, 3, 3);
  std::mt19937 g(3);
  constexpr std::size_t w = simd::width<double>, lanes = 2 * w;
  // lanes of different pairs: input slot s of lane l
  std::vector<std::vector<double>> rows(lanes);
  for (auto& x : rows) x = random_row(g, 6);
  std::vector<std::vector<double>> slot(6, std::vector<double>(lanes));
  for (std::size_t l = 0; l < lanes; ++l)
    for (std::size_t s = 0; s < 6; ++s) slot[s][l] = rows[l][s];
  std::vector<machine<double>::input> in;
  for (auto& x : slot) in.push_back({x.data(), false});
  machine<double> m;
  m.run(r.code, lanes, in.data());
  std::vector<double> seed(lanes);
  for (std::size_t l = 0; l < lanes; ++l) seed[l] = 0.5 + double(l);
  const std::pair<std::uint32_t, const double*> seeds[] = {{r.score, seed.data()}};
  m.reverse(r.code, seeds);
  const parameter_slots slots(p);
  for (std::size_t l = 0; l < lanes; ++l) {
    tape<double>& t = tape<double>::local();
    t.clear();
    std::vector<var<double>> x;
    for (double v : rows[l]) x.push_back(t.input(v));
    const var<double> out = p(std::span<const var<double>>(x.data(), 3), std::span<const var<double>>(x.data() + 3, 3));
    CHECK(std::abs(m.value(r.score)[l] - out.v) <= 1e-12 * (1 + std::abs(out.v)));
    t.sweep(out, seed[l]);
    for (std::size_t s = 0; s < 6; ++s) {
      std::uint32_t node = 0;
      for (std::uint32_t i = 0; i < r.code.size(); ++i)
        if (r.code.code[i].o == record::op::input && r.code.code[i].a == s) node = i;
      CHECK(std::abs(m.adjoint(node)[l] - t.adjoint(x[s])) <= 1e-10 * (1 + std::abs(t.adjoint(x[s]))));
    }
    double dc_tape = 0;
    for (const auto& leaf : t.learned()) dc_tape += t.adjoint(leaf.id);
    double dc = 0;
    for (std::uint32_t i = 0; i < r.code.size(); ++i)
      if (r.code.code[i].o == record::op::param) dc += m.adjoint(i)[l];
    CHECK(std::abs(dc - dc_tape) <= 1e-10 * (1 + std::abs(dc_tape)));
  }
}

TEST_CASE("linear outputs of a row program become one product by a matrix of the learnables", "[record]") {
  // outputs: 2·x0 − x1/4 (linear), x0·x1 (not), x1 + 3 (affine: not), w·x2 (linear in x, w learnable)
  const learnable<> w = 0.5;
  record::recording r;
  r.code.inputs = 3;
  {
    const record::scope sc(r);
    const recorded x0 = recorded::input(0, 1.0), x1 = recorded::input(1, 2.0), x2 = recorded::input(2, 3.0);
    const recorded wv = recorded(w);
    r.code.outputs = {(x0 * 2.0 - x1 / 4.0).id(), (x0 * x1).id(), (x1 + 3.0).id(), (wv * x2).id()};
  }
  const record::linear_split s = record::split_linear(r.code);
  CHECK(s.linear == std::vector<std::uint32_t>{0, 3});
  CHECK(s.rest == std::vector<std::uint32_t>{1, 2});
  REQUIRE(s.matrix.outputs.size() == 3 * 2);
  machine<double> m;
  m.run(s.matrix, simd::width<double>, nullptr);
  const auto at = [&](std::size_t i, std::size_t l) { return m.value(s.matrix.outputs[i * 2 + l])[0]; };
  CHECK(at(0, 0) == 2.0);
  CHECK(at(1, 0) == -0.25);
  CHECK(at(2, 0) == 0.0);
  CHECK(at(2, 1) == 0.5);  // the learnable's value
  CHECK(at(0, 1) == 0.0);
  CHECK(s.others.outputs.size() == 2);
  CHECK(s.others.operations() == 2);  // x0·x1 and x1 + 3, nothing of the linear ones
}

TEST_CASE("a bilinear form's query program is all product, the Gaussian's features too", "[record]") {
  const dsl::bilinear_score p = bilinear_3x5();
  const auto b = separated_of(p, 3, 5);
  REQUIRE(b.ok);
  CHECK(b.parts.key_linear.linear.size() == 3);  // grouped by the query's factors: Wk on the key's side
  CHECK(b.parts.key_linear.others.operations() == 0);
  const auto c = separated_of(dsl::gaussian_score{0.5}, 8, 8);
  REQUIRE(c.ok);
  CHECK(c.parts.query_linear.linear.size() == 8);  // the features: q times a constant
  CHECK(c.parts.query_linear.rest.size() == 2);    // −|q|²/σ² and the key's term's 1
  // cosine's are q / (|q| τ): per row, not a product by a matrix
  const auto d = separated_of(dsl::cosine_with_temperature{0.5}, 8, 8);
  REQUIRE(d.ok);
  CHECK(d.parts.query_linear.linear.empty());
}
