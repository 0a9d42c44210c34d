// Catalogue E39-E50: misuse of xattn::onnx::attention (ONNX Attention-23/24 on the DSL).
#include "hardening/message.hpp"
#include "support/random.hpp"

#include <xattn/onnx/attention.hpp>

#include <catch2/catch.hpp>

using namespace xattn;
using namespace xattn::onnx;
using Catch::Contains;

namespace {

testing::rng r(39);

/// 4-D inputs: B=2, Hq=4, Hkv=2, Sq=3, Skv=5, head size 8.
attention_inputs<> inputs_4d() {
  attention_inputs<> in;
  in.q = r.tensor<float>({2, 4, 3, 8});
  in.k = r.tensor<float>({2, 2, 5, 8});
  in.v = r.tensor<float>({2, 2, 5, 8});
  return in;
}

/// 3-D inputs of the same problem: (B, S, H*head).
attention_inputs<> inputs_3d() {
  attention_inputs<> in;
  in.q = r.tensor<float>({2, 3, 32});
  in.k = r.tensor<float>({2, 5, 16});
  in.v = r.tensor<float>({2, 5, 16});
  return in;
}

attention_attrs heads_attrs(int q, int kv) {
  attention_attrs a;
  a.q_num_heads = q;
  a.kv_num_heads = kv;
  return a;
}

std::string message(const attention_inputs<>& in, const attention_attrs& at, bool want_qk = false) {
  return hardening::invalid_argument_message([&] { attention(in, at, false, want_qk); });
}

}  // namespace

TEST_CASE("E39 3-D inputs without q_num_heads / kv_num_heads, or with 0 heads", "[errors][onnx]") {
  CHECK_THAT(message(inputs_3d(), {}), Contains("Attention: 3-D inputs need q_num_heads and kv_num_heads > 0"));
  CHECK_THAT(message(inputs_3d(), heads_attrs(0, 2)), Contains("q_num_heads and kv_num_heads > 0"));
}

TEST_CASE("E40 past_key without past_value", "[errors][onnx]") {
  auto in = inputs_4d();
  in.past_key = r.tensor<float>({2, 2, 4, 8});
  CHECK_THAT(message(in, {}), Contains("Attention: past_key and past_value must be given together"));
}

TEST_CASE("E41 qk_matmul_output_mode outside 0..3 throws when the output is requested, and is ignored otherwise",
          "[errors][onnx]") {
  attention_attrs at;
  at.qk_matmul_output_mode = 4;
  const auto in = inputs_4d();
  CHECK_THAT(message(in, at, true), Contains("Attention: qk_matmul_output_mode must be 0, 1, 2 or 3, got 4"));
  const auto out = attention(in, at, false, false);
  CHECK(out.y.shape() == std::vector<std::size_t>{2, 4, 3, 8});
}

TEST_CASE("E42 Q, K and V of different ranks", "[errors][onnx]") {
  auto in = inputs_4d();
  in.k = r.tensor<float>({2, 5, 16});
  CHECK_THAT(message(in, {}),
             Contains("Q, K and V must all be 3-D or all 4-D, got Q (2,4,3,8), K (2,5,16), V (2,2,5,8)"));
}

TEST_CASE("E43 nonpad_kv_seqlen together with a KV cache", "[errors][onnx]") {
  auto in = inputs_4d();
  in.past_key = r.tensor<float>({2, 2, 4, 8});
  in.past_value = r.tensor<float>({2, 2, 4, 8});
  in.nonpad_kv_seqlen = xt::xarray<std::int64_t>{5, 5};
  CHECK_THAT(message(in, {}), Contains("nonpad_kv_seqlen cannot be combined with past_key/past_value"));
}

TEST_CASE("E44 a bool and a float attn_mask at once", "[errors][onnx]") {
  auto in = inputs_4d();
  in.attn_mask_bool = xt::xarray<bool>(xt::ones<bool>({3, 5}));
  in.attn_mask_float = xt::xarray<float>(xt::zeros<float>({3, 5}));
  CHECK_THAT(message(in, {}), Contains("give one attn_mask, bool or float"));
}

TEST_CASE("E45 softmax_precision that is not a float TensorProto type", "[errors][onnx]") {
  attention_attrs at;
  at.softmax_precision = 7;  // INT64
  CHECK_THAT(message(inputs_4d(), at), Contains("softmax_precision must be 1, 10, 11 or 16") && Contains("got 7"));
}

TEST_CASE("E46 3-D hidden sizes not divisible by the head counts", "[errors][onnx]") {
  CHECK_THAT(message(inputs_3d(), heads_attrs(5, 2)),
             Contains("Attention: Q of shape (2,3,32) cannot be split into 5 heads"));
  CHECK_THAT(message(inputs_3d(), heads_attrs(4, 3)),
             Contains("Attention: K of shape (2,5,16) cannot be split into 3 heads"));
}

TEST_CASE("E47 a past_key whose shape does not continue K", "[errors][onnx]") {
  auto in = inputs_4d();
  in.past_key = r.tensor<float>({2, 3, 4, 8});
  in.past_value = r.tensor<float>({2, 2, 4, 8});
  CHECK_THAT(message(in, {}), Contains("past_key has shape (2,3,4,8) but the new entries are (2,2,5,8)"));
}

TEST_CASE("E48 nonpad_kv_seqlen of the wrong shape or beyond the keys", "[errors][onnx]") {
  auto in = inputs_4d();
  in.nonpad_kv_seqlen = xt::xarray<std::int64_t>{5, 5, 5};
  CHECK_THAT(message(in, {}), Contains("nonpad_kv_seqlen has shape (3) but must be (2)"));
  in.nonpad_kv_seqlen = xt::xarray<std::int64_t>{5, 6};
  CHECK_THAT(message(in, {}),
             Contains("lens[1] = 6 is outside [0, 5]"));  // reported under the DSL's name, lengths(lens)
}

TEST_CASE("E49 an attn_mask with more columns than keys, or that does not broadcast", "[errors][onnx]") {
  auto in = inputs_4d();
  in.attn_mask_bool = xt::xarray<bool>(xt::ones<bool>({3, 6}));
  CHECK_THAT(message(in, {}), Contains("attn_mask of shape (3,6) has more columns than the 5 keys"));
  in.attn_mask_bool.reset();
  in.attn_mask_float = xt::xarray<float>(xt::zeros<float>({4, 5}));  // 4 query rows, Sq = 3
  CHECK_THAT(message(in, {}), Contains("bias(tensor): shape (4,5) does not broadcast to the scores (2,4,3,5)"));
}

TEST_CASE("E50 q_num_heads not a multiple of kv_num_heads", "[errors][onnx]") {
  auto in = inputs_4d();
  in.q = r.tensor<float>({2, 3, 3, 8});
  CHECK_THAT(message(in, {}), Contains("the 3 query heads are not a multiple of the 2 key heads"));
}
