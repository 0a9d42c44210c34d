// grad(e, f, d_out), the fused backward, against the double reference's gradients (itself checked
// by finite differences in test_reference_grad.cpp): every mask kind, modifiers with a broadcast
// bias, dropout, GQA, the three layouts, tensor scores, float and double -- and bitwise the same
// for 1 and 2 threads and across runs.
#include "support/bitwise.hpp"
#include "support/random.hpp"

#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

using namespace xattn;
using testing::bitwise_equal;
using testing::max_abs_diff;

namespace {

/// d_out (in the output's user shape) as the reference's (B, H, Sq, Dv) double tensor.
template <class D>
xt::xtensor<double, 4> as4(const D& d_out, std::size_t heads, bool packed) {
  xt::xarray<double> x = xt::cast<double>(d_out);
  if (x.dimension() == 4) return x;
  if (!packed) return xt::view(x, xt::all(), xt::newaxis(), xt::all(), xt::all());
  const std::size_t B = x.shape()[0], S = x.shape()[1], W = x.shape()[2] / heads;
  xt::xarray<double> r = xt::reshape_view(x, {B, S, heads, W});
  return xt::transpose(r, {0, 2, 1, 3});
}

/// The reference gradient in the user's shape of an operand (packed heads: back to (B, S, H·D)).
template <class G>
xt::xarray<double> in_user_shape(const xt::xtensor<double, 4>& ref4, const G& got, bool packed) {
  if (got.dimension() == 4) return ref4;
  if (!packed) return xt::view(ref4, xt::all(), 0);
  xt::xarray<double> t = xt::transpose(ref4, {0, 2, 1, 3});
  const auto s = t.shape();
  return xt::reshape_view(t, {s[0], s[1], s[2] * s[3]});
}

/// grad(e) against reference_grad, and bitwise for 1 and 2 threads (block sizes fixed).
template <class E, class D>
void check_grad(const E& e, const D& d_out, double tol, std::size_t heads = 1, bool packed = false,
                schedule sch = {12, 16, 1}) {
  const auto f = eval_with_lse(e);
  const auto g = grad(e, f, d_out, sch);
  const auto want = reference_grad(make_plan(e), as4(d_out, heads, packed));
  INFO(explain(e));
  if (want.dx.size()) {
    CHECK(max_abs_diff(g.dx, in_user_shape(want.dx, g.dx, packed)) < tol);
  } else {
    CHECK(max_abs_diff(g.dq, in_user_shape(want.dq, g.dq, packed)) < tol);
    CHECK(max_abs_diff(g.dk, in_user_shape(want.dk, g.dk, packed)) < tol);
  }
  CHECK(max_abs_diff(g.dv, in_user_shape(want.dv, g.dv, packed)) < tol);
  UNSCOPED_INFO("dv diff " << max_abs_diff(g.dv, in_user_shape(want.dv, g.dv, packed)));
  REQUIRE(g.dbias.size() == want.dbias.size());
  for (std::size_t n = 0; n < g.dbias.size(); ++n) CHECK(max_abs_diff(g.dbias[n], want.dbias[n]) < tol);
  sch.threads = 2;
  const auto g2 = grad(e, f, d_out, sch);
  CHECK(bitwise_equal(g.dq, g2.dq));
  CHECK(bitwise_equal(g.dk, g2.dk));
  CHECK(bitwise_equal(g.dv, g2.dv));
  CHECK(bitwise_equal(g.dx, g2.dx));
}

}  // namespace

TEMPLATE_TEST_CASE("grad: dot-product attention against the reference backward", "", float, double) {
  const double tol = std::is_same_v<TestType, float> ? 2e-5 : 1e-12;
  testing::rng rng(21);
  xt::xtensor<TestType, 4> q = rng.tensor<TestType>({2, 4, 37, 8}), k = rng.tensor<TestType>({2, 2, 45, 8}),
                           v = rng.tensor<TestType>({2, 2, 45, 5});
  const xt::xtensor<TestType, 4> d_out = rng.tensor<TestType>({2, 4, 37, 5});
  const auto Q = ref(q), K = ref(k), V = ref(v);
  xt::xtensor<int, 1> lens{0, 30};
  xt::xtensor<int, 2> lens2 = xt::xtensor<int, 2>::from_shape({2, 37});
  for (std::size_t n = 0; n < lens2.size(); ++n) lens2.flat(n) = int(rng.size(0, 45));
  xt::xtensor<double, 2> b1 = rng.tensor<double>({37, 45});
  xt::xtensor<double, 4> b2 = rng.tensor<double>({1, 4, 1, 45});
  const std::vector<double> slopes{0.5, 0.25, 0.125, 0.0625};
  const double s = 1 / std::sqrt(8.0);
  check_grad(softmax(Q * trans(K) * s) * V, d_out, tol);
  check_grad(softmax(mask(Q * trans(K) * s, causal())) * V, d_out, tol);
  check_grad(softmax(mask(Q * trans(K) * s, lengths(lens))) * V, d_out, tol);  // a uniform row: dV only
  check_grad(softmax(mask(Q * trans(K) * s, lengths(lens, masked_rows::zero))) * V, d_out, tol);
  check_grad(softmax(mask(mask(Q * trans(K), lengths(lens2)), window(9, 3))) * V, d_out, tol);
  check_grad(softmax(mask(softcap(Q * trans(K), 2.0) * 0.5 + bias(b1) + bias(b2), causal())) * V, d_out, tol);
  check_grad(softmax(alibi(Q * trans(K) * s, slopes)) * V, d_out, tol);
  check_grad(dropout(softmax(mask(Q * trans(K) * s, causal())), 0.3f, 5) * V, d_out, tol);
}

