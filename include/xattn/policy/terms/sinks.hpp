#pragma once
// sinks(t): learnable attention sinks (gpt-oss; "softmax off by one"). Each query head h has one
// logit t[h] that joins every row's normaliser as a key that is always visible and holds no value:
// weight_j = e^{s_j} / (e^{t_h} + Σ_k e^{s_k}). A row that sees no key puts all its weight on the
// sink and outputs 0. A softmax term (term.hpp) whose gradient is summed per head.
#include "../../error.hpp"
#include "../broadcast.hpp"
#include "term.hpp"

#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

namespace xattn {

/// One sink logit per query head, read from the user's tensor when evaluated (a view, as terminals
/// are: a training loop may update t in place between calls).
template <class T>
struct sink_logits {
  nd_ref<T> tensor;

  /// The sink of query head h (-inf: that head has none).
  double at(std::size_t h) const noexcept { return double(tensor.data[std::ptrdiff_t(h) * tensor.strides[0]]); }
  double logit(std::size_t, std::size_t h) const noexcept { return at(h); }

  void check(const problem& pr) const {
    if (tensor.shape.size() != 1 || tensor.shape[0] != pr.q_heads)
      fail("softmax(scores, sinks(t)): t has shape ", shape_str(tensor.shape), " but the expression has ", pr.q_heads,
           " query heads: t must have shape (", pr.q_heads, ")");
    for (std::size_t h = 0; h < pr.q_heads; ++h)
      if (std::isnan(at(h)) || at(h) == std::numeric_limits<double>::infinity())
        fail("softmax(scores, sinks(t)): t[", h, "] is ", at(h), "; a sink logit must be finite (or -inf: no sink)");
  }

  static std::size_t parameters(const problem& pr) noexcept { return pr.q_heads; }
  void add_gradient(std::size_t, std::size_t h, double g, double* d) const noexcept { d[h] += g; }
  static std::string name() { return "sinks"; }
  static std::string describe() {
    return "one logit per query head: each row's running softmax starts from it (max t, sum 1)";
  }
};

/// sinks(t): t of shape (query heads), float or double; use as softmax(masked, sinks(t)).
template <class E>
auto sinks(E&& t) {
  using T = std::remove_cv_t<typename std::decay_t<E>::value_type>;
  static_assert(std::is_floating_point_v<T>, "xattn: sinks(t) needs a float or double tensor of shape (query heads)");
  return sink_logits<T>{make_nd_ref<T>(std::forward<E>(t))};
}

}  // namespace xattn
