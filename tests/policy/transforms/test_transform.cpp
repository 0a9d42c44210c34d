// A load transform written by a user, outside the library: a shear of the first two features
// whose amount depends on the batch row and the position, applied to Q, to K or to both by
// transformed(X, t). The kernel reads it row by row (it has no table); its output and gradients
// equal plain attention on operands the test transforms itself, in double, under masks and GQA.
#include "support/against_reference.hpp"
#include "support/random.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <string>

using namespace xattn;
using testing::max_abs_diff;

namespace {

/// Row i of sequence b: x0 += a(b, i) · x1, with a(b, i) = a · (1 + b + i / 10).
struct shear {
  double a = 0.5;
  double amount(std::size_t b, std::size_t i) const { return a * (1.0 + double(b) + double(i) / 10); }
  void check(std::size_t, std::size_t, std::size_t d, const char* who) const {
    if (d < 2) throw std::invalid_argument(std::string("shear(") + who + "): needs 2 features");
  }
  template <class X, class S>
  void row(const X* x, std::ptrdiff_t xs, std::size_t n, std::size_t b, std::size_t i, S c, S* out) const {
    for (std::size_t k = 0; k < n; ++k) out[k] = c * S(x[std::ptrdiff_t(k) * xs]);
    out[0] += c * S(amount(b, i)) * S(x[xs]);
  }
  template <class S>
  void row_transposed(S* g, std::ptrdiff_t gs, std::size_t, std::size_t b, std::size_t i) const {
    g[gs] += S(amount(b, i)) * g[0];
  }
  static std::string name() { return "shear"; }
};

static_assert(load_transform<shear> && load_transform<rotary>);

/// x with every row sheared, as a new tensor.
xt::xtensor<double, 4> sheared(const xt::xtensor<double, 4>& x, const shear& s) {
  xt::xtensor<double, 4> y = x;
  for (std::size_t b = 0; b < x.shape(0); ++b)
    for (std::size_t h = 0; h < x.shape(1); ++h)
      for (std::size_t i = 0; i < x.shape(2); ++i) y(b, h, i, 0) += s.amount(b, i) * x(b, h, i, 1);
  return y;
}

/// g taken back through the shear: g1 += a(b, i) · g0.
xt::xtensor<double, 4> back(xt::xtensor<double, 4> g, const shear& s) {
  for (std::size_t b = 0; b < g.shape(0); ++b)
    for (std::size_t h = 0; h < g.shape(1); ++h)
      for (std::size_t i = 0; i < g.shape(2); ++i) g(b, h, i, 1) += s.amount(b, i) * g(b, h, i, 0);
  return g;
}

}  // namespace

TEST_CASE("load transform: a user's transform equals plain attention on operands transformed beforehand") {
  testing::rng r(31);
  const std::size_t B = 2, Hq = 4, Hkv = 2, Sq = 23, Skv = 31, D = 8, Dv = 8;
  const xt::xtensor<double, 4> q = r.tensor<double>({B, Hq, Sq, D}), k = r.tensor<double>({B, Hkv, Skv, D}),
                               v = r.tensor<double>({B, Hkv, Skv, Dv}), d_out = r.tensor<double>({B, Hq, Sq, Dv});
  const shear sq{0.7}, sk{-0.4};
  const xt::xtensor<double, 4> q2 = sheared(q, sq), k2 = sheared(k, sk);
  const schedule small{8, 16, 2};
  const auto plain = softmax(mask(ref(q2) * trans(ref(k2)) / 3.0, causal())) * ref(v);
  const auto e = softmax(mask(transformed(ref(q), sq) * trans(transformed(ref(k), sk)) / 3.0, causal())) * ref(v);
  const auto f = eval_with_lse(e, small), fp = eval_with_lse(plain, small);
  CHECK(max_abs_diff(f.output, fp.output) < 1e-13);
  CHECK(max_abs_diff(f.lse, fp.lse) < 1e-13);
  const auto g = grad(e, f, d_out, small), gp = grad(plain, fp, d_out, small);
  CHECK(max_abs_diff(g.dq, back(gp.dq, sq)) < 1e-12);
  CHECK(max_abs_diff(g.dk, back(gp.dk, sk)) < 1e-12);
  CHECK(max_abs_diff(g.dv, gp.dv) < 1e-12);
  testing::check_against_reference(e, d_out, 1e-12, small);
  // one side only, and beside rope on the other
  const xt::xtensor<int, 1> pos = xt::arange<int>(int(Skv));
  testing::check_against_reference(softmax(transformed(ref(q), sq) * trans(ref(k))) * ref(v), d_out, 1e-12, small);
  testing::check_against_reference(softmax(ref(q) * trans(rope(ref(k), pos)) * 0.5) * ref(v), d_out, 1e-12, small);
  const auto x = explain(e, small);
  CHECK_THAT(x.text, Catch::Contains("Q double (2,4,23,8) through shear"));

  SECTION("float, the kernel's rows in float") {
    const xt::xtensor<float, 4> qf = xt::cast<float>(q), kf = xt::cast<float>(k), vf = xt::cast<float>(v),
                                df = xt::cast<float>(d_out);
    testing::check_against_reference(
        softmax(mask(transformed(ref(qf), sq) * trans(transformed(ref(kf), sk)) * 0.3f, causal())) * ref(vf), df, 2e-5,
        small);
  }
}

TEST_CASE("load transform: its own check names the operand") {
  const xt::xtensor<float, 4> q = xt::zeros<float>({1, 2, 3, 1}), k = xt::zeros<float>({1, 2, 5, 1});
  CHECK_THROWS_WITH(eval(softmax(transformed(ref(q), shear{}) * trans(ref(k))) * ref(k)),
                    Catch::Contains("shear(Q): needs 2 features"));
}
