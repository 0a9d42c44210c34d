// Keys quantized per channel over a page (kv_cache<q4c, V>, KIVI): a page is quantized again from
// its float rows as rows arrive, so its stored keys are KIVI's quantization of its tokens however
// they were appended; forks, truncate and keep keep that true; attention reads the pages as the
// reference does; and on keys with outlier channels it beats q4's per-token groups, with and
// without the rotation (docs/numerics.md quotes the figures this prints with -s).
#include "support/cache_steps.hpp"
#include "support/q4c_reference.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>
#include <xattn/cache.hpp>
#include <xattn/xattn.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <limits>

using namespace xattn;
using testing::max_abs_diff;

namespace {

using cache = kv_cache<q4c, q4>;

xt::xtensor<float, 3> token_range(const xt::xtensor<float, 3>& x, std::size_t lo, std::size_t hi) {
  return xt::view(x, xt::all(), xt::range(lo, hi), xt::all());
}

}  // namespace

TEST_CASE("q4c keys: each page holds KIVI's quantization of its tokens, however they were appended", "[cache][q4c]") {
  testing::rng r(3);
  const std::size_t hkv = 2, dim = 80, len = 53;  // pages of 16: three whole, one of 5 tokens
  const xt::xtensor<float, 3> k = r.tensor<float>({hkv, len, dim}), v = r.tensor<float>({hkv, len, dim});
  cache whole({.kv_heads = hkv, .head_dim = dim, .page_size = 16, .max_tokens = 256});
  const auto a = whole.add_sequence(), b = whole.add_sequence();
  whole.append(a, k, v);
  for (std::size_t t = 0; t < len;) {  // 1, 2, 3, ... tokens at a time, across page ends
    const std::size_t n = std::min(len - t, t % 7 + 1);
    whole.append(b, token_range(k, t, t + n), token_range(v, t, t + n));
    t += n;
    CHECK(max_abs_diff(whole.stored_keys(b), testing::q4c_rows(token_range(k, 0, t), 16)) == 0);
  }
  CHECK(max_abs_diff(whole.stored_keys(a), testing::q4c_rows(k, 16)) == 0);
  CHECK(max_abs_diff(whole.stored_values(a), whole.stored_values(b)) == 0);
  CHECK(max_abs_diff(whole.stored_keys(a), k) < 2.0 / 30 + 1e-6);  // half of a channel's step at most
}

TEST_CASE("q4c keys: attention reads them as the reference does, explain names them", "[cache][q4c]") {
  testing::rng r(48);
  cache c({.kv_heads = 2, .head_dim = 80, .page_size = 16, .max_tokens = 1024});
  const auto a = c.add_sequence(), b = c.add_sequence();
  c.append(a, r.tensor<float>({2, 300, 80}), r.tensor<float>({2, 300, 80}));
  c.append(b, r.tensor<float>({2, 100, 80}), r.tensor<float>({2, 100, 80}));
  const auto batch = std::vector<sequence_id>{a, b};
  const xt::xtensor<float, 4> q = r.tensor<float>({2, 8, 70, 80});  // 4 query heads per key head
  const auto e =
      softmax(mask(ref(q) * trans(c.keys(batch)) / std::sqrt(80.0f), causal(align::bottom_right))) * c.values(batch);
  CHECK(max_abs_diff(eval(e), reference(e).output) < 2e-6);
  const xt::xtensor<float, 4> q1 = r.tensor<float>({2, 8, 1, 80});  // a grouped decoding step, split over keys
  const auto step = softmax(ref(q1) * trans(c.keys(batch)) * 0.1f) * c.values(batch);
  CHECK(max_abs_diff(eval(step), reference(step).output) < 2e-6);
  CHECK_THAT(explain(e).text,
             Catch::Contains("K q4c (4 bits, keys scaled per channel over a page) (2,2,300,80) in pages of 16 tokens"));
}

