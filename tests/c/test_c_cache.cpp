// xattn_kv_cache against the C++ kv_cache it wraps: the same rows appended to a C cache and to a
// kv_cache<K, V> of the same formats (pairs of float, bfloat16, float16 and q8_0) store the same
// pages, so xattn_cache_attention over a ragged batch with forks gives what the C++ expression
// over the cache's terminals gives (to float rounding: its masks and terms are composed at run
// time), and agrees with the double reference of the stored rows; bad input returns a status and
// a message naming the argument, and leaves the cache, out and lse as they were.
#include <xattn.h>
#include <xattn/cache.hpp>
#include <xattn/xattn.hpp>

#include "support/bitwise.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>
#include <xtensor/xadapt.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using namespace xattn;
using xattn::testing::max_abs_diff;
using xattn::testing::rng;

namespace {

xattn_tensor c_of(float* p, std::vector<std::int64_t> shape) {
  xattn_tensor t{p, XATTN_F32, int(shape.size()), {}, {}};
  std::int64_t s = 1;
  for (std::size_t a = shape.size(); a-- > 0;) t.shape[a] = shape[a], t.strides[a] = s, s *= shape[a];
  return t;
}

template <class T>
constexpr xattn_dtype format_of() {
  if constexpr (std::is_same_v<T, float>) return XATTN_F32;
  if constexpr (std::is_same_v<T, bfloat16>) return XATTN_BF16;
  if constexpr (std::is_same_v<T, float16>) return XATTN_F16;
  if constexpr (std::is_same_v<T, std::int8_t>) return XATTN_Q8_0;
  if constexpr (std::is_same_v<T, float8_e4m3>) return XATTN_FP8_E4M3;
  if constexpr (std::is_same_v<T, q4>) return XATTN_Q4_0;
  if constexpr (std::is_same_v<T, q4c>) return XATTN_Q4C;
}

struct cache_deleter {
  void operator()(xattn_kv_cache* c) const { xattn_cache_destroy(c); }
};
using cache_ptr = std::unique_ptr<xattn_kv_cache, cache_deleter>;

/// Three sequences of different lengths, one a fork of another with tokens of its own, in a C
/// cache and a C++ one of formats K, V; then one attention per option set, compared.
template <class K, class V>
void same_as_cpp(std::uint64_t seed) {
  rng g(seed);
  const std::size_t H = 2, Hq = 4, D = 32, page = 16;
  xattn_cache_options o = xattn_cache_defaults();
  o.kv_heads = std::int64_t(H), o.head_dim = std::int64_t(D), o.page_size = std::int64_t(page), o.max_tokens = 4096;
  o.key_dtype = format_of<K>(), o.value_dtype = format_of<V>();
  cache_ptr c(xattn_cache_create(&o));
  INFO(xattn_last_error());
  REQUIRE(c);
  kv_cache<K, V> cpp({H, D, page, 4096, {}});

  std::vector<xattn_sequence> ids;
  std::vector<sequence_id> cpp_ids;
  const auto append = [&](std::size_t which, std::size_t n) {
    xt::xtensor<float, 3> k = g.tensor<float>({H, n, D}), v = g.tensor<float>({H, n, D});
    xattn_tensor kc = c_of(k.data(), {std::int64_t(H), std::int64_t(n), std::int64_t(D)});
    xattn_tensor vc = c_of(v.data(), {std::int64_t(H), std::int64_t(n), std::int64_t(D)});
    REQUIRE(xattn_cache_append(c.get(), ids[which], &kc, &vc) == XATTN_OK);
    cpp.append(cpp_ids[which], k, v);
  };
  for (int s = 0; s < 2; ++s) {
    ids.emplace_back();
    REQUIRE(xattn_cache_add_sequence(c.get(), &ids.back()) == XATTN_OK);
    cpp_ids.push_back(cpp.add_sequence());
  }
  append(0, g.size(20, 60));
  append(1, g.size(1, 40));
  ids.emplace_back();
  REQUIRE(xattn_cache_fork(c.get(), ids[0], &ids.back()) == XATTN_OK);
  cpp_ids.push_back(cpp.fork(cpp_ids[0]));
  append(2, g.size(1, 20));  // the fork's own tokens: its partial page copied
  append(0, 3);
  for (std::size_t b = 0; b < 3; ++b) {
    std::int64_t len = -1;
    REQUIRE(xattn_cache_length(c.get(), ids[b], &len) == XATTN_OK);
    CHECK(std::size_t(len) == cpp.length(cpp_ids[b]));
  }

  const std::size_t Sq = 3;
  xt::xtensor<float, 4> q = g.tensor<float>({3, Hq, Sq, D});
  xattn_tensor qc = c_of(q.data(), {3, std::int64_t(Hq), std::int64_t(Sq), std::int64_t(D)});
  xt::xtensor<double, 1> sink_values = g.vector<double>(Hq, -1, 1);
  xattn_tensor sinks_c{sink_values.data(), XATTN_F64, 1, {std::int64_t(Hq)}, {1}};
  for (int option = 0; option < 4; ++option) {
    xattn_attention_desc d = xattn_attention_defaults();
    d.threads = 2;
    if (option == 1) d.causal = XATTN_CAUSAL_BOTTOM_RIGHT;
    if (option == 2) d.window_left = 7, d.window_right = 0, d.causal = XATTN_CAUSAL_BOTTOM_RIGHT;
    if (option == 3) d.softcap = 2.0, d.sinks = &sinks_c, d.window_left = 10;
    std::vector<float> out(3 * Hq * Sq * D, -7.0f), lse(3 * Hq * Sq);
    xattn_tensor out_c = c_of(out.data(), {3, std::int64_t(Hq), std::int64_t(Sq), std::int64_t(D)});
    xattn_tensor lse_c = c_of(lse.data(), {3, std::int64_t(Hq), std::int64_t(Sq)});
    INFO("option " << option);
    REQUIRE(xattn_cache_attention(c.get(), ids.data(), 3, &qc, &d, &out_c, &lse_c) == XATTN_OK);
    const xt::xtensor<float, 4> got = xt::adapt(out, std::array<std::size_t, 4>{3, Hq, Sq, D});

    // the C++ expression a user writes over the cache's terminals
    const auto Kt = cpp.keys(cpp_ids), Vt = cpp.values(cpp_ids);
    const double scale = 1 / std::sqrt(double(D));
    schedule sch;
    sch.threads = 2;
    const auto s = ref(q) * trans(Kt) * scale;
    xt::xtensor<double, 1> no_sinks = xt::xtensor<double, 1>::from_shape({Hq});
    no_sinks.fill(-std::numeric_limits<double>::infinity());
    const auto band = option == 0   ? window(unbounded, unbounded, align::bottom_right)
                      : option == 1 ? window(unbounded, 0, align::bottom_right)
                      : option == 2 ? window(7, 0, align::bottom_right)
                                    : window(10, unbounded, align::bottom_right);
    const xt::xtensor<float, 4> want =
        option == 3 ? eval(softmax(mask(modify(s, softcap_op{2.0}), band), sinks(sink_values)) * Vt, sch)
                    : eval(softmax(mask(s, band), sinks(no_sinks)) * Vt, sch);
    CHECK(max_abs_diff(got, want) < 1e-6);

    // and the double reference of the rows as stored, per sequence
    for (std::size_t b = 0; b < 3; ++b) {
      const xt::xtensor<double, 4> kd = xt::view(xt::cast<double>(cpp.stored_keys(cpp_ids[b])), xt::newaxis());
      const xt::xtensor<double, 4> vd = xt::view(xt::cast<double>(cpp.stored_values(cpp_ids[b])), xt::newaxis());
      const xt::xtensor<double, 4> qb = xt::view(xt::cast<double>(q), xt::range(b, b + 1));
      const std::int64_t n = std::int64_t(kd.shape()[2]);
      const std::int64_t left = option == 2 ? 7 : option == 3 ? 10 : -1, right = option == 1 || option == 2 ? 0 : -1;
      const double cap = option == 3 ? 2.0 : 0;
      for (std::size_t h = 0; h < Hq; ++h)
        for (std::size_t i = 0; i < Sq; ++i) {
          const std::int64_t pos = std::int64_t(i) + n - std::int64_t(Sq);
          std::vector<double> sc(std::size_t(n), -std::numeric_limits<double>::infinity());
          double top = option == 3 ? sink_values(h) : -std::numeric_limits<double>::infinity();
          for (std::int64_t j = 0; j < n; ++j) {
            if ((left >= 0 && j < pos - left) || (right >= 0 && j > pos + right)) continue;
            double x = 0;
            for (std::size_t f = 0; f < D; ++f) x += qb(0, h, i, f) * kd(0, h / 2, std::size_t(j), f);
            x *= scale;
            if (cap > 0) x = cap * std::tanh(x / cap);
            sc[std::size_t(j)] = x;
            top = std::max(top, x);
          }
          double sum = option == 3 ? std::exp(sink_values(h) - top) : 0;
          for (const double x : sc) sum += std::exp(x - top);
          for (std::size_t f = 0; f < D; ++f) {
            double o_f = 0;
            for (std::int64_t j = 0; j < n; ++j)
              o_f += std::exp(sc[std::size_t(j)] - top) * vd(0, h / 2, std::size_t(j), f);
            const double expected = sum > 0 ? o_f / sum : 0;  // a row that sees no key (a short sequence): 0
            // int8 keys meet int16 codes of the queries (numerics.md); the rest is float rounding
            CHECK(std::abs(got(b, h, i, f) - expected) < (std::is_same_v<K, std::int8_t> ? 5e-3 : 2e-5));
          }
        }
    }
  }
}

}  // namespace

