// onnx::attention with share_past_present_buffer: the new keys and values written into the past
// buffers in place give, step after step, what the standard past/present concatenation gives for
// each batch row's own history; bad input is refused before anything is written.
#include "support/random.hpp"

#include <xattn/onnx/attention.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

using namespace xattn;
using namespace xattn::onnx;
using testing::max_abs_diff;

TEST_CASE("onnx past/present: a shared buffer decodes a ragged batch as each row's own concatenation", "[onnx]") {
  testing::rng r(71);
  const std::size_t hq = 4, hkv = 2, dim = 16, capacity = 40, sq = 2;
  const std::vector<std::size_t> start{5, 11};  // each batch row's past tokens before the first step
  attention_attrs shared;
  shared.is_causal = 1;
  shared.share_past_present_buffer = true;
  attention_attrs plain;
  plain.is_causal = 1;

  attention_inputs<> in;  // both rows in one shared buffer
  in.past_key = xt::xarray<float>(xt::zeros<float>({std::size_t(2), hkv, capacity, dim}));
  in.past_value = in.past_key;
  in.past_seqlens = xt::xarray<std::int64_t>({std::int64_t(start[0]), std::int64_t(start[1])});
  std::vector<attention_inputs<>> alone(2);  // each row by itself, the standard way
  for (std::size_t b = 0; b < 2; ++b) {
    const xt::xarray<float> k = r.tensor<float>({1, hkv, start[b], dim}), v = r.tensor<float>({1, hkv, start[b], dim});
    alone[b].past_key = k;
    alone[b].past_value = v;
    xt::view(*in.past_key, b, xt::all(), xt::range(0, start[b]), xt::all()) = xt::view(k, 0);
    xt::view(*in.past_value, b, xt::all(), xt::range(0, start[b]), xt::all()) = xt::view(v, 0);
  }
  for (int step = 0; step < 6; ++step) {
    in.q = r.tensor<float>({2, hq, sq, dim});
    in.k = r.tensor<float>({2, hkv, sq, dim});
    in.v = r.tensor<float>({2, hkv, sq, dim});
    const auto out = attention(in, shared, true, false);
    CHECK(out.present_key.dimension() == 0);  // left default: the present is the past buffer
    for (std::size_t b = 0; b < 2; ++b) {
      INFO("step " << step << ", batch row " << b);
      attention_inputs<>& a = alone[b];
      a.q = xt::view(in.q, xt::range(b, b + 1));
      a.k = xt::view(in.k, xt::range(b, b + 1));
      a.v = xt::view(in.v, xt::range(b, b + 1));
      auto want = attention(std::as_const(a), plain, true, false);
      const xt::xarray<float> got = xt::view(out.y, xt::range(b, b + 1));
      CHECK(max_abs_diff(got, want.y) < 1e-6);
      a.past_key = std::move(want.present_key);
      a.past_value = std::move(want.present_value);
      (*in.past_seqlens)(b) += std::int64_t(sq);
    }
  }
  // the buffer holds exactly what the concatenations hold
  for (std::size_t b = 0; b < 2; ++b) {
    const std::size_t len = std::size_t((*in.past_seqlens)(b));
    const xt::xarray<float> held = xt::view(*in.past_key, xt::range(b, b + 1), xt::all(), xt::range(0, len));
    CHECK(max_abs_diff(held, *alone[b].past_key) == 0);
  }
}

TEST_CASE("onnx past/present: a shared buffer refuses what does not fit, unchanged", "[onnx][errors]") {
  testing::rng r(72);
  attention_attrs shared;
  shared.share_past_present_buffer = true;
  attention_inputs<> in;
  in.q = r.tensor<float>({1, 2, 3, 8});
  in.k = r.tensor<float>({1, 2, 3, 8});
  in.v = r.tensor<float>({1, 2, 3, 8});
  in.past_key = r.tensor<float>({1, 2, 10, 8});
  in.past_value = r.tensor<float>({1, 2, 10, 8});
  in.past_seqlens = xt::xarray<std::int64_t>({8});
  const auto before = *in.past_key;
  CHECK_THROWS_WITH(attention(in, shared, false, false),
                    "xattn: Attention: past_seqlens[0] = 8 plus 3 new tokens do not fit the past_key buffer of "
                    "capacity 10");
  CHECK(max_abs_diff(*in.past_key, before) == 0);
  CHECK_THROWS_WITH(attention(std::as_const(in), shared, false, false),
                    Catch::Contains("share_past_present_buffer writes into past_key / past_value"));
  in.past_seqlens.reset();
  CHECK_THROWS_WITH(attention(in, shared, false, false),
                    "xattn: Attention: share_past_present_buffer needs past_key, past_value and past_seqlens");
}
