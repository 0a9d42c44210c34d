#pragma once
// equinox.nn.MultiheadAttention on the fused kernel:
//   multihead_attention mha({.num_heads = 4, .query_size = 64});
//   auto y = mha(query, key_, value);                 // (Sq, 64), (Skv, 64), (Skv, 64) -> (Sq, 64)
//   auto y = mha(query, key_, value, mask, {.key = 3}); // mask (4, Sq, Skv) or broadcastable; dropout key 3
// Inputs may also be batched, (B, S, size) -> (B, Sq, output_size). Each projection is one GEMM
// over all rows into a packed (rows, heads * size) buffer, which the attention reads in place
// with heads(x, H); the per-head attention is one fused pass; then one GEMM for the output.
// As in equinox, queries are scaled by 1/sqrt(qk_size), hidden logits become float's lowest
// (mha_mask.hpp) and dropout acts on the weights. Differences: a training call without a key
// takes the module's next one (seeding.hpp) where equinox raises; masks may be broadcastable
// rather than exactly (num_heads, Sq, Skv); kv_heads is an addition; process_heads is not offered.
// Threads: OpenMP in the fused pass, OpenBLAS in the GEMMs; run with OMP_WAIT_POLICY=passive
// (threads.hpp). backward(d_out) differentiates the last forward call (same inputs, weights, mask
// and dropout decisions): the output projection's GEMMs, one fused attention backward (grad), the
// three input projections' GEMMs; weight and bias gradients accumulate until zero_grad().
#include "../xattn.hpp"
#include "errors.hpp"
#include "linear.hpp"
#include "mha_mask.hpp"
#include "mha_options.hpp"
#include "none.hpp"
#include "rows.hpp"
#include "seeding.hpp"
#include "threads.hpp"

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

namespace xattn::nn {

namespace detail {

/// Results keep the query's rank (+ Extra); inputs of run-time rank give xt::xarray.
template <class T, std::size_t Rank, std::size_t Extra>
struct result_of_rank {
  static_assert(Rank == 2 || Rank == 3,
                "xattn::nn: query, key_ and value must have rank 2 (seq, size) or 3 (batch, seq, size)");
  using type = xt::xtensor<T, Rank + Extra>;
};
template <class T, std::size_t Extra>
struct result_of_rank<T, SIZE_MAX, Extra> {
  using type = xt::xarray<T>;
};

}  // namespace detail

/// Per-call arguments, as equinox's keyword arguments of __call__.
struct mha_call {
  std::optional<std::uint64_t> key{};  // dropout key of this call; unset: the module's next (seeding.hpp)
  std::optional<bool> inference{};     // overrides the module's inference flag for this call
};

/// The input gradients of multihead_attention::backward, each in its input's shape.
template <class T>
struct mha_gradients {
  xt::xarray<T> d_query, d_key, d_value;
};

template <class T = float>
class multihead_attention {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "xattn::nn: T must be float or double");

  template <class E, std::size_t Extra>
  using result_for = typename detail::result_of_rank<T, xt::get_rank<std::decay_t<E>>::value, Extra>::type;

 public:
  explicit multihead_attention(const mha_options& options) : cfg_(resolve(options)), counter_(cfg_.seed) {
    const auto& c = cfg_;
    // one Philox stream per projection, as equinox splits its key four ways
    query_proj_ =
        linear<T>(c.query_size, c.num_heads * c.qk_size, c.use_query_bias, c.seed, 0, "multihead_attention.query_proj");
    key_proj_ =
        linear<T>(c.key_size, c.kv_heads * c.qk_size, c.use_key_bias, c.seed, 1, "multihead_attention.key_proj");
    value_proj_ =
        linear<T>(c.value_size, c.kv_heads * c.vo_size, c.use_value_bias, c.seed, 2, "multihead_attention.value_proj");
    output_proj_ = linear<T>(c.num_heads * c.vo_size, c.output_size, c.use_output_bias, c.seed, 3,
                             "multihead_attention.output_proj");
  }

  const mha_config& config() const noexcept { return cfg_; }
  /// The projections (weight (out, in), bias (out)); set_weight / set_bias check the shapes.
  linear<T>& query_proj() noexcept { return query_proj_; }
  linear<T>& key_proj() noexcept { return key_proj_; }
  linear<T>& value_proj() noexcept { return value_proj_; }
  linear<T>& output_proj() noexcept { return output_proj_; }
  const linear<T>& query_proj() const noexcept { return query_proj_; }
  const linear<T>& key_proj() const noexcept { return key_proj_; }
  const linear<T>& value_proj() const noexcept { return value_proj_; }
  const linear<T>& output_proj() const noexcept { return output_proj_; }