TEST_CASE("grad: rank-3 and packed heads() operands come back in their own shapes") {
  testing::rng rng(22);
  xt::xtensor<float, 3> q = rng.tensor<float>({2, 19, 6}), k = rng.tensor<float>({2, 23, 6}),
                        v = rng.tensor<float>({2, 23, 4});
  const xt::xtensor<float, 3> d3 = rng.tensor<float>({2, 19, 4});
  check_grad(softmax(mask(ref(q) * trans(ref(k)), causal())) * ref(v), d3, 2e-5);
  xt::xtensor<float, 3> qp = rng.tensor<float>({2, 19, 4 * 6}), kp = rng.tensor<float>({2, 23, 2 * 6}),
                        vp = rng.tensor<float>({2, 23, 2 * 4});
  const xt::xtensor<float, 3> dp = rng.tensor<float>({2, 19, 4 * 4});
  const auto e = softmax(heads(qp, 4) * trans(heads(kp, 2)) / 2.0f) * heads(vp, 2);
  check_grad(e, dp, 2e-5, 4, true);
  const auto g = grad(e, eval_with_lse(e), dp);
  CHECK(g.dq.shape() == qp.shape());
  CHECK(g.dk.shape() == kp.shape());
  CHECK(g.dv.shape() == vp.shape());
}

// With one key chunk and rows of whole batches (16 features) dQ accumulates in the result itself
// when its rows lie in the kernel's order; packed heads() interleave the heads and must not.
TEST_CASE("grad: dQ in place for one key chunk, and not for packed heads") {
  testing::rng rng(23);
  const schedule one_block{12, 32, 1};  // 23 keys: one block, one chunk
  xt::xtensor<float, 4> q = rng.tensor<float>({2, 4, 19, 16}), k = rng.tensor<float>({2, 2, 23, 16}),
                        v = rng.tensor<float>({2, 2, 23, 16});
  const xt::xtensor<float, 4> d4 = rng.tensor<float>({2, 4, 19, 16});
  check_grad(softmax(ref(q) * trans(ref(k)) / 4.0f) * ref(v), d4, 2e-5, 1, false, one_block);
  check_grad(softmax(mask(ref(q) * trans(ref(k)) / 4.0f, causal())) * ref(v), d4, 2e-5, 1, false, one_block);
  xt::xtensor<float, 3> qp = rng.tensor<float>({2, 19, 4 * 16}), kp = rng.tensor<float>({2, 23, 2 * 16}),
                        vp = rng.tensor<float>({2, 23, 2 * 16});
  const xt::xtensor<float, 3> dp = rng.tensor<float>({2, 19, 4 * 16});
  check_grad(softmax(heads(qp, 4) * trans(heads(kp, 2)) / 4.0f) * heads(vp, 2), dp, 2e-5, 4, true, one_block);
  xt::xtensor<double, 3> q3 = rng.tensor<double>({3, 19, 16}), k3 = rng.tensor<double>({3, 23, 16}),
                         v3 = rng.tensor<double>({3, 23, 8});
  const xt::xtensor<double, 3> d3 = rng.tensor<double>({3, 19, 8});
  check_grad(softmax(ref(q3) * trans(ref(k3)) / 4.0) * ref(v3), d3, 1e-12, 1, false, one_block);
}

