// kv_cache storage: rows read back as written (converted, or quantized as llama.cpp's q8_0),
// pages shared by forks and copied on write, released to the pool, and every failed call leaving
// the cache as it was.
#include "support/float8_reference.hpp"
#include "support/q4_reference.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>
#include <xattn/cache.hpp>
#include <xattn/xattn.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>

using namespace xattn;

namespace {

/// Everything a caller can observe of a sequence.
template <class C>
auto snapshot(const C& c, sequence_id s) {
  return std::make_tuple(c.length(s), c.pages(s), xt::xtensor<float, 3>(c.stored_keys(s)),
                         xt::xtensor<float, 3>(c.stored_values(s)));
}

template <class T>
xt::xtensor<float, 3> rounded(const xt::xtensor<float, 3>& x) {
  xt::xtensor<float, 3> r = x;
  for (auto& v : r) v = float(T(v));
  return r;
}

/// q8_0 as llama.cpp's quantize_row_q8_0_ref writes it: d = amax / 127, q = roundf(x * (1 / d)).
xt::xtensor<float, 3> q8_0(const xt::xtensor<float, 3>& x) {
  xt::xtensor<float, 3> r = x;
  const std::size_t dim = x.shape()[2];
  for (std::size_t h = 0; h < x.shape()[0]; ++h)
    for (std::size_t t = 0; t < x.shape()[1]; ++t)
      for (std::size_t lo = 0; lo < dim; lo += 32) {
        const std::size_t hi = std::min(dim, lo + 32);
        float amax = 0;
        for (std::size_t d = lo; d < hi; ++d) amax = std::max(amax, std::fabs(x(h, t, d)));
        const float s = amax / 127.0f, id = s != 0 ? 1.0f / s : 0.0f;
        for (std::size_t d = lo; d < hi; ++d) r(h, t, d) = std::roundf(x(h, t, d) * id) * s;
      }
  return r;
}

/// Same shape and values (outside Catch's decomposition, which would compare element-wise).
bool same(const xt::xtensor<float, 3>& a, const xt::xtensor<float, 3>& b) { return a == b; }

xt::xtensor<float, 3> tokens(const xt::xtensor<float, 3>& x, std::size_t lo, std::size_t hi) {
  return xt::view(x, xt::all(), xt::range(std::ptrdiff_t(lo), std::ptrdiff_t(hi)), xt::all());
}

}  // namespace

TEMPLATE_TEST_CASE("kv_cache: rows appended in pieces read back as one sequence", "[cache]", float, bfloat16, float16,
                   std::int8_t, float8_e4m3, q4) {
  testing::rng r(5);
  const std::size_t heads = 3, dim = 40;  // 40: a full and a partial quantization group
  kv_cache<TestType, float> c({.kv_heads = heads, .head_dim = dim, .page_size = 4, .max_tokens = 64});
  const auto a = c.add_sequence(), b = c.add_sequence();
  const xt::xtensor<float, 3> k = r.tensor<float>({heads, 11, dim}, -3, 3), v = r.tensor<float>({heads, 11, dim});
  std::size_t at = 0;
  for (const std::size_t n : {1, 3, 0, 5, 2}) {  // across page boundaries, an empty append too
    const xt::xtensor<float, 3> kp = tokens(k, at, at + n), vp = tokens(v, at, at + n);
    c.append(a, kp, vp);
    c.append(b, kp, vp);  // interleaved: the two sequences' pages alternate in the pool
    at += n;
  }
  REQUIRE(c.length(a) == 11);
  CHECK(c.pages(a).size() == 3);
  const xt::xtensor<float, 3> want = [&] {
    if constexpr (std::is_same_v<TestType, std::int8_t>)
      return q8_0(k);
    else if constexpr (std::is_same_v<TestType, float8_e4m3>)
      return testing::e4m3_rows(k);
    else if constexpr (std::is_same_v<TestType, q4>)
      return testing::q4_0_rows(k);
    else
      return rounded<TestType>(k);
  }();
  CHECK(same(c.stored_keys(a), want));
  CHECK(same(c.stored_keys(b), want));
  CHECK(same(c.stored_values(a), v));
  if constexpr (std::is_same_v<TestType, std::int8_t>) {
    // the quantization error is at most half a step, max|x| / 254 per group of 32
    const auto got = c.stored_keys(a);
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t t = 0; t < 11; ++t)
        for (std::size_t d = 0; d < dim; ++d) {
          float amax = 0;
          for (std::size_t e = d / 32 * 32; e < std::min(dim, d / 32 * 32 + 32); ++e)
            amax = std::max(amax, std::fabs(k(h, t, e)));
          CHECK(std::fabs(got(h, t, d) - k(h, t, d)) <= amax / 254 * (1 + 1e-6f));
        }
  }
}

