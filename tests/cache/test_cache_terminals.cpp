// Cache terminals: cache.keys(batch) and cache.values(batch) in attention expressions. A batch of
// sequences of different lengths, read from their pages, gives bit for bit what the same values in
// a padded contiguous tensor give with each row's length and alignment spelled out as masks (int8
// pages: what one page per sequence gives), and agrees with the double reference; prefill, chunked
// prefill, forks, GQA and bad input.
#include "support/bitwise.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>
#include <xattn/cache.hpp>
#include <xattn/xattn.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

using namespace xattn;
using testing::bitwise_equal;
using testing::max_abs_diff;

namespace {

/// The batch's keys (values) as stored, in a padded (B, H, longest, D) tensor of the page type.
template <class T, class C>
xt::xtensor<T, 4> padded(const C& c, const std::vector<sequence_id>& batch, bool keys) {
  std::size_t longest = 0;
  for (auto s : batch) longest = std::max(longest, c.length(s));
  const auto& o = c.options();
  xt::xtensor<T, 4> x = xt::zeros<T>({batch.size(), o.kv_heads, longest, o.head_dim});
  for (std::size_t b = 0; b < batch.size(); ++b) {
    const xt::xtensor<float, 3> s = keys ? c.stored_keys(batch[b]) : c.stored_values(batch[b]);
    for (std::size_t h = 0; h < s.shape()[0]; ++h)
      for (std::size_t t = 0; t < s.shape()[1]; ++t)
        for (std::size_t d = 0; d < s.shape()[2]; ++d) x(b, h, t, d) = T(s(h, t, d));
  }
  return x;
}

template <class C>
xt::xtensor<std::int64_t, 1> lengths_of(const C& c, const std::vector<sequence_id>& batch) {
  xt::xtensor<std::int64_t, 1> l = xt::xtensor<std::int64_t, 1>::from_shape({batch.size()});
  for (std::size_t b = 0; b < batch.size(); ++b) l(b) = std::int64_t(c.length(batch[b]));
  return l;
}

/// Each sequence's offset for bottom-right alignment of n newest queries: length - n.
xt::xtensor<std::int64_t, 1> offsets(const xt::xtensor<std::int64_t, 1>& lens, std::size_t n) {
  xt::xtensor<std::int64_t, 1> o = lens;
  for (auto& v : o) v -= std::int64_t(n);
  return o;
}

template <class T>
void append_random(kv_cache<T>& c, sequence_id s, std::size_t n, testing::rng& r) {
  const auto& o = c.options();
  c.append(s, r.tensor<float>({o.kv_heads, n, o.head_dim}), r.tensor<float>({o.kv_heads, n, o.head_dim}));
}

/// The kernel's error bound for pages of T: float's, 16-bit's, and int8's and q4's, whose keys
/// multiply int16 codes of the queries (a score moves by up to scale · Σ|k| · max|q| / 65534).
template <class T>
double tolerance_for() {
  return std::is_same_v<T, float> ? 2e-6 : 2e-5;
}

/// max |a - b|, where equal infinities (the log-sum-exp of a row that sees no key) agree.
template <class A>
double lse_diff(const A& a, const A& b) {
  if (a.shape() != b.shape()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a.data()[i] == b.data()[i]) continue;
    const double d = std::abs(double(a.data()[i]) - double(b.data()[i]));
    m = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(m, d);
  }
  return m;
}

}  // namespace

