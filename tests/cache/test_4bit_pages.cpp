// 4-bit pages (q4, llama.cpp's q4_0): a decoding step moves by less than the quantization's bound
// against float pages, with int8 beside it, on uniform data and on keys with outlier channels;
// a grouped prefill agrees with the reference on the stored values. (docs/numerics.md quotes the
// figures these print.)
#include "support/bitwise.hpp"
#include "support/cache_steps.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>
#include <xattn/cache.hpp>
#include <xattn/xattn.hpp>

#include <cmath>
#include <vector>

using namespace xattn;
using testing::max_abs_diff;

namespace {

/// The largest |x| (every group's largest magnitude is at most this).
double amax_of(const xt::xtensor<float, 3>& x) {
  double worst = 0;
  for (float v : x) worst = std::max(worst, double(std::fabs(v)));
  return worst;
}

/// One decoding step over pages of T holding k and v, against the same step over float pages.
template <class T>
std::pair<double, double> step_errors(const xt::xtensor<float, 4>& q, const xt::xtensor<float, 3>& k,
                                      const xt::xtensor<float, 3>& v, float scale) {
  const std::size_t hkv = k.shape()[0], len = k.shape()[1], dim = k.shape()[2];
  kv_cache<T> c({.kv_heads = hkv, .head_dim = dim, .page_size = 16, .max_tokens = len});
  kv_cache<float> c32({.kv_heads = hkv, .head_dim = dim, .page_size = 16, .max_tokens = len});
  const auto s = c.add_sequence(), s32 = c32.add_sequence();
  c.append(s, k, v);
  c32.append(s32, k, v);
  const auto e = softmax(ref(q) * trans(c.keys({s})) * scale) * c.values({s});
  const auto e32 = softmax(ref(q) * trans(c32.keys({s32})) * scale) * c32.values({s32});
  const xt::xtensor<float, 4> o = eval(e), o32 = eval(e32);
  return {max_abs_diff(o, reference(e).output), max_abs_diff(o, o32)};
}

}  // namespace

TEST_CASE("4-bit pages: q4 moves a decoding step by less than its bound, int8 beside it", "[cache][q4]") {
  // q4_0's step is |d| = m / 8 for m a group's largest magnitude: a feature moves by at most half
  // a step, or a whole one at the end of the range opposite m (codes stop at 7 · d), so by at most
  // amax / 8; the bound of docs/numerics.md's int8 section with that in place of amax / 254.
  testing::rng r(71);
  const std::size_t hkv = 8, group = 4, dim = 128, len = 2048;
  const float scale = 1 / std::sqrt(float(dim));
  const xt::xtensor<float, 4> q = r.tensor<float>({1, hkv * group, 1, dim});
  double q1 = 0;
  for (std::size_t h = 0; h < hkv * group; ++h) {
    double l1 = 0;
    for (std::size_t d = 0; d < dim; ++d) l1 += std::fabs(q(0, h, 0, d));
    q1 = std::max(q1, l1);
  }
  for (const bool outliers : {false, true}) {
    xt::xtensor<float, 3> k = r.tensor<float>({hkv, len, dim}), v = r.tensor<float>({hkv, len, dim});
    if (outliers) testing::outlier_channels(k);
    const auto [kernel_error, q4_error] = step_errors<q4>(q, k, v, scale);
    const auto [kernel8, int8_error] = step_errors<std::int8_t>(q, k, v, scale);
    const double delta = scale * q1 * amax_of(k) / 8, vmax = xt::amax(xt::abs(v))();
    const double bound = amax_of(v) / 8 + std::expm1(2 * delta) * vmax;
    INFO((outliers ? "outlier key channels" : "U(-1, 1)")
         << ", (1, 32 heads, 8 kv heads, 2048 keys, 128): q4 kernel error " << kernel_error << ", quantization error "
         << q4_error << " (int8 " << int8_error << "), bound " << bound);
    CHECK(kernel_error < 2e-5);  // int16 codes of the queries meet the keys (kernel/qk_q4.hpp), as int8's
    CHECK(q4_error > int8_error);
    CHECK(q4_error < bound);
    (void)kernel8;
  }
}

TEST_CASE("4-bit pages: q4 prefills a grouped batch as the reference on its stored values", "[cache][q4]") {
  testing::rng r(48);
  kv_cache<q4, q4> cache({.kv_heads = 2, .head_dim = 80, .page_size = 16, .max_tokens = 1024});  // 80: a partial group
  const auto a = cache.add_sequence(), b = cache.add_sequence();
  cache.append(a, r.tensor<float>({2, 300, 80}), r.tensor<float>({2, 300, 80}));
  cache.append(b, r.tensor<float>({2, 100, 80}), r.tensor<float>({2, 100, 80}));
  const auto batch = std::vector<sequence_id>{a, b};
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 8, 70, 80});  // 4 query heads per key head
  const auto e = softmax(mask(ref(q) * trans(cache.keys(batch)) / std::sqrt(80.0f), causal(align::bottom_right))) *
                 cache.values(batch);
  CHECK(max_abs_diff(eval(e), reference(e).output) < 2e-6);
  CHECK_THAT(
      explain(e).text,
      Catch::Contains("K q4 (q4_0: 4 bits, scale per 32) (2,2,300,80) in pages of 16 tokens, sequences of (300,100)"));
}