TEST_CASE("kv_cache: int8 pages hold llama.cpp's q8_0 codes and one scale per 32 features") {
  kv_cache<std::int8_t> c({.kv_heads = 1, .head_dim = 33, .page_size = 2, .max_tokens = 8});
  xt::xtensor<float, 3> k = xt::zeros<float>({1, 1, 33});
  k(0, 0, 0) = 2.54f, k(0, 0, 1) = -1.27f, k(0, 0, 2) = 0.005f, k(0, 0, 32) = -0.5f;  // last group: one feature
  const auto a = c.add_sequence();
  c.append(a, k, k);
  for (const auto p : {c.key_page(c.pages(a)[0], 0), c.value_page(c.pages(a)[0], 0)}) {
    CHECK(p.scale(0, 0) == 2.54f / 127.0f);
    CHECK(p.code(0, 0) == 127);
    CHECK(p.code(0, 1) == -64);  // -63.5 rounds away from zero, as roundf
    CHECK(p.code(0, 2) == 0);
    CHECK(p.scale(0, 1) == 0.5f / 127.0f);
    CHECK(p.code(0, 32) == -127);
  }
  // values row after row; keys interleaved by pairs of features, each group's scales together
  const auto keys = c.key_page(c.pages(a)[0], 0), values = c.value_page(c.pages(a)[0], 0);
  CHECK(values.rows[1] == -64);
  CHECK(values.rows[32] == -127);
  CHECK(values.scales[1] == 0.5f / 127.0f);
  CHECK(keys.rows[1] == -64);
  CHECK(keys.rows[2 * 2 * 16] == -127);    // pair 16 of row 0, page_size 2: 16 pairs of 2 rows before it
  CHECK(keys.scales[2] == 0.5f / 127.0f);  // group 1 of row 0, after group 0 of both rows
  // rows of 3 x 5 bytes: the scales still start aligned, and every token reads back
  testing::rng r(9);
  kv_cache<std::int8_t> odd({.kv_heads = 2, .head_dim = 5, .page_size = 3, .max_tokens = 12});
  const xt::xtensor<float, 3> x = r.tensor<float>({2, 7, 5});
  const auto b = odd.add_sequence();
  odd.append(b, x, x);
  CHECK(reinterpret_cast<std::uintptr_t>(odd.key_page(odd.pages(b)[1], 1).scales) % alignof(float) == 0);
  CHECK(same(odd.stored_keys(b), q8_0(x)));
  CHECK(same(odd.stored_values(b), q8_0(x)));
}

