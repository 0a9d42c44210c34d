// docs/grammar.md quotes the marked lines as an expression that must not compile;
// tests/docs/CMakeLists.txt builds this file and requires the diagnostic.
#include <xattn/xattn.hpp>

int main() {
  using namespace xattn;
  xt::xtensor<float, 3> q = xt::ones<float>({1, 4, 8}), k = q, v = q;
  auto Q = ref(q), K = ref(k), V = ref(v);
  // [snippet cf_scale_outside_mask]
  auto out = eval(softmax(mask(Q * trans(K), causal()) / 8.0f) * V);  // the scale must go inside mask(...)
  // [end cf_scale_outside_mask]
  (void)out;
  return 0;
}
