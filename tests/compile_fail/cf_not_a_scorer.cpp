// A type without a score operator used as a scoring policy.
#include <xattn/xattn.hpp>
struct not_a_scorer {
  double temperature = 1;
};
int main() {
  xt::xtensor<float, 3> q = xt::ones<float>({1, 2, 2});
  auto Q = xattn::ref(q);
  auto out = xattn::eval(xattn::softmax(xattn::score(not_a_scorer{}, Q, Q)) * Q);
  return int(out.size());
}