// A task per key block: the key blocks of one chunk run on any thread, each query block's dQ rows
// taking them in key order (turns). 19 key blocks of 16 make 7 chunks of 3; with 2 threads a
// block often starts while the one before it in its chunk still runs.
TEST_CASE("grad: a chunk's key blocks on two threads add into dQ in key order") {
  testing::rng rng(24);
  xt::xtensor<float, 4> q = rng.tensor<float>({1, 2, 150, 8}), k = rng.tensor<float>({1, 1, 300, 8}),
                        v = rng.tensor<float>({1, 1, 300, 8});
  const xt::xtensor<float, 4> d_out = rng.tensor<float>({1, 2, 150, 8});
  const auto e = softmax(mask(ref(q) * trans(ref(k)), window(200, 0))) * ref(v);
  const auto f = eval_with_lse(e);
  const auto one = grad(e, f, d_out, schedule{6, 16, 1});
  for (int run = 0; run < 8; ++run) {
    const auto two = grad(e, f, d_out, schedule{6, 16, 2});
    REQUIRE(bitwise_equal(one.dq, two.dq));
    REQUIRE(bitwise_equal(one.dk, two.dk));
    REQUIRE(bitwise_equal(one.dv, two.dv));
  }
}

TEST_CASE("grad: score tensors (d2l's masked_softmax(X, valid_lens) followed by V)") {
  testing::rng rng(23);
  xt::xtensor<double, 4> x = rng.tensor<double>({2, 3, 17, 21}, -3, 3), v = rng.tensor<double>({2, 3, 21, 4});
  const xt::xtensor<double, 4> d_out = rng.tensor<double>({2, 3, 17, 4});
  xt::xtensor<int, 1> lens{5, 0};
  check_grad(softmax(mask(ref(x) / 2.0, lengths(lens))) * ref(v), d_out, 1e-12);
}

TEST_CASE("grad: bad input is named") {
  testing::rng rng(24);
  xt::xtensor<float, 4> q = rng.tensor<float>({1, 2, 9, 4}), k = rng.tensor<float>({1, 2, 11, 4}),
                        v = rng.tensor<float>({1, 2, 11, 3});
  const auto e = softmax(ref(q) * trans(ref(k))) * ref(v);
  const auto f = eval_with_lse(e);
  const xt::xtensor<float, 4> bad = xt::zeros<float>({1, 2, 9, 4});
  CHECK_THROWS_WITH(grad(e, f, bad), Catch::Contains("d_out has shape (1,2,9,4) but e gives (1,2,9,3)"));
  const auto other = eval_with_lse(softmax(ref(q) * trans(ref(k)) * 3.0f) * ref(v));  // another expression
  const xt::xtensor<float, 4> d_out = rng.tensor<float>({1, 2, 9, 3});
  CHECK_THROWS_WITH(grad(e, other, d_out), Catch::Contains("f.lse does not belong to e"));
}

TEST_CASE("grad: a NaN in Q makes its row's gradients NaN, not an error") {
  testing::rng rng(25);
  xt::xtensor<float, 4> q = rng.tensor<float>({1, 1, 5, 4}), k = rng.tensor<float>({1, 1, 6, 4}),
                        v = rng.tensor<float>({1, 1, 6, 3});
  q(0, 0, 2, 1) = std::numeric_limits<float>::quiet_NaN();
  const auto e = softmax(ref(q) * trans(ref(k))) * ref(v);
  const xt::xtensor<float, 4> d_out = rng.tensor<float>({1, 1, 5, 3});
  const auto g = grad(e, eval_with_lse(e), d_out);
  CHECK(std::isnan(g.dq(0, 0, 2, 0)));
  CHECK(std::isfinite(g.dq(0, 0, 1, 0)));
}