TEST_CASE("xattn_cache_attention: the C++ kv_cache's attention, for pairs of formats", "[c][cache]") {
  same_as_cpp<float, float>(1);
  same_as_cpp<bfloat16, bfloat16>(2);
  same_as_cpp<float16, float16>(3);
  same_as_cpp<std::int8_t, std::int8_t>(4);
  same_as_cpp<std::int8_t, bfloat16>(5);
  same_as_cpp<float, std::int8_t>(6);
  same_as_cpp<bfloat16, float16>(7);
  same_as_cpp<float8_e4m3, float8_e4m3>(8);
  same_as_cpp<q4, q4>(9);
  same_as_cpp<q4c, q4>(10);
}

TEST_CASE("xattn_cache_truncate: a draft's rejected tokens dropped, then the accepted ones appended", "[c][cache]") {
  rng g(31);
  xattn_cache_options o = xattn_cache_defaults();
  o.kv_heads = 2, o.head_dim = 32, o.page_size = 4, o.max_tokens = 64, o.key_dtype = XATTN_Q8_0;
  cache_ptr c(xattn_cache_create(&o)), direct(xattn_cache_create(&o));
  REQUIRE(c);
  REQUIRE(direct);
  xt::xtensor<float, 3> prompt = g.tensor<float>({2, 7, 32}), draft = g.tensor<float>({2, 5, 32}),
                        accepted = g.tensor<float>({2, 2, 32});
  const auto append = [](xattn_kv_cache* to, xattn_sequence s, xt::xtensor<float, 3>& x) {
    xattn_tensor t = c_of(x.data(), {2, std::int64_t(x.shape()[1]), 32});
    REQUIRE(xattn_cache_append(to, s, &t, &t) == XATTN_OK);
  };
  xattn_sequence a = 0, f = 0, d = 0;
  REQUIRE(xattn_cache_add_sequence(c.get(), &a) == XATTN_OK);
  append(c.get(), a, prompt);
  REQUIRE(xattn_cache_fork(c.get(), a, &f) == XATTN_OK);  // another continuation shares the prompt
  append(c.get(), a, draft);
  REQUIRE(xattn_cache_truncate(c.get(), a, 8) == XATTN_OK);  // the draft's first token accepted
  append(c.get(), a, accepted);
  REQUIRE(xattn_cache_add_sequence(direct.get(), &d) == XATTN_OK);
  append(direct.get(), d, prompt);
  xt::xtensor<float, 3> first = xt::view(draft, xt::all(), xt::range(0, 1), xt::all());
  append(direct.get(), d, first);
  append(direct.get(), d, accepted);
  std::int64_t n = 0;
  REQUIRE(xattn_cache_length(c.get(), a, &n) == XATTN_OK);
  CHECK(n == 10);
  REQUIRE(xattn_cache_length(c.get(), f, &n) == XATTN_OK);
  CHECK(n == 7);
  // the same attention, bit for bit, as over a cache that never held the rejected tokens
  xt::xtensor<float, 4> q = g.tensor<float>({1, 4, 3, 32});
  std::vector<float> out_c(4 * 3 * 32, -1.0f), out_d(4 * 3 * 32, -2.0f);
  xattn_tensor qc = c_of(q.data(), {1, 4, 3, 32}), oc = c_of(out_c.data(), {1, 4, 3, 32}),
               od = c_of(out_d.data(), {1, 4, 3, 32});
  xattn_attention_desc desc = xattn_attention_defaults();
  desc.causal = XATTN_CAUSAL_BOTTOM_RIGHT;
  REQUIRE(xattn_cache_attention(c.get(), &a, 1, &qc, &desc, &oc, nullptr) == XATTN_OK);
  REQUIRE(xattn_cache_attention(direct.get(), &d, 1, &qc, &desc, &od, nullptr) == XATTN_OK);
  CHECK(out_c == out_d);
}

