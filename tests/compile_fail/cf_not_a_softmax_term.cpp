// A sink tensor passed where a softmax term belongs (sinks(t) was meant).
#include <xattn/xattn.hpp>
int main() {
  xt::xtensor<float, 4> q = xt::ones<float>({1, 2, 2, 2});
  xt::xtensor<float, 1> t = {0.0f, 0.0f};
  auto Q = xattn::ref(q);
  auto out = xattn::eval(xattn::softmax(Q * xattn::trans(Q), t) * Q);
  return int(out.size());
}