  /// equinox.nn.inference_mode for this module.
  void set_inference(bool on) noexcept { cfg_.inference = on; }
  /// Calls that drop without an explicit key use call_seed(seed, n) for n = 0, 1, ...
  const dropout_counter& dropout_calls() const noexcept { return counter_; }
  void rewind_dropout(std::uint64_t n = 0) noexcept { counter_.rewind(n); }
  /// Tiles and threads of the fused pass (default: threads.hpp).
  void set_schedule(const schedule& s) noexcept { sched_ = s; }

  /// query (Sq, query_size), key_ (Skv, key_size), value (Skv, value_size) -> (Sq, output_size);
  /// or all batched (B, S, size) -> (B, Sq, output_size). mask: bool, True = attend, of shape
  /// (num_heads, Sq, Skv) [(B, num_heads, Sq, Skv) batched] or broadcastable to it, or none.
  template <class Q, class K, class V, class M = none_t>
  result_for<Q, 0> forward(const Q& query, const K& key_, const V& value, const M& mask = none,
                           const mha_call& call = {}) {
    const char* who = "multihead_attention.forward";
    const auto q = rows_of<T>(query, "multihead_attention.forward: query");
    const auto k = rows_of<T>(key_, "multihead_attention.forward: key_");
    const auto v = rows_of<T>(value, "multihead_attention.forward: value");
    check_qk(q, k, who);
    check_value(k, v, who);
    check_mask(mask, q, k, who);
    std::optional<std::uint64_t> drop_key{};
    if (cfg_.dropout_p > 0 && !call.inference.value_or(cfg_.inference))
      drop_key = call.key ? *call.key : counter_.next();

    auto st = std::make_shared<saved>();
    st->q = copy_rows(q), st->k = copy_rows(k), st->v = copy_rows(v);
    st->qp = project(query_proj_, q), st->kp = project(key_proj_, k), st->vp = project(value_proj_, v);
    st->shapes = {q.user_shape, k.user_shape, v.user_shape};
    st->out_shape = q.user_shape.size() == 3 ? std::vector<std::size_t>{q.batch, q.seq, cfg_.output_size}
                                             : std::vector<std::size_t>{q.seq, cfg_.output_size};
    detail::labelled(who, [&] { attend(st, mask, drop_key); });
    auto out = xattn::allocate<result_for<Q, 0>>(st->out_shape);
    output_proj_.apply(st->heads_out.data(), q.rows(), st->heads_out.shape()[2], out.data(), cfg_.output_size);
    saved_ = std::move(st);
    return out;
  }

  /// Gradients of the last forward call's output given d_out (in the output's shape): d_query,
  /// d_key, d_value in the inputs' shapes; the four projections' weight_grad() and bias_grad()
  /// grow by theirs. Before any forward: std::logic_error.
  mha_gradients<T> backward(const xt::xarray<T>& d_out) {
    const char* who = "multihead_attention.backward";
    if (!saved_)
      throw std::logic_error(std::string("xattn: ") + who +
                             "(d_out): no forward call to differentiate; call forward first");
    const saved& st = *saved_;
    const std::vector<std::size_t> got(d_out.shape().begin(), d_out.shape().end());
    if (got != st.out_shape)
      xattn::fail(who, ": d_out has shape ", xattn::shape_str(got), " but the last forward's output has shape ",
                  xattn::shape_str(st.out_shape));
    const std::size_t rows = st.heads_out.shape()[0] * st.heads_out.shape()[1], width = st.heads_out.shape()[2];
    xt::xtensor<T, 3> d_heads = xt::xtensor<T, 3>::from_shape(st.heads_out.shape());
    output_proj_.backward(st.heads_out.data(), rows, width, d_out.data(), cfg_.output_size, d_heads.data());
    const auto d_proj = detail::labelled(who, [&] { return st.attention_backward(d_heads); });
    mha_gradients<T> g;
    auto input_grad = [&](linear<T>& lin, const xt::xtensor<T, 3>& x, const xt::xtensor<T, 3>& dy,
                          const std::vector<std::size_t>& shape) {
      xt::xarray<T> dx = xt::xarray<T>::from_shape(shape);
      lin.backward(x.data(), x.shape()[0] * x.shape()[1], x.shape()[2], dy.data(), lin.out_features(), dx.data());
      return dx;
    };
    g.d_query = input_grad(query_proj_, st.q, d_proj[0], st.shapes[0]);
    g.d_key = input_grad(key_proj_, st.k, d_proj[1], st.shapes[1]);
    g.d_value = input_grad(value_proj_, st.v, d_proj[2], st.shapes[2]);
    return g;
  }