TEST_CASE("cache terminals: the issue's decode step compiles and runs as written", "[cache]") {
  testing::rng r(11);
  kv_cache<std::int8_t> cache({.kv_heads = 8, .head_dim = 128, .page_size = 16, .max_tokens = 1 << 20});
  auto a = cache.add_sequence();
  auto b = cache.add_sequence();
  cache.append(a, r.tensor<float>({8, 40, 128}), r.tensor<float>({8, 40, 128}));
  cache.append(b, r.tensor<float>({8, 7, 128}), r.tensor<float>({8, 7, 128}));
  auto c = cache.fork(a);
  cache.append(c, r.tensor<float>({8, 3, 128}), r.tensor<float>({8, 3, 128}));
  std::vector<sequence_id> batch{a, b, c};
  auto K = cache.keys(batch), V = cache.values(batch);
  xt::xtensor<float, 4> q = r.tensor<float>({3, 32, 1, 128});
  auto e = softmax(mask(ref(q) * trans(K) / std::sqrt(128.0f), causal(align::bottom_right))) * V;
  auto out = eval(e);
  REQUIRE(out.shape() == std::array<std::size_t, 4>{3, 32, 1, 128});
  CHECK(max_abs_diff(out, reference(e).output) < tolerance_for<std::int8_t>());  // on the values as stored
  CHECK_THAT(explain(e).text,
             Catch::Contains("K int8 (q8_0) (3,8,43,128) in pages of 16 tokens, sequences of (40,7,43) tokens") &&
                 Catch::Contains("sequence_lengths_mask (excludes; classify skips blocks"));
  CHECK(cache.length(a) == 40);
  CHECK(cache.length(c) == 43);
  cache.release(b);
  CHECK_THROWS_WITH(cache.keys(batch), Catch::Contains("kv_cache.keys: sequence 1") &&
                                           Catch::Contains("is not in this cache or was released"));
}

TEMPLATE_TEST_CASE("cache terminals: a ragged batch is bit for bit the padded tensor with its lengths as masks",
                   "[cache]", float, bfloat16, float16, std::int8_t, float8_e4m3, q4) {
  // quantized pages against float tensors of the dequantized values; int8 and q4 keys are
  // multiplied on int16 query codes (kernel/qk_q8.hpp, qk_q4.hpp), so the two agree to the
  // queries' rounding, and pages of any size agree bit for bit with one page per sequence
  constexpr bool quantized = is_quantized_v<TestType>,
                 integer_products =
                     std::is_same_v<TestType, std::int8_t> || (std::is_same_v<TestType, q4> && kernel::has_q4_products);
  using dense_t = std::conditional_t<quantized, float, TestType>;
  const std::size_t hkv = 2, group = GENERATE(1, 4), dim = GENERATE(16, 128), ps = GENERATE(4, 6, 16);
  const auto fill = [&](kv_cache<TestType>& cache, testing::rng& r) {
    auto a = cache.add_sequence(), b = cache.add_sequence();
    append_random(cache, a, 700, r);  // several key blocks, and a decoding split
    append_random(cache, b, 9, r);
    auto c = cache.fork(a);  // shares a's pages, then copies the partial one on its first append
    append_random(cache, c, 5, r);
    auto e0 = cache.add_sequence();
    append_random(cache, e0, 1, r);
    return std::vector<sequence_id>{a, b, c, e0};
  };
  testing::rng r(21), same(21);
  kv_cache<TestType> cache({.kv_heads = hkv, .head_dim = dim, .page_size = ps, .max_tokens = 4096});
  kv_cache<TestType> whole({.kv_heads = hkv, .head_dim = dim, .page_size = 1024, .max_tokens = 8192});
  const auto batch = fill(cache, r), whole_batch = fill(whole, same);
  const auto lens = lengths_of(cache, batch);
  const auto K = cache.keys(batch), V = cache.values(batch);
  const auto kp = padded<dense_t>(cache, batch, true), vp = padded<dense_t>(cache, batch, false);
  const float scale = 1 / std::sqrt(float(dim));
  INFO("group " << group << ", dim " << dim << ", page_size " << ps);

  for (const std::size_t n : {std::size_t(1), std::size_t(3)}) {
    INFO(n << " new queries per sequence");
    const xt::xtensor<float, 4> q = r.tensor<float>({4, hkv * group, n, dim});
    const auto paged = softmax(mask(ref(q) * trans(K) * scale, causal(align::bottom_right))) * V;
    const auto dense = softmax(mask(mask(ref(q) * trans(ref(kp)) * scale, causal_offsets(offsets(lens, n))),
                                    lengths(lens, masked_rows::zero))) *
                       ref(vp);
    const auto out = eval(paged);
    if constexpr (integer_products)
      CHECK(max_abs_diff(out, eval(dense)) < tolerance_for<TestType>());
    else
      CHECK(bitwise_equal(out, eval(dense)));
    CHECK(bitwise_equal(
        out, eval(softmax(mask(ref(q) * trans(whole.keys(whole_batch)) * scale, causal(align::bottom_right))) *
                  whole.values(whole_batch))));
    CHECK(max_abs_diff(out, reference(paged).output) < tolerance_for<TestType>());
    CHECK(max_abs_diff(out, reference(dense).output) < tolerance_for<TestType>());

    const auto [o2, lse] = eval_with_lse(paged);
    const auto [o3, lse_dense] = eval_with_lse(dense);
    CHECK(bitwise_equal(o2, out));
    if constexpr (integer_products)
      CHECK(lse_diff(lse, lse_dense) < tolerance_for<TestType>());
    else
      CHECK(bitwise_equal(lse, lse_dense));

    // every mask and modifier sees each sequence's own positions
    const auto alibi_slopes = alibi_op::standard_slopes(hkv * group);
    xt::xtensor<float, 1> sink_logits = r.vector<float>(hkv * group);
    const auto windowed =
        softmax(mask(softcap(alibi(ref(q) * trans(K) * scale, alibi_slopes), 5.0), window(20, 0, align::bottom_right)),
                sinks(sink_logits)) *
        V;
    CHECK(max_abs_diff(eval(windowed), reference(windowed).output) < tolerance_for<TestType>());
  }
}

