// grad() of a weights expression (no V): the backward needs softmax(...) * V and its eval_with_lse.
#include <xattn/xattn.hpp>

int main() {
  xt::xtensor<float, 4> q = xt::zeros<float>({1, 1, 4, 8}), k = q;
  const auto e = xattn::softmax(xattn::ref(q) * xattn::trans(xattn::ref(k)));
  const auto w = xattn::eval(e);
  auto g = xattn::grad(e, w, w);
  (void)g;
}