TEST_CASE("kv_cache: a fork shares full pages and copies the partial one on its first append") {
  testing::rng r(6);
  kv_cache<float> c({.kv_heads = 2, .head_dim = 8, .page_size = 4, .max_tokens = 40});
  const auto a = c.add_sequence();
  const xt::xtensor<float, 3> prompt = r.tensor<float>({2, 6, 8});
  c.append(a, prompt, prompt);
  const std::size_t free0 = c.free_pages();
  const auto f = c.fork(a);
  CHECK(c.free_pages() == free0);  // nothing copied yet
  CHECK(c.pages(f) == c.pages(a));
  CHECK(c.length(f) == 6);
  const xt::xtensor<float, 3> x = r.tensor<float>({2, 1, 8}), y = r.tensor<float>({2, 1, 8});
  c.append(f, x, x);
  CHECK(c.free_pages() == free0 - 1);     // the partial page, copied
  CHECK(c.pages(f)[0] == c.pages(a)[0]);  // the full page, still shared
  CHECK(c.pages(f)[1] != c.pages(a)[1]);
  c.append(a, y, y);  // a's partial page is its own again: written in place
  CHECK(c.free_pages() == free0 - 1);
  CHECK(same(tokens(c.stored_keys(a), 0, 6), prompt));
  CHECK(same(tokens(c.stored_keys(a), 6, 7), y));
  CHECK(same(tokens(c.stored_keys(f), 0, 6), prompt));
  CHECK(same(tokens(c.stored_keys(f), 6, 7), x));
  // releasing a returns only its own partial page: the first stays with f
  c.release(a);
  CHECK(c.free_pages() == free0);
  CHECK(same(c.stored_keys(f), xt::concatenate(xt::xtuple(prompt, x), 1)));
  CHECK_THROWS_WITH(c.length(a), Catch::Contains("kv_cache.length: sequence 0") && Catch::Contains("released"));
  const auto n = c.add_sequence();  // reuses a's slot, not a's id
  CHECK(n.slot == a.slot);
  CHECK_THROWS_AS(c.append(a, x, x), std::invalid_argument);
  CHECK(c.length(n) == 0);
  c.release(f);
  CHECK(c.free_pages() == c.max_pages());
}

TEMPLATE_TEST_CASE("kv_cache: truncate drops the newest tokens; a fork keeps them, and appends after it copy on write",
                   "[cache]", float, bfloat16, std::int8_t, q4) {
  testing::rng r(8);
  const kv_cache_options o{.kv_heads = 2, .head_dim = 32, .page_size = 4, .max_tokens = 40};
  kv_cache<TestType> c(o);
  const auto a = c.add_sequence();
  const xt::xtensor<float, 3> k = r.tensor<float>({2, 11, 32}), v = r.tensor<float>({2, 11, 32});
  c.append(a, k, v);  // 3 pages, the last holding 3 tokens
  const auto f = c.fork(a);
  const auto whole = snapshot(c, f);
  const std::size_t free0 = c.free_pages();
  c.truncate(a, 6);  // keeps 2 pages; the third is still f's
  CHECK(c.length(a) == 6);
  CHECK(c.pages(a).size() == 2);
  CHECK(c.free_pages() == free0);
  CHECK(same(c.stored_keys(a), tokens(std::get<2>(whole), 0, 6)));
  CHECK(same(c.stored_values(a), tokens(std::get<3>(whole), 0, 6)));
  // the accepted draft: 3 new tokens into a's partial page, which f shares: copied, then a new page
  const xt::xtensor<float, 3> y = r.tensor<float>({2, 3, 32}), w = r.tensor<float>({2, 3, 32});
  c.append(a, y, w);
  CHECK(c.free_pages() == free0 - 2);
  CHECK(c.pages(a)[0] == c.pages(f)[0]);
  CHECK(c.pages(a)[1] != c.pages(f)[1]);
  CHECK(snapshot(c, f) == whole);
  // bit for bit what a cache holds that never saw the rejected tokens
  kv_cache<TestType> direct(o);
  const auto d = direct.add_sequence();
  direct.append(d, xt::xtensor<float, 3>(tokens(k, 0, 6)), xt::xtensor<float, 3>(tokens(v, 0, 6)));
  direct.append(d, y, w);
  CHECK(same(c.stored_keys(a), direct.stored_keys(d)));
  CHECK(same(c.stored_values(a), direct.stored_values(d)));
  // a length beyond the sequence's is named and changes nothing
  const auto before = snapshot(c, a);
  const std::size_t free1 = c.free_pages();
  CHECK_THROWS_AS(c.truncate(a, 10), std::invalid_argument);
  CHECK_THROWS_WITH(c.truncate(a, 10), "xattn: kv_cache.truncate: length 10 is beyond the sequence's 9 tokens");
  CHECK(snapshot(c, a) == before);
  CHECK(c.free_pages() == free1);
  c.truncate(a, 9);  // its own length: nothing changes
  CHECK(snapshot(c, a) == before);
  // pages no fork holds go back to the pool
  c.truncate(a, 1);
  CHECK(c.free_pages() == free1 + 2);
  CHECK(same(c.stored_keys(a), tokens(std::get<2>(whole), 0, 1)));
  c.truncate(a, 0);
  CHECK(c.pages(a).empty());
  c.release(f);
  CHECK(c.free_pages() == c.max_pages());
  c.append(a, y, w);  // an emptied sequence is an empty sequence
  CHECK(same(c.stored_keys(a), tokens(direct.stored_keys(d), 6, 9)));
  CHECK_THROWS_WITH(c.truncate(f, 0), Catch::Contains("kv_cache.truncate: sequence") && Catch::Contains("released"));
}

