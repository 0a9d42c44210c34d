// select(K, idx) / select(V, idx): top-k sparse attention against the double reference of the
// dense attention whose mask admits exactly the selected keys (for distinct indices the two are
// the same softmax), on tensors and on every cache page format; -1 padding; bad indices refused.
#include "support/random.hpp"

#include <xattn/cache.hpp>
#include <xattn/eval/oracle/reference_grad.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>

using namespace xattn;
using testing::max_abs_diff;

namespace {

/// k distinct key positions below n[b] for each (b, h, i), with `pad` trailing -1 in row (0, 0, 0).
template <class I>
xt::xtensor<I, 4> random_indices(std::size_t B, std::size_t H, std::size_t Sq, std::size_t k,
                                 const std::vector<std::size_t>& n, std::uint64_t seed, std::size_t pad = 0) {
  std::mt19937_64 gen(seed);
  xt::xtensor<I, 4> idx = xt::xtensor<I, 4>::from_shape({B, H, Sq, k});
  for (std::size_t b = 0; b < B; ++b) {
    std::vector<I> all(n[b]);
    std::iota(all.begin(), all.end(), I(0));
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < Sq; ++i) {
        std::shuffle(all.begin(), all.end(), gen);
        for (std::size_t t = 0; t < k; ++t) idx(b, h, i, t) = all[t];
      }
  }
  for (std::size_t t = k - pad; t < k; ++t) idx(0, 0, 0, t) = -1;
  return idx;
}

/// The dense mask that admits exactly the selected keys: (B, Hq, Sq, Skv).
template <class I>
xt::xtensor<bool, 4> admitted(const xt::xtensor<I, 4>& idx, std::size_t Hq, std::size_t Skv) {
  const std::size_t B = idx.shape()[0], H = idx.shape()[1], Sq = idx.shape()[2], k = idx.shape()[3];
  xt::xtensor<bool, 4> m = xt::zeros<bool>({B, Hq, Sq, Skv});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < Hq; ++h)
      for (std::size_t i = 0; i < Sq; ++i)
        for (std::size_t t = 0; t < k; ++t)
          if (const auto j = idx(b, h / (Hq / H), i, t); j >= 0) m(b, h, i, std::size_t(j)) = true;
  return m;
}

template <class T>
double tolerance_for() {
  return std::is_same_v<T, float> ? 2e-6 : 2e-5;
}

}  // namespace

TEMPLATE_TEST_CASE("select: each query attends its own keys, grouped heads, -1 padding", "[select]", std::int32_t,
                   std::int64_t) {
  testing::rng r(1);
  const std::size_t B = 2, Hq = 8, Hkv = 2, Sq = 3, Skv = 300, k = 40, D = 32;
  const xt::xtensor<float, 4> q = r.tensor<float>({B, Hq, Sq, D}, -2, 2), kk = r.tensor<float>({B, Hkv, Skv, D}),
                              v = r.tensor<float>({B, Hkv, Skv, 24});
  const auto idx = random_indices<TestType>(B, Hkv, Sq, k, {Skv, Skv}, 7, 5);
  const float s = 1 / std::sqrt(float(D));
  const auto e = softmax(ref(q) * trans(select(ref(kk), idx)) * s) * select(ref(v), idx);
  const auto dense = softmax(mask(ref(q) * trans(ref(kk)) * s, bool_mask(admitted(idx, Hq, Skv)))) * ref(v);
  const auto want = reference(dense);
  for (const schedule sch : {schedule{}, schedule{.threads = 1}, schedule{.block_k = 16, .threads = 2}}) {
    INFO("threads " << sch.threads);
    const auto out = eval(e, sch);
    REQUIRE(out.shape() == std::array<std::size_t, 4>{B, Hq, Sq, 24});
    CHECK(max_abs_diff(out, want.output) < 2e-6);
    CHECK(max_abs_diff(out, reference(e).output) < 2e-6);  // the oracle reads selections as the kernel does
    const auto [o2, lse] = eval_with_lse(e, sch);
    CHECK(max_abs_diff(o2, out) == 0);
    CHECK(max_abs_diff(lse, xt::xtensor<double, 3>(want.lse)) < 2e-5);
  }
  // a query whose keys are all padding sees nothing: output 0
  auto none = idx;
  for (std::size_t t = 0; t < k; ++t) none(1, 1, 2, t) = -1;
  const auto out = eval(softmax(ref(q) * trans(select(ref(kk), none)) * s) * select(ref(v), none));
  for (std::size_t h = 4; h < 8; ++h)
    for (std::size_t d = 0; d < 24; ++d) CHECK(out(1, h, 2, d) == 0);
}

