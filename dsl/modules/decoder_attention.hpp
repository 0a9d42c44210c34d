#pragma once
// The attention layer of a current decoder-only model, written in the DSL with the nn layer's
// projections: LLaMA's (grouped-query heads, rotary embeddings on Q and K at the tokens'
// positions, causal) and gpt-oss's (the same with biases in the projections, a sliding window on
// some layers and one learned sink per query head). Forward and backward: grad() takes the
// gradients back through the rotation, the window and the sinks; the projections do the rest.
#include <xattn/nn/linear.hpp>
#include <xattn/xattn.hpp>

#include <xtensor/xtensor.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace dsl {

struct decoder_attention_options {
  std::size_t dim = 64, heads = 8, kv_heads = 2, head_dim = 16;
  xattn::rope_options rope{};
  bool bias = false;                       // gpt-oss: biases in the q, k, v and output projections
  std::int64_t window = xattn::unbounded;  // keys i - window < j <= i; unbounded: plain causal
  bool sinks = false;                      // gpt-oss: a learned sink logit per query head
  std::uint64_t seed = 0;
};

/// LLaMA 3's layer (small): 8 query heads over 2 key heads, rope with base 500000.
inline decoder_attention_options llama_style() { return {.rope = {.base = 500000.0f}}; }

/// gpt-oss's layer (small): biases, a sliding window of 16 tokens, learned sinks.
inline decoder_attention_options gpt_oss_style() {
  return {.rope = {.base = 150000.0f}, .bias = true, .window = 16, .sinks = true};
}

template <class T>
class decoder_attention {
 public:
  explicit decoder_attention(const decoder_attention_options& o)
      : o_(o),
        wq_(o.dim, o.heads * o.head_dim, o.bias, o.seed, 0, "decoder_attention.q_proj"),
        wk_(o.dim, o.kv_heads * o.head_dim, o.bias, o.seed, 1, "decoder_attention.k_proj"),
        wv_(o.dim, o.kv_heads * o.head_dim, o.bias, o.seed, 2, "decoder_attention.v_proj"),
        wo_(o.heads * o.head_dim, o.dim, o.bias, o.seed, 3, "decoder_attention.o_proj"),
        sinks_(xt::xtensor<T, 1>::from_shape({o.heads})) {
    sinks_.fill(o.sinks ? T(0) : -std::numeric_limits<T>::infinity());  // -inf: no sink
  }

  /// y (B, S, dim) of x (B, S, dim) at token positions pos (S) or (B, S).
  template <class Positions>
  xt::xtensor<T, 3> forward(const xt::xtensor<T, 3>& x, const Positions& pos) {
    x_ = x;
    const std::size_t rows = x.shape()[0] * x.shape()[1];
    q_ = project(wq_, x_), k_ = project(wk_, x_), v_ = project(wv_, x_);
    // [snippet decoder_attention]
    using namespace xattn;
    auto Q = rope(heads(q_, o_.heads), pos, o_.rope), K = rope(heads(k_, o_.kv_heads), pos, o_.rope);
    auto scores = Q * trans(K) / std::sqrt(T(o_.head_dim));
    auto e = softmax(mask(scores, window(left(), 0)), sinks(sinks_)) * heads(v_, o_.kv_heads);
    attended_ = eval_with_lse(e);  // (B, S, heads * head_dim), kept for the backward
    // [end decoder_attention]
    xt::xtensor<T, 3> y = xt::xtensor<T, 3>::from_shape({x.shape()[0], x.shape()[1], o_.dim});
    wo_.apply(attended_.output.data(), rows, wo_.in_features(), y.data(), o_.dim);
    return y;
  }

  /// dL/dx of the last forward given dL/dy; the projections' weight_grad() and sink_grad() accumulate.
  template <class Positions>
  xt::xtensor<T, 3> backward(const xt::xtensor<T, 3>& dy, const Positions& pos) {
    using namespace xattn;
    const std::size_t rows = x_.shape()[0] * x_.shape()[1];
    xt::xtensor<T, 3> d_att = xt::xtensor<T, 3>::from_shape(attended_.output.shape());
    wo_.backward(attended_.output.data(), rows, wo_.in_features(), dy.data(), o_.dim, d_att.data());
    auto Q = rope(heads(q_, o_.heads), pos, o_.rope), K = rope(heads(k_, o_.kv_heads), pos, o_.rope);
    auto e = softmax(mask(Q * trans(K) / std::sqrt(T(o_.head_dim)), window(left(), 0)), sinks(sinks_)) *
             heads(v_, o_.kv_heads);
    const auto g = grad(e, attended_, d_att);  // dq, dk, dv in the packed (B, S, H * D) shapes
    if (o_.sinks) sink_grad_ += g.dsinks;
    xt::xtensor<T, 3> dx = xt::zeros<T>(x_.shape()), part = xt::xtensor<T, 3>::from_shape(x_.shape());
    const auto back = [&](xattn::nn::linear<T>& w, const auto& d) {
      w.backward(x_.data(), rows, o_.dim, d.data(), w.out_features(), part.data());
      dx += part;
    };
    back(wq_, g.dq);
    back(wk_, g.dk);
    back(wv_, g.dv);
    return dx;
  }

  xattn::nn::linear<T>& q_proj() noexcept { return wq_; }
  xattn::nn::linear<T>& k_proj() noexcept { return wk_; }
  xattn::nn::linear<T>& v_proj() noexcept { return wv_; }
  xattn::nn::linear<T>& o_proj() noexcept { return wo_; }
  /// The sink logits (heads), -inf without sinks; set them in place.
  xt::xtensor<T, 1>& sink_logits() noexcept { return sinks_; }
  const xt::xtensor<T, 1>& sink_grad() const noexcept { return sink_grad_; }
  void zero_grad() {
    for (xattn::nn::linear<T>* w : {&wq_, &wk_, &wv_, &wo_}) w->zero_grad();
    sink_grad_ = xt::zeros<T>({o_.heads});
  }

 private:
  /// The window's left reach: keys i - window < j <= i.
  std::int64_t left() const noexcept { return o_.window == xattn::unbounded ? xattn::unbounded : o_.window - 1; }

  static xt::xtensor<T, 3> project(const xattn::nn::linear<T>& w, const xt::xtensor<T, 3>& x) {
    xt::xtensor<T, 3> y = xt::xtensor<T, 3>::from_shape({x.shape()[0], x.shape()[1], w.out_features()});
    w.apply(x.data(), x.shape()[0] * x.shape()[1], x.shape()[2], y.data(), w.out_features());
    return y;
  }

  decoder_attention_options o_;
  xattn::nn::linear<T> wq_, wk_, wv_, wo_;
  xt::xtensor<T, 1> sinks_, sink_grad_ = xt::zeros<T>({o_.heads});
  xt::xtensor<T, 3> x_, q_, k_, v_;
  xattn::partial_attention<xt::xtensor<T, 3>, xt::xtensor<T, 3>> attended_;
};

}  // namespace dsl