  /// Resets the four projections' accumulated gradients (PyTorch's zero_grad()).
  void zero_grad() {
    for (auto* lin : {&query_proj_, &key_proj_, &value_proj_, &output_proj_}) lin->zero_grad();
  }

  template <class Q, class K, class V, class M = none_t>
  result_for<Q, 0> operator()(const Q& query, const K& key_, const V& value, const M& mask = none,
                              const mha_call& call = {}) {
    return forward(query, key_, value, mask, call);
  }

  /// The attention weights before dropout (equinox's dot_product_attention_weights, per head):
  /// (num_heads, Sq, Skv), or (B, num_heads, Sq, Skv) for batched inputs. Materialised.
  template <class Q, class K, class M = none_t>
  result_for<Q, 1> weights(const Q& query, const K& key_, const M& mask = none) const {
    const char* who = "multihead_attention.weights";
    const auto q = rows_of<T>(query, "multihead_attention.weights: query");
    const auto k = rows_of<T>(key_, "multihead_attention.weights: key_");
    check_qk(q, k, who);
    check_mask(mask, q, k, who);
    const auto qp = project(query_proj_, q), kp = project(key_proj_, k);
    auto w = detail::labelled(who, [&] {  // (B, H, Sq, Skv)
      return with_mask(scores(qp, kp), mask, [](const auto& s) { return eval(softmax(s)); });
    });
    if constexpr (std::is_same_v<result_for<Q, 1>, decltype(w)>)
      if (q.user_shape.size() == 3) return w;
    std::vector<std::size_t> shape(w.shape().begin(), w.shape().end());
    if (q.user_shape.size() == 2) shape.erase(shape.begin());
    auto out = xattn::allocate<result_for<Q, 1>>(shape);
    std::copy(w.begin(), w.end(), out.begin());
    return out;
  }

 private:
  xt::xtensor<T, 3> project(const linear<T>& lin, const row_block<T>& x) const {
    auto y = xt::xtensor<T, 3>::from_shape({x.batch, x.seq, lin.out_features()});
    lin.apply(x.data, x.rows(), x.ld, y.data(), lin.out_features());
    return y;
  }

  auto scores(const xt::xtensor<T, 3>& qp, const xt::xtensor<T, 3>& kp) const {
    return heads(qp, cfg_.num_heads) * trans(heads(kp, cfg_.kv_heads)) / std::sqrt(double(cfg_.qk_size));
  }

  template <class S, class M, class F>
  static auto with_mask(const S& s, const M& m, F&& f) {
    if constexpr (is_none_v<M>)
      return f(s);
    else
      return f(xattn::mask(s, lowest_fill(m)));
  }

  /// What backward needs of a forward call.
  struct saved {
    xt::xtensor<T, 3> q, k, v, qp, kp, vp, heads_out;  // inputs as (B, S, size) rows, projections, attention output
    std::array<std::vector<std::size_t>, 3> shapes;    // of query, key_, value as given
    std::vector<std::size_t> out_shape;
    // d heads_out -> d qp, d kp, d vp (the fused backward of the call's own expression)
    std::function<std::array<xt::xtensor<T, 3>, 3>(const xt::xtensor<T, 3>&)> attention_backward;
  };

  static xt::xtensor<T, 3> copy_rows(const row_block<T>& x) {
    auto r = xt::xtensor<T, 3>::from_shape({x.batch, x.seq, x.width});
    for (std::size_t n = 0; n < x.rows(); ++n)
      std::copy(x.data + n * x.ld, x.data + n * x.ld + x.width, r.data() + n * x.width);
    return r;
  }