TEST_CASE("select: a selected key twice counts twice, as its own column", "[select]") {
  testing::rng r(2);
  const xt::xtensor<double, 4> q = r.tensor<double>({1, 1, 1, 8}), k = r.tensor<double>({1, 1, 10, 8}),
                               v = r.tensor<double>({1, 1, 10, 3});
  const xt::xtensor<std::int64_t, 4> idx = {{{{4, 4, 7}}}};
  const auto out = eval(softmax(ref(q) * trans(select(ref(k), idx))) * select(ref(v), idx));
  double w[3], sum = 0;
  for (std::size_t t = 0; t < 3; ++t) {
    double s = 0;
    for (std::size_t d = 0; d < 8; ++d) s += q(0, 0, 0, d) * k(0, 0, std::size_t(idx(0, 0, 0, t)), d);
    sum += w[t] = std::exp(s);
  }
  for (std::size_t d = 0; d < 3; ++d) {
    double o = 0;
    for (std::size_t t = 0; t < 3; ++t) o += w[t] / sum * v(0, 0, std::size_t(idx(0, 0, 0, t)), d);
    CHECK(out(0, 0, 0, d) == Approx(o).epsilon(1e-12));
  }
}

TEMPLATE_TEST_CASE("select: keys read in place from every page format, a decoding step and a few queries",
                   "[select][cache]", float, bfloat16, std::int8_t, float8_e4m3, q4) {
  testing::rng r(3);
  const std::size_t Hkv = 2, Hq = 8, D = 64, k = 64;
  kv_cache<TestType> cache({.kv_heads = Hkv, .head_dim = D, .page_size = 16, .max_tokens = 8192});
  const auto a = cache.add_sequence(), b = cache.add_sequence();
  cache.append(a, r.tensor<float>({Hkv, 2000, D}), r.tensor<float>({Hkv, 2000, D}));
  cache.append(b, r.tensor<float>({Hkv, 700, D}), r.tensor<float>({Hkv, 700, D}));
  const std::vector<sequence_id> batch{a, b};
  for (const std::size_t n : {std::size_t(1), std::size_t(4)}) {
    INFO(n << " queries");
    auto idx = random_indices<std::int32_t>(2, Hkv, n, k, {2000, 700}, 11 + n);
    // one query's columns 16..31: rows 32 and 47 of a page at the ends, other rows between them,
    // so that only the scattered flag keeps int8 keys from being read as 16 consecutive rows
    for (std::size_t t = 0; t < k; ++t)
      idx(0, 0, 0, t) = std::int32_t(t == 16 ? 32 : t == 31 ? 47 : t > 16 && t < 31 ? 100 + 7 * t : 600 + 5 * t);
    const xt::xtensor<float, 4> q = r.tensor<float>({2, Hq, n, D}, -2, 2);
    const auto K = cache.keys(batch), V = cache.values(batch);
    const auto e = softmax(ref(q) * trans(select(K, idx)) * 0.125f) * select(V, idx);
    const auto dense = softmax(mask(ref(q) * trans(K) * 0.125f, bool_mask(admitted(idx, Hq, 2000)))) * V;
    const auto out = eval(e);
    CHECK(max_abs_diff(out, reference(dense).output) < tolerance_for<TestType>());  // on the values as stored
    CHECK(max_abs_diff(out, eval(dense)) < tolerance_for<TestType>());
  }
}

