// docs/grammar.md quotes the marked lines as an expression that must not compile;
// tests/docs/CMakeLists.txt builds this file and requires the diagnostic.
#include <xattn/xattn.hpp>

int main() {
  using namespace xattn;
  xt::xtensor<float, 3> q = xt::ones<float>({1, 4, 8}), k = q, v = q;
  xt::xtensor<float, 2> b = xt::zeros<float>({4, 4});
  auto Q = ref(q), K = ref(k), V = ref(v);
  // [snippet cf_bias_first]
  auto s = bias(b) + Q * trans(K);  // only scores + bias(t) is defined
  // [end cf_bias_first]
  (void)s;
  return 0;
}
