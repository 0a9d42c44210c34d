// A lengths tensor passed where a mask policy belongs (lengths(lens) was meant).
#include <xattn/xattn.hpp>
int main() {
  xt::xtensor<float, 3> q = xt::ones<float>({1, 2, 2});
  xt::xtensor<int, 1> lens = {1};
  auto Q = xattn::ref(q);
  auto out = xattn::eval(xattn::softmax(xattn::mask(Q * xattn::trans(Q), lens)) * Q);
  return int(out.size());
}