TEST_CASE("xattn_cache_keep: a sequence evicted to the given positions, a fork keeping its tokens", "[c][cache]") {
  rng g(32);
  xattn_cache_options o = xattn_cache_defaults();
  o.kv_heads = 2, o.head_dim = 32, o.page_size = 4, o.max_tokens = 64, o.key_dtype = XATTN_Q8_0;
  cache_ptr c(xattn_cache_create(&o)), direct(xattn_cache_create(&o));
  REQUIRE(c);
  REQUIRE(direct);
  xt::xtensor<float, 3> k = g.tensor<float>({2, 13, 32}), v = g.tensor<float>({2, 13, 32});
  const std::vector<std::int64_t> kept{0, 1, 5, 10, 11, 12};  // sinks, a heavy hitter, a window
  xt::xtensor<float, 3> kk = xt::xtensor<float, 3>::from_shape({2, kept.size(), 32}), vk = kk;
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t i = 0; i < kept.size(); ++i)
      for (std::size_t d = 0; d < 32; ++d)
        kk(h, i, d) = k(h, std::size_t(kept[i]), d), vk(h, i, d) = v(h, std::size_t(kept[i]), d);
  xattn_tensor kc = c_of(k.data(), {2, 13, 32}), vc = c_of(v.data(), {2, 13, 32});
  xattn_tensor kkc = c_of(kk.data(), {2, 6, 32}), vkc = c_of(vk.data(), {2, 6, 32});
  xattn_sequence a = 0, f = 0, d = 0;
  REQUIRE(xattn_cache_add_sequence(c.get(), &a) == XATTN_OK);
  REQUIRE(xattn_cache_append(c.get(), a, &kc, &vc) == XATTN_OK);
  REQUIRE(xattn_cache_fork(c.get(), a, &f) == XATTN_OK);
  REQUIRE(xattn_cache_keep(c.get(), a, kept.data(), std::int64_t(kept.size())) == XATTN_OK);
  REQUIRE(xattn_cache_add_sequence(direct.get(), &d) == XATTN_OK);
  REQUIRE(xattn_cache_append(direct.get(), d, &kkc, &vkc) == XATTN_OK);
  std::int64_t n = 0;
  REQUIRE(xattn_cache_length(c.get(), a, &n) == XATTN_OK);
  CHECK(n == 6);
  REQUIRE(xattn_cache_length(c.get(), f, &n) == XATTN_OK);
  CHECK(n == 13);
  // the same attention, bit for bit, as over a cache holding only the kept tokens
  xt::xtensor<float, 4> q = g.tensor<float>({1, 4, 2, 32});
  std::vector<float> out_c(4 * 2 * 32, -1.0f), out_d(4 * 2 * 32, -2.0f);
  xattn_tensor qc = c_of(q.data(), {1, 4, 2, 32}), oc = c_of(out_c.data(), {1, 4, 2, 32}),
               od = c_of(out_d.data(), {1, 4, 2, 32});
  xattn_attention_desc desc = xattn_attention_defaults();
  desc.causal = XATTN_CAUSAL_BOTTOM_RIGHT;
  REQUIRE(xattn_cache_attention(c.get(), &a, 1, &qc, &desc, &oc, nullptr) == XATTN_OK);
  REQUIRE(xattn_cache_attention(direct.get(), &d, 1, &qc, &desc, &od, nullptr) == XATTN_OK);
  CHECK(out_c == out_d);
}