TEST_CASE("q4c keys: forks, truncate and keep", "[cache][q4c]") {
  testing::rng r(9);
  const std::size_t hkv = 2, dim = 64, ps = 8;
  const xt::xtensor<float, 3> k = r.tensor<float>({hkv, 40, dim}), v = r.tensor<float>({hkv, 40, dim});
  cache c({.kv_heads = hkv, .head_dim = dim, .page_size = ps, .max_tokens = 512});

  SECTION("a fork's appends quantize its own copy of the shared partial page") {
    const auto a = c.add_sequence();
    c.append(a, token_range(k, 0, 20), token_range(v, 0, 20));  // pages of 8, 8 and 4 tokens
    const auto b = c.fork(a);
    const auto before = c.stored_keys(a);
    c.append(b, token_range(k, 20, 30), token_range(v, 20, 30));
    CHECK(max_abs_diff(c.stored_keys(a), before) == 0);
    CHECK(max_abs_diff(c.stored_keys(b), testing::q4c_rows(token_range(k, 0, 30), ps)) == 0);
    c.append(a, token_range(k, 30, 33), token_range(v, 30, 33));  // a's partial page from a's own float rows
    xt::xtensor<float, 3> mine = xt::concatenate(xt::xtuple(token_range(k, 0, 20), token_range(k, 30, 33)), 1);
    CHECK(max_abs_diff(c.stored_keys(a), testing::q4c_rows(mine, ps)) == 0);
  }
  SECTION("truncate within the partial page keeps its float rows; into a whole page, its stored values") {
    const auto a = c.add_sequence(), b = c.add_sequence();
    c.append(a, token_range(k, 0, 22), token_range(v, 0, 22));
    c.truncate(a, 19);  // the partial page's 6 rows down to 3
    c.append(a, token_range(k, 30, 35), token_range(v, 30, 35));
    xt::xtensor<float, 3> want = xt::concatenate(xt::xtuple(token_range(k, 0, 19), token_range(k, 30, 35)), 1);
    CHECK(max_abs_diff(c.stored_keys(a), testing::q4c_rows(want, ps)) == 0);

    c.append(b, token_range(k, 0, 24), token_range(v, 0, 24));  // three whole pages
    const auto whole = c.stored_keys(b);
    c.truncate(b, 13);  // into page 1: its 5 kept rows as stored
    CHECK(max_abs_diff(c.stored_keys(b), token_range(whole, 0, 13)) == 0);
    c.append(b, token_range(k, 30, 32), token_range(v, 30, 32));
    xt::xtensor<float, 3> from = xt::concatenate(xt::xtuple(token_range(whole, 0, 13), token_range(k, 30, 32)), 1);
    const auto got = c.stored_keys(b);
    CHECK(max_abs_diff(token_range(got, 0, 8), token_range(whole, 0, 8)) == 0);  // page 0 untouched
    CHECK(max_abs_diff(token_range(got, 8, 15), token_range(testing::q4c_rows(from, ps), 8, 15)) == 0);
  }
  SECTION("keep quantizes again each page a row moves into, from the kept rows' stored values") {
    const auto a = c.add_sequence();
    c.append(a, token_range(k, 0, 29), token_range(v, 0, 29));  // 3 whole pages and 5 rows
    const auto stored = c.stored_keys(a), values = c.stored_values(a);
    const xt::xtensor<float, 3> partial_rows = token_range(k, 24, 29);  // the float rows of the partial page
    const std::vector<std::size_t> kept{0, 1, 2, 3, 4, 5, 6, 7, 9, 12, 17, 25, 26, 28};  // page 0 stays
    const auto b = c.fork(a);  // shares every page: those written are copied
    c.keep(a, kept);
    xt::xtensor<float, 3> rows = xt::zeros<float>({hkv, kept.size(), dim}), vals = rows;
    for (std::size_t i = 0; i < kept.size(); ++i) {
      const bool fresh = kept[i] >= 24;
      if (fresh)
        xt::view(rows, xt::all(), i, xt::all()) = xt::view(partial_rows, xt::all(), kept[i] - 24, xt::all());
      else
        xt::view(rows, xt::all(), i, xt::all()) = xt::view(stored, xt::all(), std::size_t(kept[i]), xt::all());
      xt::view(vals, xt::all(), i, xt::all()) = xt::view(values, xt::all(), kept[i], xt::all());
    }
    const auto got = c.stored_keys(a);
    CHECK(max_abs_diff(token_range(got, 0, 8), token_range(stored, 0, 8)) == 0);
    CHECK(max_abs_diff(token_range(got, 8, 14), token_range(testing::q4c_rows(rows, ps), 8, 14)) == 0);
    CHECK(max_abs_diff(c.stored_values(a), vals) == 0);
    CHECK(max_abs_diff(c.stored_keys(b), stored) == 0);           // the fork's pages as they were
    c.append(a, token_range(k, 30, 31), token_range(v, 30, 31));  // the new partial page's float rows: 6 kept, 1 new
    xt::xtensor<float, 3> last = xt::concatenate(xt::xtuple(token_range(rows, 8, 14), token_range(k, 30, 31)), 1);
    CHECK(max_abs_diff(token_range(c.stored_keys(a), 8, 15), testing::q4c_rows(last, ps)) == 0);
  }
  SECTION("bad input throws and leaves the sequence as it was") {
    const auto a = c.add_sequence();
    c.append(a, token_range(k, 0, 11), token_range(v, 0, 11));
    const auto before = c.stored_keys(a);
    xt::xtensor<float, 3> bad = token_range(k, 11, 13);
    bad(1, 1, 7) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_WITH(c.append(a, bad, token_range(v, 11, 13)),
                      Catch::Contains("k_rows(1, 1, 7) = nan cannot be quantized to q4c"));
    CHECK_THROWS_WITH(c.keep(a, {3, 2}), Catch::Contains("positions must increase"));
    CHECK(c.length(a) == 11);
    CHECK(max_abs_diff(c.stored_keys(a), before) == 0);
    c.append(a, token_range(k, 11, 13), token_range(v, 11, 13));  // the float rows survived the failed calls
    CHECK(max_abs_diff(c.stored_keys(a), testing::q4c_rows(token_range(k, 0, 13), ps)) == 0);
  }
}