TEST_CASE("cache terminals: a prompt appended whole or in chunks attends as one causal prefill", "[cache]") {
  testing::rng r(31);
  const std::size_t hkv = 2, hq = 4, dim = 32, len = 70;
  const xt::xtensor<float, 3> keys = r.tensor<float>({hkv, len, dim}), values = r.tensor<float>({hkv, len, dim});
  const xt::xtensor<float, 4> q = r.tensor<float>({1, hq, len, dim});
  kv_cache<float> cache({.kv_heads = hkv, .head_dim = dim, .page_size = 8, .max_tokens = 1024});
  const float scale = 1 / std::sqrt(float(dim));

  auto whole = cache.add_sequence();
  cache.append(whole, keys, values);
  const auto prefill = softmax(mask(ref(q) * trans(cache.keys({whole})) * scale, causal())) * cache.values({whole});
  const xt::xtensor<float, 4> kd = xt::view(keys, xt::newaxis(), xt::all(), xt::all(), xt::all());
  const xt::xtensor<float, 4> vd = xt::view(values, xt::newaxis(), xt::all(), xt::all(), xt::all());
  const auto dense = softmax(mask(ref(q) * trans(ref(kd)) * scale, causal())) * ref(vd);
  const xt::xtensor<float, 4> out = eval(prefill);
  CHECK(bitwise_equal(out, eval(dense)));

  // chunked: each piece appended, then its queries attend everything before them and themselves
  auto chunked = cache.add_sequence();
  for (std::size_t lo = 0; lo < len;) {
    const std::size_t hi = std::min(len, lo + 16 + lo % 7);
    cache.append(chunked, xt::view(keys, xt::all(), xt::range(lo, hi), xt::all()),
                 xt::view(values, xt::all(), xt::range(lo, hi), xt::all()));
    const xt::xtensor<float, 4> qc = xt::view(q, xt::all(), xt::all(), xt::range(lo, hi), xt::all());
    const auto step = softmax(mask(ref(qc) * trans(cache.keys({chunked})) * scale, causal(align::bottom_right))) *
                      cache.values({chunked});
    const xt::xtensor<float, 4> got = eval(step);
    const xt::xtensor<float, 4> want = xt::view(out, xt::all(), xt::all(), xt::range(lo, hi), xt::all());
    INFO("chunk [" << lo << ", " << hi << ")");
    CHECK(max_abs_diff(got, want) < 1e-6);
    lo = hi;
  }
  CHECK(cache.length(chunked) == len);
}