TEST_CASE("xattn_cache_options.rotate: the C++ cache's rotated q4 keys, queries turned alike", "[c][cache]") {
  rng g(33);
  const std::size_t H = 2, Hq = 4, D = 64, n = 40;
  xattn_cache_options o = xattn_cache_defaults();
  o.kv_heads = std::int64_t(H), o.head_dim = std::int64_t(D), o.page_size = 16, o.max_tokens = 256;
  o.key_dtype = o.value_dtype = XATTN_Q4_0;
  o.rotate = 1;
  cache_ptr c(xattn_cache_create(&o));
  REQUIRE(c);
  kv_cache<q4> cpp({.kv_heads = H, .head_dim = D, .page_size = 16, .max_tokens = 256, .rotate = true});
  xt::xtensor<float, 3> k = g.tensor<float>({H, n, D}), v = g.tensor<float>({H, n, D});
  for (std::size_t h = 0; h < H; ++h)  // an outlier channel, which the rotation spreads
    for (std::size_t t = 0; t < n; ++t) k(h, t, 5) *= 20;
  xattn_tensor kc = c_of(k.data(), {std::int64_t(H), std::int64_t(n), std::int64_t(D)}),
               vc = c_of(v.data(), {std::int64_t(H), std::int64_t(n), std::int64_t(D)});
  xattn_sequence a = 0;
  REQUIRE(xattn_cache_add_sequence(c.get(), &a) == XATTN_OK);
  REQUIRE(xattn_cache_append(c.get(), a, &kc, &vc) == XATTN_OK);
  const auto s = cpp.add_sequence();
  cpp.append(s, k, v);
  xt::xtensor<float, 4> q = g.tensor<float>({1, Hq, 1, D});
  std::vector<float> out(Hq * D, -1.0f);
  xattn_tensor qc = c_of(q.data(), {1, std::int64_t(Hq), 1, std::int64_t(D)}),
               oc = c_of(out.data(), {1, std::int64_t(Hq), 1, std::int64_t(D)});
  xattn_attention_desc desc = xattn_attention_defaults();
  REQUIRE(xattn_cache_attention(c.get(), &a, 1, &qc, &desc, &oc, nullptr) == XATTN_OK);
  const xt::xtensor<float, 4> want =
      eval(softmax(ref(q) * trans(cpp.keys({s})) * (1 / std::sqrt(float(D)))) * cpp.values({s}));
  CHECK(max_abs_diff(xt::xtensor<float, 4>(xt::adapt(out, std::array<std::size_t, 4>{1, Hq, 1, D})), want) < 1e-6);
  o.head_dim = 33;  // odd: no block of a power of two to turn
  CHECK(xattn_cache_create(&o) == nullptr);
  CHECK_THAT(std::string(xattn_last_error()), Catch::Contains("rotate turns blocks of a power of two features"));
}

