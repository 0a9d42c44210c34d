#pragma once
// What d2l's two attention modules share: masked_softmax(scores, valid_lens) -> dropout -> bmm
// with the values, as one fused expression; optional kept weights (d2l's attention_weights);
// and the dropout key of each training call (seeding.hpp).
#include "../xattn.hpp"
#include "errors.hpp"
#include "none.hpp"
#include "seeding.hpp"
#include "threads.hpp"

#include <xtensor/xtensor.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace xattn::nn {

namespace detail {

/// d2l's masked_softmax as an expression; without lengths, the plain softmax.
template <class S, class Lens>
auto masked_softmax(S scores, const Lens& valid_lens) {
  if constexpr (is_none_v<Lens>)
    return softmax(std::move(scores));
  else if constexpr (std::is_same_v<Lens, lengths_mask>)
    return softmax(mask(std::move(scores), valid_lens));
  else
    return softmax(mask(std::move(scores), lengths(valid_lens)));
}

/// valid_lens as the module keeps it for backward: a lengths() mask holds its own copy.
template <class Lens>
auto owned_lengths(const Lens& valid_lens) {
  if constexpr (is_none_v<Lens>)
    return none;
  else
    return lengths(valid_lens);
}

/// d2l's modules read tensors; an attention expression (rope(...), heads(...)) is not one.
template <class... E>
inline constexpr bool tensor_inputs = (!xattn::expression<E> && ...);

template <class T, class E>
void require_d2l_operand(const E& x, const char* who, const char* what, const char* axes) {
  static_assert(std::is_same_v<std::remove_cv_t<typename E::value_type>, T>,
                "xattn::nn: inputs must have the module's element type T (float by default)");
  constexpr std::size_t rank = xt::get_rank<E>::value;
  static_assert(rank == SIZE_MAX || rank == 3, "xattn::nn: d2l modules take rank-3 (batch, seq, size) tensors");
  if (x.dimension() != 3) xattn::fail(who, ": ", what, " must be ", axes, ", got shape ", xattn::shape_str(x.shape()));
}

}  // namespace detail

/// The input gradients of a d2l module's backward.
template <class T>
struct input_gradients {
  xt::xtensor<T, 3> d_queries, d_keys, d_values;
};

/// State shared by d2l's DotProductAttention and AdditiveAttention. Not thread-safe per module
/// (forward advances the dropout counter and may store weights), like the PyTorch modules.
template <class T>
class d2l_module {
 public:
  float dropout() const noexcept { return p_; }
  /// When on, every forward also stores its attention weights (before dropout, as d2l's
  /// attention_weights): a second, materialised (batch, queries, keys) evaluation. Off by default.
  void keep_weights(bool on) noexcept { keep_ = on; }
  bool keeps_weights() const noexcept { return keep_; }
  /// The weights of the last forward made while keep_weights(true).
  const xt::xtensor<T, 3>& last_weights() const {
    if (!kept_)
      throw std::logic_error("xattn: " + name_ +
                             ".last_weights(): no weights kept; call keep_weights(true) before forward");
    return weights_;
  }
  /// Training call n (counting from 0, only calls with dropout > 0) drops with key call_seed(seed, n).
  const dropout_counter& dropout_calls() const noexcept { return counter_; }
  void rewind_dropout(std::uint64_t n = 0) noexcept { counter_.rewind(n); }
  /// Tiles and threads of the fused pass (default: threads.hpp).
  void set_schedule(const schedule& s) noexcept { sched_ = s; }

  /// Gradients of the last forward call's output given d_out (batch, queries, dv): with the same
  /// inputs and parameters (copied by forward) and the same dropout decisions. The parameters'
  /// gradients are added to their layers' weight_grad() (PyTorch's .grad) until zero_grad().
  input_gradients<T> backward(const xt::xtensor<T, 3>& d_out) {
    if (!backward_)
      throw std::logic_error("xattn: " + name_ +
                             ".backward(d_out): no forward call to differentiate; call forward first");
    return detail::labelled(name_ + ".backward", [&] { return backward_(d_out, *this); });
  }
  /// A module without parameters has nothing to reset (additive_attention hides this).
  void zero_grad() noexcept {}

 protected:
  d2l_module(std::string name, float dropout, std::uint64_t seed)
      : name_(std::move(name)), p_(dropout), counter_(seed) {
    if (!(dropout >= 0.0f && dropout < 1.0f)) xattn::fail(name_, ": dropout must be in [0, 1), got ", dropout);
  }

  /// masked_softmax(scores(), valid_lens) [-> dropout] -> · values(), in one fused pass. scores and
  /// values build the expressions from the module's own copies of the inputs, so that backward()
  /// can rebuild the very same expression (with the same dropout key) later; backward hands the
  /// scoring policy's parameter gradients to on_params(module, g.dscore).
  template <class ScoresFn, class Lens, class ValuesFn, class OnParams = void (*)(d2l_module&, const no_parameters&)>
  xt::xtensor<T, 3> run(
      ScoresFn scores, const Lens& valid_lens, ValuesFn values, bool training,
      OnParams on_params = [](d2l_module&, const no_parameters&) {}) {
    const std::string who = name_ + ".forward";
    const schedule sch = module_schedule(sched_);
    return detail::labelled(who, [&]() -> xt::xtensor<T, 3> {
      if (keep_) {
        weights_ = eval(detail::masked_softmax(scores(), valid_lens));
        kept_ = true;
      }
      const bool drop = training && p_ > 0;
      const std::uint64_t n = counter_.calls();
      const std::uint64_t key = drop ? counter_.next() : 0;
      const float p = drop ? p_ : 0.0f;
      auto lens = detail::owned_lengths(valid_lens);
      auto expr = [=] { return xattn::dropout(detail::masked_softmax(scores(), lens), p, key) * values(); };
      try {
        auto f =
            std::make_shared<const partial_attention<xt::xtensor<T, 3>, xt::xtensor<T, 2>>>(eval_with_lse(expr(), sch));
        backward_ = [expr, f, sch, on_params](const xt::xtensor<T, 3>& d_out, d2l_module& self) {
          auto g = grad(expr(), *f, d_out, sch);
          on_params(self, g.dscore);
          return input_gradients<T>{std::move(g.dq), std::move(g.dk), std::move(g.dv)};
        };
        return f->output;
      } catch (...) {
        counter_.rewind(n);  // a failed call does not use up a key
        throw;
      }
    });
  }

  std::string name_;

 private:
  float p_;
  dropout_counter counter_;
  bool keep_ = false, kept_ = false;
  xt::xtensor<T, 3> weights_;
  std::optional<schedule> sched_{};
  std::function<input_gradients<T>(const xt::xtensor<T, 3>&, d2l_module&)> backward_;
};

}  // namespace xattn::nn