  /// st->heads_out (B, Sq, H * vo): per head softmax(q kᵀ / sqrt(qk) [masked]) [dropped] v, one
  /// fused pass; st->attention_backward differentiates it later (the mask is copied).
  template <class M>
  void attend(const std::shared_ptr<saved>& st, const M& m, std::optional<std::uint64_t> drop_key) const {
    const schedule sch = module_schedule(sched_);
    const std::size_t H = cfg_.num_heads, Hkv = cfg_.kv_heads;
    const double root = std::sqrt(double(cfg_.qk_size));  // as scores(): the same rounding
    const float p = drop_key ? cfg_.dropout_p : 0.0f;
    const std::uint64_t key = drop_key.value_or(0);
    auto mk = [&] {
      if constexpr (is_none_v<M>)
        return none;
      else
        return std::make_shared<const xt::xarray<bool>>(xt::cast<bool>(m));
    }();
    const saved* s = st.get();  // the closure lives in *st: a raw pointer, no ownership cycle
    auto expr = [s, H, Hkv, root, p, key, mk] {
      (void)mk;  // only its type is used without a mask
      auto sc = heads(s->qp, H) * trans(heads(s->kp, Hkv)) / root;
      auto w = [&] {
        if constexpr (is_none_v<decltype(mk)>)
          return softmax(sc);
        else
          return softmax(xattn::mask(sc, lowest_fill(*mk)));
      }();
      return xattn::dropout(w, p, key) * heads(s->vp, Hkv);
    };
    auto f = std::make_shared<const decltype(eval_with_lse(expr(), sch))>(eval_with_lse(expr(), sch));
    st->heads_out = f->output;
    st->attention_backward = [expr, f, sch](const xt::xtensor<T, 3>& d_heads) {
      auto g = grad(expr(), *f, d_heads, sch);
      return std::array<xt::xtensor<T, 3>, 3>{std::move(g.dq), std::move(g.dk), std::move(g.dv)};
    };
  }

  void check_qk(const row_block<T>& q, const row_block<T>& k, const char* who) const {
    using xattn::fail;
    using xattn::shape_str;
    if (q.user_shape.size() != k.user_shape.size())
      fail(who, ": query ", shape_str(q.user_shape), " and key_ ", shape_str(k.user_shape),
           " must both be unbatched (seq, size) or both batched (batch, seq, size)");
    if (q.width != cfg_.query_size)
      fail(who, ": query has shape ", shape_str(q.user_shape),
           " but its last axis must be query_size = ", cfg_.query_size);
    if (k.width != cfg_.key_size)
      fail(who, ": key_ has shape ", shape_str(k.user_shape), " but its last axis must be key_size = ", cfg_.key_size);
    if (q.batch != k.batch)
      fail(who, ": query ", shape_str(q.user_shape), " and key_ ", shape_str(k.user_shape),
           " have different batch sizes");
    if (k.seq == 0) fail(who, ": key_ has shape ", shape_str(k.user_shape), ": there are no keys to attend to");
  }

  void check_value(const row_block<T>& k, const row_block<T>& v, const char* who) const {
    using xattn::fail;
    using xattn::shape_str;
    if (v.user_shape.size() != k.user_shape.size() || v.batch != k.batch || v.seq != k.seq)
      fail(who, ": key_ ", shape_str(k.user_shape), " and value ", shape_str(v.user_shape),
           " must have the same rank, batch and sequence length");
    if (v.width != cfg_.value_size)
      fail(who, ": value has shape ", shape_str(v.user_shape),
           " but its last axis must be value_size = ", cfg_.value_size);
  }

  template <class M>
  void check_mask(const M& m, const row_block<T>& q, const row_block<T>& k, const char* who) const {
    if constexpr (!is_none_v<M>) {
      const std::vector<std::size_t> shape(m.shape().begin(), m.shape().end());
      if (q.user_shape.size() == 3)
        detail::check_mask_shape(shape, {q.batch, cfg_.num_heads, q.seq, k.seq}, who,
                                 "(batch, num_heads, q_seq, kv_seq)");
      else
        detail::check_mask_shape(shape, {cfg_.num_heads, q.seq, k.seq}, who, "(num_heads, q_seq, kv_seq)");
    }
  }

  mha_config cfg_;
  dropout_counter counter_;
  linear<T> query_proj_, key_proj_, value_proj_, output_proj_;
  std::optional<schedule> sched_{};
  std::shared_ptr<const saved> saved_;
};

}  // namespace xattn::nn
