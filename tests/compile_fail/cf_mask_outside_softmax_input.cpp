// softcap applied to an already masked score: masks must come last.
#include <xattn/xattn.hpp>
int main() {
  xt::xtensor<float, 3> q = xt::ones<float>({1, 2, 2});
  auto Q = xattn::ref(q);
  auto out = xattn::eval(xattn::softmax(xattn::softcap(xattn::mask(Q * xattn::trans(Q), xattn::causal()), 2.0)) * Q);
  return int(out.size());
}
