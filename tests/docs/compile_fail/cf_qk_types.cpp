// docs/grammar.md quotes the marked lines as an expression that must not compile;
// tests/docs/CMakeLists.txt builds this file and requires the diagnostic.
#include <xattn/xattn.hpp>

int main() {
  using namespace xattn;
  xt::xtensor<float, 3> q = xt::ones<float>({1, 4, 8}), k = q, v = q;
  xt::xtensor<double, 3> kd = xt::ones<double>({1, 4, 8});
  auto Kd = xattn::ref(kd);
  auto Q = ref(q), K = ref(k), V = ref(v);
  // [snippet cf_qk_types]
  auto out = eval(softmax(Q * trans(Kd)) * V);  // Q float, K double
  // [end cf_qk_types]
  (void)out;
  return 0;
}