TEST_CASE("cache terminals: keys and rope positions per sequence", "[cache]") {
  testing::rng r(41);
  kv_cache<float> cache({.kv_heads = 1, .head_dim = 8, .page_size = 4, .max_tokens = 64});
  auto a = cache.add_sequence(), b = cache.add_sequence();
  append_random(cache, a, 10, r);
  append_random(cache, b, 3, r);
  const auto pos = cache.positions({a, b}, 2);
  CHECK(pos == xt::xtensor<std::int64_t, 2>{{8, 9}, {1, 2}});
  CHECK_THROWS_WITH(cache.positions({a, b}, 4),
                    "xattn: kv_cache.positions: sequence 1 of the batch holds 3 tokens, fewer than the 4 asked for");
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 1, 2, 8});
  const auto e = softmax(ref(q) * trans(cache.keys({a, b}))) * cache.values({a, b});
  const auto roped = softmax(rope(ref(q), pos) * trans(cache.keys({a, b}))) * cache.values({a, b});
  CHECK(max_abs_diff(eval(e), reference(e).output) < 1e-6);
  CHECK(max_abs_diff(eval(roped), reference(roped).output) < 1e-6);
  // weights over the longest sequence: zero past each sequence's end
  const auto w = eval(softmax(ref(q) * trans(cache.keys({a, b}))));
  REQUIRE(w.shape() == std::array<std::size_t, 4>{2, 1, 2, 10});
  for (std::size_t j = 3; j < 10; ++j) CHECK(w(1, 0, 0, j) == 0.0f);
}

TEMPLATE_TEST_CASE("cache terminals: keys stored rotated attend as rope() of the whole keys", "[cache]", float,
                   bfloat16) {
  // Each sequence's keys turned at its own positions as they are appended (in pieces, and after a
  // fork), against the double reference of the expression without a cache: rope(Q) and rope(K)
  // over contiguous tensors of the same tokens.
  testing::rng r(47);
  const std::size_t hkv = 2, hq = 4, dim = 16, n = 3;
  for (const auto& opts : {rope_options{}, rope_options{.base = 500.0f, .dims = 8, .style = rope_style::interleaved}}) {
    // [snippet rope_cache]
    kv_cache<TestType> cache({.kv_heads = hkv, .head_dim = dim, .page_size = 4, .max_tokens = 256, .rope = opts});
    // [end rope_cache]
    const std::vector<std::size_t> lens{13, 6};
    std::vector<xt::xtensor<float, 3>> ks, vs;
    std::vector<sequence_id> batch;
    for (const std::size_t len : lens) {
      ks.push_back(r.tensor<float>({hkv, len, dim}));
      vs.push_back(r.tensor<float>({hkv, len, dim}));
      batch.push_back(cache.add_sequence());
      for (std::size_t lo = 0; lo < len; lo += 5) {
        const std::size_t hi = std::min(len, lo + 5);
        cache.append(batch.back(), xt::view(ks.back(), xt::all(), xt::range(lo, hi), xt::all()),
                     xt::view(vs.back(), xt::all(), xt::range(lo, hi), xt::all()));
      }
    }
    // a fork of the second sequence goes on at its parent's positions
    batch.push_back(cache.fork(batch[1]));
    const xt::xtensor<float, 3> k2 = r.tensor<float>({hkv, 4, dim}), v2 = r.tensor<float>({hkv, 4, dim});
    cache.append(batch[2], k2, v2);
    ks.push_back(xt::concatenate(xt::xtuple(ks[1], k2), 1));
    vs.push_back(xt::concatenate(xt::xtuple(vs[1], v2), 1));

    const xt::xtensor<float, 4> q = r.tensor<float>({batch.size(), hq, n, dim});
    const float scale = 1 / std::sqrt(float(dim));
    // [snippet rope_step]
    const auto pos = cache.positions(batch, n);  // each sequence's newest n positions
    const xt::xtensor<float, 4> got =
        eval(softmax(mask(rope(ref(q), pos, opts) * trans(cache.keys(batch)) * scale, causal(align::bottom_right))) *
             cache.values(batch));
    // [end rope_step]
    for (std::size_t b = 0; b < batch.size(); ++b) {
      const std::size_t len = ks[b].shape()[1];
      const xt::xtensor<float, 4> kd = xt::view(ks[b], xt::newaxis(), xt::all(), xt::all(), xt::all());
      const xt::xtensor<float, 4> vd = xt::view(vs[b], xt::newaxis(), xt::all(), xt::all(), xt::all());
      const xt::xtensor<float, 4> qb = xt::view(q, xt::range(b, b + 1), xt::all(), xt::all(), xt::all());
      const xt::xtensor<std::int64_t, 1> qpos = xt::view(pos, b, xt::all());
      const auto e = softmax(mask(rope(ref(qb), qpos, opts) * trans(rope(ref(kd), 0, opts)) * scale,
                                  causal(align::bottom_right))) *
                     ref(vd);
      const auto want = reference(e).output;
      INFO("sequence " << b << " of " << len << " tokens, dims " << opts.dims);
      double worst = 0;
      for (std::size_t h = 0; h < hq; ++h)
        for (std::size_t i = 0; i < n; ++i)
          for (std::size_t d = 0; d < dim; ++d)
            worst = std::max(worst, std::abs(double(got(b, h, i, d)) - want(0, h, i, d)));
      // bfloat16 pages round each rotated key to 8 bits of mantissa
      CHECK(worst < (std::is_same_v<TestType, float> ? 2e-6 : 2e-2));
    }
  }
  CHECK_THROWS_AS(kv_cache<float>({.kv_heads = 1, .head_dim = 8, .rope = rope_options{.dims = 5}}),
                  std::invalid_argument);
  CHECK_THROWS_WITH(kv_cache<float>({.kv_heads = 1, .head_dim = 8, .rope = rope_options{.dims = 5}}),
                    Catch::Contains("kv_cache_options.rope") && Catch::Contains("dims must be even"));
}