TEST_CASE("xattn_kv_cache: bad input returns a status and a message, and changes nothing", "[c][cache]") {
  xattn_cache_options o = xattn_cache_defaults();
  CHECK(xattn_cache_create(&o) == nullptr);  // kv_heads 0
  CHECK_THAT(std::string(xattn_last_error()), Catch::Contains("xattn_cache_create: options.kv_heads is 0"));
  o.kv_heads = 2, o.head_dim = 8, o.page_size = 4, o.max_tokens = 16, o.key_dtype = XATTN_F64;
  CHECK(xattn_cache_create(&o) == nullptr);
  CHECK_THAT(std::string(xattn_last_error()), Catch::Contains("options.key_dtype is XATTN_F64"));
  o.key_dtype = XATTN_Q4_0;  // with F32 values
  CHECK(xattn_cache_create(&o) == nullptr);
  CHECK_THAT(std::string(xattn_last_error()),
             Catch::Contains("options.key_dtype is XATTN_Q4_0 and options.value_dtype XATTN_F32; XATTN_Q4_0 keys and "
                             "values go together"));
  o.key_dtype = XATTN_Q4C;  // with F32 values
  CHECK(xattn_cache_create(&o) == nullptr);
  CHECK_THAT(std::string(xattn_last_error()),
             Catch::Contains("options.key_dtype is XATTN_Q4C and options.value_dtype XATTN_F32; XATTN_Q4C keys take "
                             "XATTN_Q4_0 values"));
  o.key_dtype = o.value_dtype = XATTN_Q4C;
  CHECK(xattn_cache_create(&o) == nullptr);
  CHECK_THAT(std::string(xattn_last_error()), Catch::Contains("options.value_dtype is XATTN_Q4C"));
  o.key_dtype = o.value_dtype = XATTN_F32;
  cache_ptr c(xattn_cache_create(&o));
  REQUIRE(c);
  xattn_sequence a = 0;
  REQUIRE(xattn_cache_add_sequence(c.get(), &a) == XATTN_OK);
  std::vector<float> k(2 * 10 * 8, 0.5f), v(2 * 10 * 8, 0.25f);
  xattn_tensor kc = c_of(k.data(), {2, 10, 8}), vc = c_of(v.data(), {2, 10, 8});
  REQUIRE(xattn_cache_append(c.get(), a, &kc, &vc) == XATTN_OK);
  const auto length = [&](xattn_sequence s) {
    std::int64_t n = -1;
    xattn_cache_length(c.get(), s, &n);
    return n;
  };
  const auto refused = [&](xattn_status got, xattn_status want, const std::string& words) {
    INFO(xattn_last_error());
    CHECK(got == want);
    CHECK_THAT(std::string(xattn_last_error()), Catch::Contains(words));
    CHECK(length(a) == 10);
  };
  xattn_tensor bad = c_of(k.data(), {2, 10, 4});
  refused(xattn_cache_append(c.get(), a, &bad, &vc), XATTN_INVALID_ARGUMENT,
          "xattn_cache_append: k_rows has shape (2,10,4) but the cache holds (kv_heads, n, head_dim) = (2, n, 8)");
  bad = c_of(v.data(), {2, 5, 8});
  refused(xattn_cache_append(c.get(), a, &kc, &bad), XATTN_INVALID_ARGUMENT, "hold different numbers of tokens");
  // a full pool: 16 tokens in pages of 4, 10 used, 7 more need 2 pages of the 1 left
  std::vector<float> more(2 * 7 * 8, 1.0f);
  xattn_tensor mc = c_of(more.data(), {2, 7, 8});
  refused(xattn_cache_append(c.get(), a, &mc, &mc), XATTN_OUT_OF_MEMORY, "xattn_cache_append: ");
  xattn_sequence gone = 0;
  REQUIRE(xattn_cache_fork(c.get(), a, &gone) == XATTN_OK);
  REQUIRE(xattn_cache_release(c.get(), gone) == XATTN_OK);
  refused(xattn_cache_append(c.get(), gone, &kc, &vc), XATTN_INVALID_ARGUMENT,
          "xattn_cache_append: sequence 1 (generation 0) is not in this cache or was released");
  refused(xattn_cache_release(c.get(), gone), XATTN_INVALID_ARGUMENT, "xattn_cache_release: sequence");
  refused(xattn_cache_truncate(c.get(), a, 11), XATTN_INVALID_ARGUMENT,
          "xattn_cache_truncate: length 11 is beyond the sequence's 10 tokens");
  refused(xattn_cache_truncate(c.get(), a, -1), XATTN_INVALID_ARGUMENT, "xattn_cache_truncate: length is -1");
  refused(xattn_cache_truncate(c.get(), gone, 0), XATTN_INVALID_ARGUMENT, "xattn_cache_truncate: sequence 1");
  const std::int64_t past[] = {0, 10}, negative[] = {-1}, unsorted[] = {3, 2};
  refused(xattn_cache_keep(c.get(), a, past, 2), XATTN_INVALID_ARGUMENT,
          "xattn_cache_keep: positions[1] = 10 is not below the sequence's 10 tokens");
  refused(xattn_cache_keep(c.get(), a, negative, 1), XATTN_INVALID_ARGUMENT, "xattn_cache_keep: positions[0] is -1");
  refused(xattn_cache_keep(c.get(), a, unsorted, 2), XATTN_INVALID_ARGUMENT,
          "xattn_cache_keep: positions must increase: positions[0] = 3, positions[1] = 2");
  refused(xattn_cache_keep(c.get(), a, nullptr, 2), XATTN_INVALID_ARGUMENT,
          "xattn_cache_keep: positions is NULL but n is 2");
  refused(xattn_cache_keep(c.get(), a, past, -1), XATTN_INVALID_ARGUMENT, "xattn_cache_keep: n is -1");
  refused(xattn_cache_keep(c.get(), gone, nullptr, 0), XATTN_INVALID_ARGUMENT, "xattn_cache_keep: sequence 1");
  refused(xattn_cache_reserve(c.get(), 1000), XATTN_INVALID_ARGUMENT,
          "xattn_cache_reserve: 1000 tokens need 250 pages but the pool holds 4");

  std::vector<float> q(1 * 4 * 1 * 8, 1.0f), out(4 * 8, -7.0f);
  xattn_tensor qc = c_of(q.data(), {1, 4, 1, 8}), oc = c_of(out.data(), {1, 4, 1, 8});
  xattn_attention_desc d = xattn_attention_defaults();
  const auto untouched = [&] {
    for (float x : out) CHECK(x == -7.0f);
  };
  d.causal = XATTN_CAUSAL_TOP_LEFT;
  refused(xattn_cache_attention(c.get(), &a, 1, &qc, &d, &oc, nullptr), XATTN_UNSUPPORTED,
          "desc.causal = XATTN_CAUSAL_TOP_LEFT");
  d.causal = XATTN_CAUSAL_BOTTOM_RIGHT;
  d.dropout_p = 0.1;
  refused(xattn_cache_attention(c.get(), &a, 1, &qc, &d, &oc, nullptr), XATTN_UNSUPPORTED, "desc.dropout_p");
  d.dropout_p = 0;
  refused(xattn_cache_attention(c.get(), &gone, 1, &qc, &d, &oc, nullptr), XATTN_INVALID_ARGUMENT,
          "xattn_cache_attention: sequence 1 (generation 0) is not in this cache or was released");
  xattn_tensor q3 = c_of(q.data(), {1, 3, 1, 8});
  refused(xattn_cache_attention(c.get(), &a, 1, &q3, &d, &oc, nullptr), XATTN_INVALID_ARGUMENT,
          "3 heads are not a multiple of the cache's 2 kv_heads");
  xattn_tensor o5 = c_of(out.data(), {1, 4, 1, 5});
  refused(xattn_cache_attention(c.get(), &a, 1, &qc, &d, &o5, nullptr), XATTN_INVALID_ARGUMENT, "out has shape");
  untouched();
  REQUIRE(xattn_cache_attention(c.get(), &a, 1, &qc, &d, &oc, nullptr) == XATTN_OK);
  for (float x : out) CHECK(std::abs(x - 0.25f) < 1e-6f);  // every value row is 0.25
}
