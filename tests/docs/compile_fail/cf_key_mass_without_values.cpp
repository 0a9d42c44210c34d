// docs/grammar.md lists this as an expression that must not compile;
// tests/docs/CMakeLists.txt builds this file and requires the diagnostic.
#include <xattn/xattn.hpp>

int main() {
  using namespace xattn;
  xt::xtensor<float, 3> q = xt::ones<float>({1, 4, 8}), k = q;
  auto Q = ref(q), K = ref(k);
  auto r = eval_with_key_mass(softmax(Q * trans(K)));  // the mass comes with an attention: "* V"
  (void)r;
  return 0;
}
