// kv_cache_options::rotate: keys turned by a Hadamard rotation before they are stored, queries at
// attention time. Exact on float pages (plain and rotary caches, every path that reads them); on
// quantized pages a decoding step's error against the unquantized inputs, with and without the
// rotation, on uniform keys and on keys with outlier channels, where the rotation must help
// (docs/numerics.md quotes the figures this prints with -s).
#include "support/cache_steps.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>
#include <xattn/cache.hpp>
#include <xattn/xattn.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <cstdio>

using namespace xattn;
using testing::max_abs_diff;

using testing::step_error;

TEST_CASE("rotated keys: float pages give the unrotated attention, the queries turned at attention time",
          "[cache][rotate]") {
  testing::rng r(5);
  const std::size_t hkv = 2, dim = 96, len = 300;  // 96: three Hadamard blocks of 32
  const xt::xtensor<float, 3> k = r.tensor<float>({hkv, len, dim}), v = r.tensor<float>({hkv, len, dim});
  const xt::xtensor<float, 4> q = r.tensor<float>({1, 8, 3, dim});
  for (const bool rotary : {false, true}) {
    INFO((rotary ? "rotary cache" : "plain cache"));
    kv_cache_options o{.kv_heads = hkv, .head_dim = dim, .page_size = 16, .max_tokens = 1024};
    if (rotary) o.rope = rope_options{};
    kv_cache<float> plain(o);
    o.rotate = true;
    kv_cache<float> turned(o);
    const auto a = plain.add_sequence(), b = turned.add_sequence();
    plain.append(a, k, v);
    turned.append(b, k, v);
    CHECK(max_abs_diff(turned.stored_keys(b), plain.stored_keys(a)) < 1e-6);  // read back unturned
    const auto positions = plain.positions({a}, 3);
    const auto attend = [&](const auto& cache, sequence_id s) -> xt::xtensor<float, 4> {
      const auto K = cache.keys({s}), V = cache.values({s});
      if (rotary)
        return eval(softmax(mask(rope(ref(q), positions) * trans(K) * 0.1f, causal(align::bottom_right))) * V);
      return eval(softmax(mask(ref(q) * trans(K) * 0.1f, causal(align::bottom_right))) * V);
    };
    const auto want = attend(plain, a), got = attend(turned, b);
    CHECK(max_abs_diff(got, want) < 1e-5);
    if (!rotary) {  // the oracle turns the queries too, and a score policy invariant under rotations works
      const auto e = softmax(ref(q) * trans(turned.keys({b})) * 0.1f) * turned.values({b});
      CHECK(max_abs_diff(eval(e), reference(e).output) < 1e-5);
      CHECK_THAT(explain(e).text, Catch::Contains("turned by a Hadamard rotation of blocks of 32"));
      kv_cache_options odd{.kv_heads = 1, .head_dim = 33, .rotate = true};
      CHECK_THROWS_WITH(kv_cache<float>(odd), Catch::Contains("rotate turns blocks of a power of two features"));
      CHECK_THROWS_WITH(
          eval(softmax(score(bilinear{xt::eye<float>(dim)}, ref(q), turned.keys({b}))) * turned.values({b})),
          Catch::Contains("leaves only scores of dot products and norms"));
      CHECK(max_abs_diff(eval(softmax(score(gaussian{3.0}, ref(q), turned.keys({b}))) * turned.values({b})),
                         eval(softmax(score(gaussian{3.0}, ref(q), plain.keys({a}))) * plain.values({a}))) < 1e-5);
    }
  }
}

TEST_CASE("rotated keys: a decoding step's error on quantized pages, with and without the rotation",
          "[cache][rotate]") {
  testing::rng r(71);
  const std::size_t hkv = 8, group = 4, dim = 128, len = 2048;
  const xt::xtensor<float, 4> q = r.tensor<float>({1, hkv * group, 1, dim}, -2, 2);
  for (const bool outliers : {false, true}) {
    xt::xtensor<float, 3> k = r.tensor<float>({hkv, len, dim}), v = r.tensor<float>({hkv, len, dim});
    if (outliers) testing::outlier_channels(k);
    const double q4_plain = step_error<q4>(q, k, v, false), q4_turned = step_error<q4>(q, k, v, true);
    const double i8_plain = step_error<std::int8_t>(q, k, v, false), i8_turned = step_error<std::int8_t>(q, k, v, true);
    const double f8_plain = step_error<float8_e4m3>(q, k, v, false), f8_turned = step_error<float8_e4m3>(q, k, v, true);
    const char* data = outliers ? "outlier key channels" : "U(-1, 1)";
    INFO(data << ": q4 " << q4_plain << " / rotated " << q4_turned << "; int8 " << i8_plain << " / " << i8_turned
              << "; fp8 " << f8_plain << " / " << f8_turned);
    if (outliers) {  // the rotation spreads the outliers: the integer formats' group scales drop
      CHECK(q4_turned < 0.8 * q4_plain);
      CHECK(i8_turned < 0.5 * i8_plain);
      // a float format keeps each value's relative precision: its small features lose nothing to
      // the outliers, and turned, every feature carries their size (docs/numerics.md)
      CHECK(f8_turned > f8_plain);
    } else {  // nothing to spread: about the same
      CHECK(q4_turned < 1.2 * q4_plain);
      CHECK(i8_turned < 1.2 * i8_plain);
      CHECK(f8_turned < 1.5 * f8_plain);
    }
  }
}