TEST_CASE("grad_into: caller memory in any strides, bitwise grad's; bad buffers refused before writing") {
  testing::rng rng(26);
  const std::size_t B = 2, Hq = 4, Hkv = 2, Sq = 9, Skv = 13, D = 16, Dv = 5;
  xt::xtensor<float, 4> q = rng.tensor<float>({B, Hq, Sq, D}), k = rng.tensor<float>({B, Hkv, Skv, D}),
                        v = rng.tensor<float>({B, Hkv, Skv, Dv});
  const xt::xtensor<float, 1> t = rng.tensor<float>({Hq});
  const auto e = softmax(mask(ref(q) * trans(ref(k)) * 0.4f, window(3, 1, align::bottom_right)), sinks(t)) * ref(v);
  const schedule sch{4, 8, 1};  // one thread: one key chunk, where dQ could accumulate in place
  const auto f = eval_with_lse(e, sch);
  const xt::xtensor<float, 4> d_out = rng.tensor<float>({B, Hq, Sq, Dv});
  const auto want = grad(e, f, d_out, sch);
  using o4 = raw_tensor<const float, 4>;
  const o4 out{f.output.data(), {B, Hq, Sq, Dv}, {std::ptrdiff_t(Hq * Sq * Dv), std::ptrdiff_t(Sq * Dv), Dv, 1}};
  const raw_tensor<const float, 3> lse{f.lse.data(), {B, Hq, Sq}, {std::ptrdiff_t(Hq * Sq), Sq, 1}};
  const o4 dout{d_out.data(), out.shape, out.strides};
  // dq in packed heads (B, Sq, Hq, D) with a padded row, dk transposed (B, Skv, Hkv, D), dv row-major
  std::vector<float> dq(B * Sq * Hq * (D + 3), -7.0f), dk(B * Skv * Hkv * D, -7.0f), dv(B * Hkv * Skv * Dv, -7.0f);
  const raw_tensor<float, 4> dq_t{
      dq.data(), {B, Hq, Sq, D}, {std::ptrdiff_t(Sq * Hq * (D + 3)), D + 3, std::ptrdiff_t(Hq * (D + 3)), 1}};
  const raw_tensor<float, 4> dk_t{
      dk.data(), {B, Hkv, Skv, D}, {std::ptrdiff_t(Skv * Hkv * D), D, std::ptrdiff_t(Hkv * D), 1}};
  const raw_tensor<float, 4> dv_t{
      dv.data(), {B, Hkv, Skv, Dv}, {std::ptrdiff_t(Hkv * Skv * Dv), std::ptrdiff_t(Skv * Dv), Dv, 1}};
  const auto g = grad_into(e, out, lse, dout, dq_t, dk_t, dv_t, sch);
  CHECK(g.dq.size() == 0);
  CHECK(bitwise_equal(g.dsinks, want.dsinks));
  bool same = true;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < Hq; ++h)
      for (std::size_t i = 0; i < Sq; ++i)
        for (std::size_t d = 0; d < D; ++d)
          same = same && dq[b * Sq * Hq * (D + 3) + i * Hq * (D + 3) + h * (D + 3) + d] == want.dq(b, h, i, d);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < Hkv; ++h)
      for (std::size_t j = 0; j < Skv; ++j) {
        for (std::size_t d = 0; d < D; ++d)
          same = same && dk[b * Skv * Hkv * D + j * Hkv * D + h * D + d] == want.dk(b, h, j, d);
        for (std::size_t d = 0; d < Dv; ++d)
          same = same && dv[((b * Hkv + h) * Skv + j) * Dv + d] == want.dv(b, h, j, d);
      }
  CHECK(same);
  CHECK(dq[D] == -7.0f);  // the padding is not written

  // each refusal leaves the gradients as they were
  std::fill(dq.begin(), dq.end(), -7.0f);
  const auto refused = [&](auto dq2, auto dk2, auto dv2, auto out2, const char* what) {
    CHECK_THROWS_WITH(grad_into(e, out2, lse, dout, dq2, dk2, dv2, sch), Catch::Contains(what));
    CHECK(std::all_of(dq.begin(), dq.end(), [](float x) { return x == -7.0f; }));
  };
  auto bad = dk_t;
  bad.shape[2] = Skv - 1;
  refused(dq_t, bad, dv_t, out, "dk shape (2,2,12,16) but the gradient of K is (2,2,13,16)");
  bad = dv_t;
  bad.data = dk.data();
  refused(dq_t, dk_t, bad, out, "the dv and the dk overlap");
  bad = dq_t;
  bad.data = q.data();
  refused(bad, dk_t, dv_t, out, "the dq overlaps an operand");
  bad = dv_t;
  bad.data = const_cast<float*>(d_out.data());
  refused(dq_t, dk_t, bad, out, "the dv and the d_out overlap");
  bad = dq_t;
  bad.strides[3] = 0;
  refused(bad, dk_t, dv_t, out, "give two elements");
  o4 other = out;
  other.data = nullptr;
  refused(dq_t, dk_t, dv_t, other, "out data is null");
  const auto wrong = eval_with_lse(softmax(ref(q) * trans(ref(k)) * 0.4f) * ref(v), sch);  // another expression
  const raw_tensor<const float, 3> wrong_lse{wrong.lse.data(), lse.shape, lse.strides};
  CHECK_THROWS_WITH(grad_into(e, out, wrong_lse, dout, dq_t, dk_t, dv_t, sch),
                    Catch::Contains("lse does not belong to e"));
  CHECK(std::all_of(dv.begin(), dv.end(), [](float x) { return x == 0.0f; }));  // zeroed, not half written
}
