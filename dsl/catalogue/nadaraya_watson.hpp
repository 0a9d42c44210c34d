#pragma once
// d2l's Nadaraya-Watson kernel regression: predictions are attention over training points with
// Gaussian-kernel scores -(x - x_i)² / (2σ²). Inputs are (1, n, 1) tensors of positions and targets.
#include <xattn/xattn.hpp>

namespace dsl {

// [snippet nadaraya_watson]
template <class X, class XT, class YT>
auto nadaraya_watson(const X& x_query, const XT& x_train, const YT& y_train, double sigma) {
  using namespace xattn;
  auto q = ref(x_query), k = ref(x_train), v = ref(y_train);
  return eval(softmax(score(gaussian{sigma}, q, k)) * v);
}
// [end nadaraya_watson]

}  // namespace dsl
