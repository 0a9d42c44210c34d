#pragma once
// d2l's AdditiveAttention(key_size, query_size, num_hiddens, dropout):
//   score(q, k) = w_v · tanh(W_q q + W_k k), W_q (h, query_size), W_k (h, key_size), w_v (1, h),
// no biases, evaluated by score(additive{W_q, W_k, w_v}, Q, K) in the fused pass (d2l's
// (batch, queries, kv, h) feature tensor is never built). Parameters start uniform(±1/sqrt(fan_in))
// as PyTorch's Linear does, drawn from `seed` (seeding.hpp), and can be replaced. backward(d_out)
// adds d_W_q, d_W_k, d_w_v to the layers' weight_grad() (one fused backward, policy/additive.hpp).
#include "d2l_module.hpp"
#include "linear.hpp"

namespace xattn::nn {

template <class T = float>
class additive_attention : public d2l_module<T> {
 public:
  additive_attention(std::size_t key_size, std::size_t query_size, std::size_t num_hiddens, float dropout = 0.0f,
                     std::uint64_t seed = 0)
      : d2l_module<T>("additive_attention", dropout, seed) {
    if (key_size == 0 || query_size == 0 || num_hiddens == 0)
      xattn::fail("additive_attention: key_size (", key_size, "), query_size (", query_size, ") and num_hiddens (",
                  num_hiddens, ") must be > 0");
    w_q_ = linear<T>(query_size, num_hiddens, false, seed, 0, "additive_attention.W_q");
    w_k_ = linear<T>(key_size, num_hiddens, false, seed, 1, "additive_attention.W_k");
    w_v_ = linear<T>(num_hiddens, 1, false, seed, 2, "additive_attention.w_v");
  }

  /// W_q (num_hiddens, query_size), W_k (num_hiddens, key_size), w_v (1, num_hiddens).
  const linear<T>& w_q() const noexcept { return w_q_; }
  const linear<T>& w_k() const noexcept { return w_k_; }
  const linear<T>& w_v() const noexcept { return w_v_; }

  /// Resets the three layers' accumulated gradients (PyTorch's zero_grad()).
  void zero_grad() {
    w_q_.zero_grad();
    w_k_.zero_grad();
    w_v_.zero_grad();
  }

  /// Replace the parameters; w_v may be given as (num_hiddens) or (1, num_hiddens).
  template <class Wq, class Wk, class Wv>
  void set_weights(const Wq& w_q, const Wk& w_k, const Wv& w_v) {
    linear<T> q = w_q_, k = w_k_, v = w_v_;  // all or nothing
    q.set_weight(w_q);
    k.set_weight(w_k);
    if (w_v.dimension() == 1 && w_v.shape()[0] == v.in_features()) {
      auto row = xt::xtensor<T, 2>::from_shape({1, v.in_features()});
      std::copy(w_v.begin(), w_v.end(), row.begin());
      v.set_weight(row);
    } else {
      v.set_weight(w_v);
    }
    w_q_ = std::move(q);
    w_k_ = std::move(k);
    w_v_ = std::move(v);
  }

  template <class Q, class K, class V, class Lens = none_t>
  xt::xtensor<T, 3> forward(const Q& queries, const K& keys, const V& values, const Lens& valid_lens = none,
                            bool training = false) {
    static_assert(detail::tensor_inputs<Q, K, V>,
                  "xattn::nn: d2l modules take tensors (batch, seq, size), not attention expressions such as "
                  "rope(...); for rotary embeddings or sinks write the expression, or use dsl::decoder_attention");
    const char* who = "additive_attention.forward";
    detail::require_d2l_operand<T>(queries, who, "queries", "(batch, queries, query_size)");
    detail::require_d2l_operand<T>(keys, who, "keys", "(batch, kv, key_size)");
    detail::require_d2l_operand<T>(values, who, "values", "(batch, kv, dv)");
    auto in = std::make_shared<const std::array<xt::xtensor<T, 3>, 3>>(
        std::array<xt::xtensor<T, 3>, 3>{queries, keys, values});
    const additive policy{w_q_.weight(), w_k_.weight(), w_v_.weight()};
    return this->run([in, policy] { return score(policy, ref((*in)[0]), ref((*in)[1])); }, valid_lens,
                     [in] { return ref((*in)[2]); }, training,
                     [](d2l_module<T>& self, const additive_gradients& g) {
                       auto& m = static_cast<additive_attention&>(self);
                       m.w_q_.accumulate_grad(g.d_w_q);
                       m.w_k_.accumulate_grad(g.d_w_k);
                       m.w_v_.accumulate_grad(g.d_w_v);
                     });
  }

 private:
  linear<T> w_q_, w_k_, w_v_;
};

}  // namespace xattn::nn
