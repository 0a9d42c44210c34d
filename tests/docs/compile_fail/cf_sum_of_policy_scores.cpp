// docs/grammar.md quotes the marked lines as an expression that must not compile;
// tests/docs/CMakeLists.txt builds this file and requires the diagnostic.
#include <xattn/xattn.hpp>

int main() {
  using namespace xattn;
  xt::xtensor<float, 3> q = xt::ones<float>({1, 4, 8}), k = q, v = q;
  auto Q = ref(q), K = ref(k), V = ref(v);
  // [snippet cf_sum_of_policy_scores]
  auto s = Q * trans(K) + score(cosine{1.0}, Q, K);  // a sum adds products Q * trans(K) only
  // [end cf_sum_of_policy_scores]
  (void)s, (void)V;
  return 0;
}