TEST_CASE("cache terminals: bad input is refused with the shapes named", "[cache]") {
  testing::rng r(51);
  kv_cache<float> cache({.kv_heads = 2, .head_dim = 8, .page_size = 4, .max_tokens = 64});
  auto a = cache.add_sequence(), b = cache.add_sequence();
  append_random(cache, a, 5, r);
  append_random(cache, b, 6, r);
  const std::vector<sequence_id> batch{a, b};
  const xt::xtensor<float, 4> q3 = r.tensor<float>({3, 2, 1, 8});
  CHECK_THROWS_WITH(eval(softmax(ref(q3) * trans(cache.keys(batch))) * cache.values(batch)),
                    Catch::Contains("queries and keys have different batch sizes: Q (3,2,1,8), K (2,2,6,8)") &&
                        Catch::Contains("one batch row per cache sequence"));
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 2, 1, 8});
  CHECK_THROWS_WITH(
      eval(softmax(ref(q) * trans(cache.keys(batch))) * cache.values({b, a})),
      Catch::Contains(
          "values V (2,2,6,8) come from cache sequences of other lengths than the keys': (6,5) against (5,6)"));
  CHECK_THROWS_WITH(cache.keys({}), "xattn: kv_cache.keys: the batch holds no sequences");
  auto empty = cache.add_sequence();
  CHECK_THROWS_WITH(
      eval(softmax(ref(xt::xtensor<float, 4>(r.tensor<float>({1, 2, 1, 8}))) * trans(cache.keys({empty}))) *
           cache.values({empty})),
      Catch::Contains("there are no keys"));
}

