// docs/grammar.md quotes the marked lines as an expression that must not compile;
// tests/docs/CMakeLists.txt builds this file and requires the diagnostic.
#include <xattn/xattn.hpp>

int main() {
  using namespace xattn;
  xt::xtensor<float, 3> q = xt::ones<float>({1, 4, 8}), k = q, v = q;
  auto Q = ref(q), K = ref(k), V = ref(v);
  // [snippet cf_lengths_float]
  auto m = lengths(xt::xtensor<float, 1>{4.0f});  // lengths are integers
  // [end cf_lengths_float]
  (void)m;
  return 0;
}