TEST_CASE("q4c keys: on outlier channels a decoding step errs less than with q4 keys, rotated or not",
          "[cache][q4c][rotate]") {
  testing::rng r(71);
  const std::size_t hkv = 8, group = 4, dim = 128, len = 2048;
  const xt::xtensor<float, 4> q = r.tensor<float>({1, hkv * group, 1, dim}, -2, 2);
  for (const bool outliers : {false, true}) {
    xt::xtensor<float, 3> k = r.tensor<float>({hkv, len, dim}), v = r.tensor<float>({hkv, len, dim});
    if (outliers) testing::outlier_channels(k, 30);
    const double q4_plain = testing::step_error<q4, q4>(q, k, v, false),
                 q4_turned = testing::step_error<q4, q4>(q, k, v, true);
    const double q4c_plain = testing::step_error<q4c, q4>(q, k, v, false),
                 q4c_turned = testing::step_error<q4c, q4>(q, k, v, true);
    INFO((outliers ? "outlier key channels" : "U(-1, 1)")
         << ", q4 values: q4 keys " << q4_plain << " / rotated " << q4_turned << "; q4c keys " << q4c_plain
         << " / rotated " << q4c_turned);
    if (outliers) {  // per channel, an outlier channel's step is its own; rotated, it is spread again
      CHECK(q4c_plain < 0.5 * q4_plain);
      CHECK(q4c_plain < q4_turned);
    } else {
      CHECK(q4c_plain < 1.5 * q4_plain);
      CHECK(q4c_turned < 1.5 * q4_turned);
    }
  }
}
