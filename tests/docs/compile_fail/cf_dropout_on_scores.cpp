// docs/grammar.md quotes the marked lines as an expression that must not compile;
// tests/docs/CMakeLists.txt builds this file and requires the diagnostic.
#include <xattn/xattn.hpp>

int main() {
  using namespace xattn;
  xt::xtensor<float, 3> q = xt::ones<float>({1, 4, 8}), k = q, v = q;
  auto Q = ref(q), K = ref(k), V = ref(v);
  // [snippet cf_dropout_on_scores]
  auto out = eval(dropout(mask(Q * trans(K), causal()), 0.1f, 42) * V);  // dropout takes softmax(...)
  // [end cf_dropout_on_scores]
  (void)out;
  return 0;
}