TEST_CASE("cache terminals: int8 pages move a decoding step by less than the quantization bound", "[cache]") {
  // Against the unquantized inputs: a value row moves by at most half a step, max|v| / 254 per
  // group of 32; a score by at most scale · Σ_d |q_d| · (its key's half step), and a change of at
  // most δ in every score moves the weights by at most e^(2δ) - 1 relative, so an output by at
  // most max|Δv| + (e^(2δ) - 1) · max|v|. (docs/numerics.md quotes the figures this prints.)
  testing::rng r(61);
  const std::size_t hkv = 8, group = 4, dim = 128, len = 2048;
  const xt::xtensor<float, 3> k = r.tensor<float>({hkv, len, dim}), v = r.tensor<float>({hkv, len, dim});
  const xt::xtensor<float, 4> q = r.tensor<float>({1, hkv * group, 1, dim});
  const float scale = 1 / std::sqrt(float(dim));
  kv_cache<std::int8_t> c8({.kv_heads = hkv, .head_dim = dim, .page_size = 16, .max_tokens = len});
  kv_cache<float> c32({.kv_heads = hkv, .head_dim = dim, .page_size = 16, .max_tokens = len});
  const auto s8 = c8.add_sequence(), s32 = c32.add_sequence();
  c8.append(s8, k, v);
  c32.append(s32, k, v);
  const auto e8 = softmax(ref(q) * trans(c8.keys({s8})) * scale) * c8.values({s8});
  const auto e32 = softmax(ref(q) * trans(c32.keys({s32})) * scale) * c32.values({s32});
  const xt::xtensor<float, 4> o8 = eval(e8), o32 = eval(e32);
  const double kernel_error = max_abs_diff(o8, reference(e8).output), quantization_error = max_abs_diff(o8, o32);

  const auto half_steps = [&](const xt::xtensor<float, 3>& x) {  // per (head, token, group): amax / 254
    double worst = 0;
    for (std::size_t h = 0; h < hkv; ++h)
      for (std::size_t t = 0; t < len; ++t)
        for (std::size_t g = 0; g < dim; g += 32) {
          double amax = 0;
          for (std::size_t d = g; d < g + 32; ++d) amax = std::max(amax, double(std::fabs(x(h, t, d))));
          worst = std::max(worst, amax / 254);
        }
    return worst;
  };
  double q1 = 0;
  for (std::size_t h = 0; h < hkv * group; ++h) {
    double l1 = 0;
    for (std::size_t d = 0; d < dim; ++d) l1 += std::fabs(q(0, h, 0, d));
    q1 = std::max(q1, l1);
  }
  const double delta = scale * q1 * half_steps(k), vmax = xt::amax(xt::abs(v))();
  const double bound = half_steps(v) + std::expm1(2 * delta) * vmax;
  INFO("int8 pages, (1, 32 heads, 8 kv heads, 2048 keys, 128): kernel error "
       << kernel_error << ", quantization error " << quantization_error << ", bound " << bound);
  CHECK(kernel_error < 2e-6);
  CHECK(quantization_error > 0);
  CHECK(quantization_error < bound);
}