TEMPLATE_TEST_CASE("kv_cache: keep compacts a sequence to the given positions; forks keep theirs", "[cache]", float,
                   bfloat16, std::int8_t, q4) {
  testing::rng r(9);
  const kv_cache_options o{.kv_heads = 2, .head_dim = 40, .page_size = 4, .max_tokens = 64};  // 40: a partial group
  kv_cache<TestType> c(o);
  const auto a = c.add_sequence();
  const xt::xtensor<float, 3> k = r.tensor<float>({2, 13, 40}), v = r.tensor<float>({2, 13, 40});
  c.append(a, k, v);  // 4 pages, the last holding 1 token
  const auto f = c.fork(a);
  const auto whole = snapshot(c, f);
  const std::size_t free0 = c.free_pages();
  // StreamingLLM's two sink tokens, one heavy hitter, and a window of the newest
  const std::vector<std::size_t> kept{0, 1, 5, 10, 11, 12};
  const auto rows_of = [&](const xt::xtensor<float, 3>& x) {
    xt::xtensor<float, 3> y = xt::xtensor<float, 3>::from_shape({2, kept.size(), 40});
    for (std::size_t h = 0; h < 2; ++h)
      for (std::size_t i = 0; i < kept.size(); ++i)
        for (std::size_t d = 0; d < 40; ++d) y(h, i, d) = x(h, kept[i], d);
    return y;
  };
  c.keep(a, kept);
  CHECK(c.length(a) == 6);
  CHECK(c.pages(a).size() == 2);
  CHECK(c.free_pages() == free0 - 2);  // both kept pages were shared with f and written: copied
  CHECK(snapshot(c, f) == whole);
  CHECK(same(c.stored_keys(a), rows_of(std::get<2>(whole))));
  CHECK(same(c.stored_values(a), rows_of(std::get<3>(whole))));
  // attention over the kept tokens is bit for bit a cache's built from them (rows move as stored)
  kv_cache<TestType> direct(o);
  const auto d = direct.add_sequence();
  direct.append(d, rows_of(k), rows_of(v));
  const xt::xtensor<float, 3> y = r.tensor<float>({2, 3, 40}), w = r.tensor<float>({2, 3, 40});
  c.append(a, y, w);
  direct.append(d, y, w);
  CHECK(same(c.stored_keys(a), direct.stored_keys(d)));
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 4, 2, 40});
  const auto attend = [&](const kv_cache<TestType>& cache, sequence_id s) {
    return xt::xtensor<float, 4>(
        eval(softmax(mask(ref(q) * trans(cache.keys({s})), causal(align::bottom_right))) * cache.values({s})));
  };
  const bool same_output = attend(c, a) == attend(direct, d);
  CHECK(same_output);
  // keeping every token changes nothing; a sequence no fork shares is compacted in place
  const auto before = snapshot(c, a);
  c.keep(a, {0, 1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(snapshot(c, a) == before);
  const std::size_t free1 = c.free_pages();
  c.keep(a, {3, 8});
  CHECK(c.free_pages() == free1 + 2);
  CHECK(same(c.stored_keys(a),
             xt::xtensor<float, 3>(xt::view(direct.stored_keys(d), xt::all(), xt::keep(3, 8), xt::all()))));
  c.keep(a, {});
  CHECK(c.pages(a).empty());
  CHECK(c.length(a) == 0);
}

TEST_CASE("kv_cache: keep refuses bad positions, a full pool and rotated keys, and changes nothing") {
  testing::rng r(10);
  kv_cache<std::int8_t, bfloat16> c({.kv_heads = 2, .head_dim = 32, .page_size = 4, .max_tokens = 16});
  const auto a = c.add_sequence();
  c.append(a, r.tensor<float>({2, 10, 32}), r.tensor<float>({2, 10, 32}));  // 3 of the pool's 4 pages
  const auto f = c.fork(a);
  const auto before = snapshot(c, a);
  const std::size_t free0 = c.free_pages();
  const auto unchanged = [&] {
    CHECK(snapshot(c, a) == before);
    CHECK(snapshot(c, f) == before);
    CHECK(c.free_pages() == free0);
  };
  CHECK_THROWS_WITH(c.keep(a, {0, 10}),
                    "xattn: kv_cache.keep: positions[1] = 10 is not below the sequence's 10 tokens");
  unchanged();
  CHECK_THROWS_WITH(c.keep(a, {0, 4, 4}),
                    "xattn: kv_cache.keep: positions must increase: positions[1] = 4, positions[2] = 4");
  unchanged();
  CHECK_THROWS_AS(c.keep(a, {2, 1}), std::invalid_argument);
  unchanged();
  // moving rows into both kept pages, which f shares, needs 2 pages; 1 is free
  CHECK_THROWS_WITH(c.keep(a, {0, 5, 6, 7, 9}), Catch::Contains("kv_cache.keep: needs 2 pages but 1 of the pool's 4"));
  CHECK_THROWS_AS(c.keep(a, {0, 5, 6, 7, 9}), std::length_error);
  unchanged();
  c.release(f);
  CHECK_THROWS_WITH(c.keep(f, {}), Catch::Contains("kv_cache.keep: sequence") && Catch::Contains("released"));
  kv_cache<float> rotated({.kv_heads = 1, .head_dim = 8, .page_size = 4, .max_tokens = 16, .rope = rope_options{}});
  const auto s = rotated.add_sequence();
  rotated.append(s, r.tensor<float>({1, 5, 8}), r.tensor<float>({1, 5, 8}));
  CHECK_THROWS_WITH(rotated.keep(s, {0, 4}), Catch::Contains("kv_cache.keep: the cache stores its keys rotated"));
  CHECK(rotated.length(s) == 5);
}

TEST_CASE("kv_cache: bad input is named and leaves the cache as it was") {
  testing::rng r(7);
  kv_cache<std::int8_t, bfloat16> c({.kv_heads = 2, .head_dim = 8, .page_size = 4, .max_tokens = 12});
  const auto a = c.add_sequence(), b = c.fork(a);
  const xt::xtensor<float, 3> k = r.tensor<float>({2, 5, 8});
  c.append(a, k, k);
  const auto before = snapshot(c, a);
  const std::size_t free0 = c.free_pages();
  const auto unchanged = [&] {
    const bool intact = snapshot(c, a) == before;
    CHECK(intact);
    CHECK(c.free_pages() == free0);
    CHECK(c.length(b) == 0);
  };
  CHECK_THROWS_WITH(
      c.append(a, xt::xtensor<float, 3>(r.tensor<float>({3, 1, 8})), k),
      "xattn: kv_cache.append: k_rows has shape (3,1,8) but the cache holds (kv_heads, n, head_dim) = (2, n, 8)");
  unchanged();
  CHECK_THROWS_WITH(c.append(a, k, xt::xtensor<float, 3>(r.tensor<float>({2, 5, 7}))),
                    Catch::Contains("v_rows has shape (2,5,7)"));
  unchanged();
  CHECK_THROWS_WITH(c.append(a, k, xt::xtensor<float, 3>(r.tensor<float>({2, 4, 8}))),
                    Catch::Contains("k_rows (2,5,8) and v_rows (2,4,8) hold different numbers of tokens"));
  unchanged();
  xt::xtensor<float, 3> inf = k;
  inf(1, 2, 3) = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH(c.append(a, inf, k), Catch::Contains("k_rows(1, 2, 3) = inf cannot be quantized to int8"));
  unchanged();
  // 5 tokens hold 2 of the 3 pages; 8 more need 2 (3 + 8 = 11 > 8 tokens of room): the pool has 1
  const xt::xtensor<float, 3> many = r.tensor<float>({2, 8, 8});
  CHECK_THROWS_AS(c.append(a, many, many), std::length_error);
  CHECK_THROWS_WITH(c.append(a, many, many), "xattn: kv_cache.append: needs 2 pages but 1 of the pool's 3 are free");
  unchanged();
  // the fork shares no page (it forked before any append): its first append takes the free page
  CHECK_THROWS_WITH(c.append(b, many, many), Catch::Contains("needs 2 pages but 1"));
  unchanged();
  CHECK_THROWS_WITH(c.reserve(13),
                    "xattn: kv_cache.reserve: 13 tokens need 4 pages but the pool holds 3 "
                    "(max_tokens 12, page_size 4)");
  unchanged();
  c.reserve(12);  // memory only: no page is taken, nothing stored moves
  unchanged();
  kv_cache<float> fresh({.kv_heads = 2, .head_dim = 8, .page_size = 4, .max_tokens = 12});
  fresh.reserve(12);
  CHECK(fresh.free_pages() == 3);
  const auto s = fresh.add_sequence();
  fresh.append(s, k, k);
  const bool same = fresh.stored_keys(s) == k;
  CHECK(same);
  CHECK_THROWS_WITH(kv_cache<float>({.kv_heads = 0, .head_dim = 8}), "xattn: kv_cache: kv_heads must be > 0");
  CHECK_THROWS_WITH(kv_cache<float>({.kv_heads = 1, .head_dim = 8, .page_size = 0}),
                    "xattn: kv_cache: page_size must be > 0");
}

TEST_CASE("kv_cache: rows from ref(ptr, shape, strides), strided views and bfloat16 tensors") {
  testing::rng r(8);
  kv_cache<float> c({.kv_heads = 2, .head_dim = 4, .page_size = 3, .max_tokens = 30});
  const xt::xtensor<float, 3> k = r.tensor<float>({2, 5, 4});
  const xt::xtensor<float, 3> kt = xt::transpose(k, {1, 0, 2});  // (5, 2, 4) in memory
  const auto a = c.add_sequence();
  // the (2, 5, 4) rows of kt's memory, by strides
  c.append(a, ref(kt.data(), {1, 2, 5, 4}, {40, 4, 8, 1}), xt::transpose(kt, {1, 0, 2}));
  CHECK(same(c.stored_keys(a), k));
  CHECK(same(c.stored_values(a), k));
  const xt::xtensor<bfloat16, 3> kb = xt::cast<bfloat16>(k);
  c.append(a, kb, kb);
  CHECK(same(tokens(c.stored_keys(a), 5, 10), rounded<bfloat16>(k)));
  CHECK_THROWS_WITH(c.append(a, ref(k.data(), {2, 2, 5, 4}, {40, 20, 4, 1}), k),
                    Catch::Contains("a ref() of 2 batches"));
}

TEMPLATE_TEST_CASE("kv_cache: a head's rows stepped through a page are the rows looked up one by one", "[cache]", float,
                   std::int8_t, float8_e4m3, q4) {
  testing::rng r(41);
  const std::size_t ps = GENERATE(4, 6, 16), dim = 64, len = 53;
  kv_cache<TestType> cache({.kv_heads = 2, .head_dim = dim, .page_size = ps, .max_tokens = 256});
  const auto a = cache.add_sequence(), b = cache.add_sequence();
  cache.append(a, r.tensor<float>({2, 7, dim}), r.tensor<float>({2, 7, dim}));
  cache.append(b, r.tensor<float>({2, len, dim}), r.tensor<float>({2, len, dim}));  // pages after a's
  const auto V = cache.values({a, b});
  for (const std::size_t j0 : {std::size_t(0), std::size_t(5), ps}) {
    INFO("page size " << ps << ", rows from key " << j0);
    const auto rows = V.view.rows(1, 1).at(j0, 32);
    for (std::size_t j = 0; j + j0 < len; ++j) {
      const std::size_t left = rows.same_page(j);
      REQUIRE(left == ps - (j0 + j) % ps);
      if (left > 1) {
        const auto next = rows.next(rows(j)), want = rows(j + 1);
        if constexpr (is_quantized_v<TestType>)
          REQUIRE((next.q == want.q && next.scale == want.scale && next.col == want.col));
        else
          REQUIRE(next == want);
      }
    }
  }
}