TEST_CASE("select: bad indices are refused before anything is written", "[select][errors]") {
  testing::rng r(4);
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 2, 2, 8}), k = r.tensor<float>({1, 1, 20, 8}), v = k;
  xt::xtensor<std::int64_t, 4> idx = {{{{0, 3, 5}, {1, 19, 2}}}};
  xt::xtensor<float, 4> out = xt::ones<float>({1, 2, 2, 8});
  auto bad = idx;
  bad(0, 0, 1, 1) = 20;
  CHECK_THROWS_WITH(eval_into(softmax(ref(q) * trans(select(ref(k), bad))) * select(ref(v), bad), out),
                    Catch::Contains("select(K, idx): idx(0, 0, 1, 1) = 20 but batch row 0 has 20 keys"));
  const xt::xtensor<std::int64_t, 4> other = idx;
  CHECK_THROWS_WITH(eval_into(softmax(ref(q) * trans(select(ref(k), idx))) * select(ref(v), other), out),
                    Catch::Contains("must use the same idx"));
  const xt::xtensor<std::int64_t, 4> three = xt::zeros<std::int64_t>({1, 1, 3, 3});
  CHECK_THROWS_WITH(eval_into(softmax(ref(q) * trans(select(ref(k), three))) * select(ref(v), three), out),
                    Catch::Contains("selects keys for 3 queries, but Q has 2"));
  CHECK(xt::all(xt::equal(out, 1.0f)));  // untouched
  const xt::xtensor<std::int64_t, 4> heads = xt::zeros<std::int64_t>({1, 2, 2, 3});
  CHECK_THROWS_WITH(select(ref(k), heads), Catch::Contains("select(X, idx): idx (1,2,2,3) must be (B, Hkv, Sq, k)"));
  const xt::xtensor<std::int64_t, 3> flat = xt::zeros<std::int64_t>({1, 2, 3});
  CHECK_THROWS_WITH(select(ref(k), flat), Catch::Contains("idx must have rank 4"));
}

TEST_CASE("select: gradients against the dense masked attention's, keys chosen by several queries", "[select]") {
  testing::rng r(5);
  const std::size_t B = 2, Hq = 4, Hkv = 2, Sq = 5, Skv = 60, k = 12, D = 8;
  const xt::xtensor<double, 4> q = r.tensor<double>({B, Hq, Sq, D}), kk = r.tensor<double>({B, Hkv, Skv, D}),
                               v = r.tensor<double>({B, Hkv, Skv, 6}), d_out = r.tensor<double>({B, Hq, Sq, 6});
  const xt::xtensor<double, 1> sink_logits = {0.3, -0.2, 1.0, 0.0};
  const auto idx = random_indices<std::int64_t>(B, Hkv, Sq, k, {Skv, Skv}, 5, 3);  // overlapping across queries
  const auto e = softmax(ref(q) * trans(select(ref(kk), idx)) / 3.0, sinks(sink_logits)) * select(ref(v), idx);
  const auto dense =
      softmax(mask(ref(q) * trans(ref(kk)) / 3.0, bool_mask(admitted(idx, Hq, Skv))), sinks(sink_logits)) * ref(v);
  const auto f = eval_with_lse(e);
  const auto fd = eval_with_lse(dense);
  CHECK(max_abs_diff(f.output, fd.output) < 1e-12);
  const auto g = grad(e, f, d_out);
  const auto want = reference_grad(make_plan(dense), d_out);
  CHECK(max_abs_diff(g.dq, want.dq) < 1e-10);
  CHECK(max_abs_diff(g.dk, want.dk) < 1e-10);
  CHECK(max_abs_diff(g.dv, want.dv) < 1e-10);
  for (std::size_t h = 0; h < Hq; ++h) CHECK(g.dsinks(h) == Approx(want.dsinks[h]).margin(1e-10));
  REQUIRE(g.dk.shape() == kk.shape());
}