TEST_CASE("cache terminals: float8_e4m3 pages move a decoding step by less than their bound, int8's beside it",
          "[cache][fp8]") {
  // As for int8 above, with float8_e4m3's half step: 2^-4 of a value, or 2^-10 of the group's
  // scale (amax / 448) below its smallest normal, so at most amax · (1/16 + 2^-10 / 448) per
  // group. Its steps are relative where int8's are absolute: coarser for features of one
  // magnitude, finer for the small features of a group with an outlier (every 32nd feature of the
  // values 40 times the others here). (docs/numerics.md quotes the figures this prints.)
  testing::rng r(67);
  const std::size_t hkv = 8, group = 4, dim = 128, len = 2048;
  const float scale = 1 / std::sqrt(float(dim));
  const xt::xtensor<float, 4> q = r.tensor<float>({1, hkv * group, 1, dim});
  double q1 = 0;
  for (std::size_t h = 0; h < hkv * group; ++h) {
    double l1 = 0;
    for (std::size_t d = 0; d < dim; ++d) l1 += std::fabs(q(0, h, 0, d));
    q1 = std::max(q1, l1);
  }
  const auto group_amax = [&](const xt::xtensor<float, 3>& x) {
    double worst = 0;
    for (std::size_t h = 0; h < hkv; ++h)
      for (std::size_t t = 0; t < len; ++t)
        for (std::size_t g = 0; g < dim; g += 32) {
          double amax = 0;
          for (std::size_t d = g; d < g + 32; ++d) amax = std::max(amax, double(std::fabs(x(h, t, d))));
          worst = std::max(worst, amax);
        }
    return worst;
  };
  for (const bool outlier : {false, true}) {
    xt::xtensor<float, 3> k = r.tensor<float>({hkv, len, dim}), v = r.tensor<float>({hkv, len, dim});
    if (outlier)
      for (std::size_t h = 0; h < hkv; ++h)
        for (std::size_t t = 0; t < len; ++t)
          for (std::size_t d = 0; d < dim; d += 32) v(h, t, d) *= 40;
    kv_cache<float8_e4m3> c8({.kv_heads = hkv, .head_dim = dim, .page_size = 16, .max_tokens = len});
    kv_cache<std::int8_t> ci({.kv_heads = hkv, .head_dim = dim, .page_size = 16, .max_tokens = len});
    kv_cache<float> c32({.kv_heads = hkv, .head_dim = dim, .page_size = 16, .max_tokens = len});
    const auto s8 = c8.add_sequence(), si = ci.add_sequence(), s32 = c32.add_sequence();
    c8.append(s8, k, v);
    ci.append(si, k, v);
    c32.append(s32, k, v);
    const auto e8 = softmax(ref(q) * trans(c8.keys({s8})) * scale) * c8.values({s8});
    const auto ei = softmax(ref(q) * trans(ci.keys({si})) * scale) * ci.values({si});
    const auto e32 = softmax(ref(q) * trans(c32.keys({s32})) * scale) * c32.values({s32});
    const xt::xtensor<float, 4> o8 = eval(e8), oi = eval(ei), o32 = eval(e32);
    const double kernel_error = max_abs_diff(o8, reference(e8).output), fp8_error = max_abs_diff(o8, o32),
                 int8_error = max_abs_diff(oi, o32);
    const auto small_features_error = [&](const xt::xtensor<float, 4>& o) {  // beside the outliers
      double worst = 0;
      for (std::size_t h = 0; h < hkv * group; ++h)
        for (std::size_t d = 0; d < dim; ++d)
          if (d % 32 != 0) worst = std::max(worst, double(std::fabs(o(0, h, 0, d) - o32(0, h, 0, d))));
      return worst;
    };
    const double fp8_small = small_features_error(o8), int8_small = small_features_error(oi);
    const double half_step = 1.0 / 16 + 0x1p-10 / 448;
    const double delta = scale * q1 * group_amax(k) * half_step, vmax = xt::amax(xt::abs(v))();
    const double bound = group_amax(v) * half_step + std::expm1(2 * delta) * vmax;
    INFO((outlier ? "an outlier per group" : "U(-1, 1)")
         << ", (1, 32 heads, 8 kv heads, 2048 keys, 128): float8_e4m3 kernel error " << kernel_error
         << ", quantization error " << fp8_error << " (int8 " << int8_error << "), bound " << bound
         << "; features beside the outliers " << fp8_small << " (int8 " << int8_small << ")");
    CHECK(kernel_error < 2e-6 * vmax);
    CHECK(fp8_error > 0);
    CHECK(fp8_error < bound);
    if (outlier)
      CHECK(fp8_small < int8_small);
    else
      CHECK(fp8_error > int8_error);
  }
}

TEST_CASE("cache terminals: float8_e4m3 pages prefill a grouped batch as the reference on their stored values",
          "[cache][fp8]") {
  testing::rng r(47);
  kv_cache<float8_e4m3, float8_e4m3> cache({.kv_heads = 2, .head_dim = 64, .page_size = 16, .max_tokens = 1024});
  const auto a = cache.add_sequence(), b = cache.add_sequence();
  append_random(cache, a, 300, r);
  append_random(cache, b, 100, r);
  const auto batch = std::vector<sequence_id>{a, b};
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 8, 70, 64});  // 4 query heads per key head
  const auto e =
      softmax(mask(ref(q) * trans(cache.keys(batch)) * 0.125f, causal(align::bottom_right))) * cache.values(batch);
  const xt::xtensor<float, 4> out = eval(e);
  CHECK(max_abs_diff(out, reference(e).output) < tolerance_for<float>());
  // the same as float tensors of the stored values
  const auto lens = lengths_of(cache, batch);
  const auto kp = padded<float>(cache, batch, true), vp = padded<float>(cache, batch, false);
  const auto dense = softmax(mask(mask(ref(q) * trans(ref(kp)) * 0.125f, causal_offsets(offsets(lens, 70))),
                                  lengths(lens, masked_rows::zero))) *
                     ref(vp);
  CHECK(max_abs_diff(out, eval(dense)) < tolerance_for<float>());
  CHECK_THAT(
      explain(e).text,
      Catch::Contains("K float8_e4m3 (scale per 32) (2,2,300,64) in pages of 16 tokens, sequences of (300,100)"));
}
