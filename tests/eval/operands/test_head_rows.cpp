// A head's rows as the tile operations read them: a tensor's as kernel::strided_rows (whose
// packing and products libxattn_kernels holds compiled), rows running forwards or backwards, a
// cache's as its paged_rows (what kernels reading keys in place take, a page lookup per key); and
// the passes over them, keys packed or read in place, against the double reference.
#include "support/random.hpp"

#include <xattn/cache.hpp>
#include <xattn/eval/operands/head_rows.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <vector>

using namespace xattn;
using testing::max_abs_diff;

TEST_CASE("head_rows: a tensor's rows are strided rows, forwards or backwards") {
  std::vector<float> mem(2 * 3 * 7 * 4);
  for (std::ptrdiff_t row_stride : {std::ptrdiff_t(4), std::ptrdiff_t(-4)}) {
    // (B, H, S, D) = (2, 3, 7, 4); a negative row stride starts from the last row of each head
    const float* first = row_stride > 0 ? mem.data() : mem.data() + 6 * 4;
    const strided_view<const float> kv{first, {{2, 3, 7, 4}, {3 * 7 * 4, 7 * 4, row_stride, 1}}};
    const auto rows = head_rows(kv, 1, 2);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(rows)>, kernel::strided_rows<float>>);
    for (std::size_t j = 0; j < 7; ++j) REQUIRE(rows(j) == kv.row(1, 2, j));
    const auto from3 = rows_from(rows, 3);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(from3)>, kernel::strided_rows<float>>);
    for (std::size_t c = 0; c < 4; ++c) REQUIRE(from3(c) == kv.row(1, 2, 3 + c));
  }
  // any other accessor is wrapped, offset by j0
  const auto other = rows_from([](std::size_t j) { return j * 10; }, 5);
  REQUIRE(other(2) == 70);
}

TEST_CASE("head_rows: a cache's rows are its paged rows, from key j0 on") {
  testing::rng g(20261207);
  kv_cache<bfloat16> cache({.kv_heads = 2, .head_dim = 8, .page_size = 4, .max_tokens = 64});
  const auto a = cache.add_sequence(), b = cache.add_sequence();
  cache.append(a, g.tensor<float>({2, 6, 8}), g.tensor<float>({2, 6, 8}));
  cache.append(b, g.tensor<float>({2, 11, 8}), g.tensor<float>({2, 11, 8}));  // pages after a's
  const auto K = cache.keys({a, b});
  const auto rows = head_rows(K.view, 1, 1);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(rows)>, paged_rows<bfloat16>>);
  for (std::size_t j = 0; j < 11; ++j) REQUIRE(rows(j) == K.view.row(1, 1, j));
  const auto from3 = rows_from(rows, 3);  // across the page boundaries at keys 4 and 8
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(from3)>, paged_rows<bfloat16>>);
  for (std::size_t c = 0; c + 3 < 11; ++c) REQUIRE(from3(c) == K.view.row(1, 1, 3 + c));
}

TEST_CASE("keys and values whose rows run backwards: decoding and prefill against the reference") {
  testing::rng g(20261130);
  const std::size_t B = 2, H = 2, S = 1100, D = 32;  // three key blocks
  const auto k = g.tensor<float>({B, H, S, D}), v = g.tensor<float>({B, H, S, D});
  // the same memory seen with the sequence axis reversed: row j is stored row S - 1 - j
  const std::array<std::ptrdiff_t, 4> back{std::ptrdiff_t(H * S * D), std::ptrdiff_t(S * D), -std::ptrdiff_t(D), 1};
  const auto K = ref(k.data() + (S - 1) * D, {B, H, S, D}, back), V = ref(v.data() + (S - 1) * D, {B, H, S, D}, back);
  for (std::size_t sq : {std::size_t(1), std::size_t(64)}) {  // keys read in place; keys packed
    const auto q = g.tensor<float>({B, H, sq, D});
    const auto e = softmax(mask(ref(q) * trans(K) / std::sqrt(float(D)), causal(align::bottom_right))) * V;
    const xt::xtensor<float, 4> out = eval(e);
    CHECK(max_abs_diff(out, reference(e).output) < 2e-6);
    // and the same attention over the rows stored forwards, reversed by hand
    xt::xtensor<float, 4> kf = xt::xtensor<float, 4>::from_shape({B, H, S, D}), vf = kf;
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t j = 0; j < S; ++j)
          for (std::size_t d = 0; d < D; ++d) {
            kf(b, h, j, d) = k(b, h, S - 1 - j, d);
            vf(b, h, j, d) = v(b, h, S - 1 - j, d);
          }
    const xt::xtensor<float, 4> fwd =
        eval(softmax(mask(ref(q) * trans(ref(kf)) / std::sqrt(float(D)), causal(align::bottom_right))) * ref(vf));
    CHECK(max_abs_diff(out, fwd) < 1e-6);
  }
}
