// A score modifier written for float only cannot run on dual numbers: grad() says what to change.
#include <xattn/xattn.hpp>

struct float_only {
  float operator()(float s, std::size_t, std::size_t, std::size_t, std::size_t) const { return s * 2; }
};

int main() {
  xt::xtensor<float, 4> q = xt::zeros<float>({1, 1, 4, 8}), k = q, v = q;
  const auto e =
      xattn::softmax(xattn::modify(xattn::ref(q) * xattn::trans(xattn::ref(k)), float_only{})) * xattn::ref(v);
  const auto f = xattn::eval_with_lse(e);
  auto g = xattn::grad(e, f, f.output);
  (void)g;
}
