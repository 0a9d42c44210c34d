// A policy whose parameters() lists plain doubles: grad() could not differentiate them and would
// return no gradient for them, so it says what parameters() must return instead.
#include <xattn/xattn.hpp>

#include <span>
#include <tuple>

struct scaled_product {
  double tau = 0.5;
  template <class T>
  T operator()(std::span<const T> q, std::span<const T> k) const {
    return q[0] * k[0] / T(tau);
  }
  auto parameters() const { return std::tie(tau); }
};

int main() {
  xt::xtensor<float, 4> q = xt::zeros<float>({1, 1, 4, 8}), k = q, v = q;
  const auto e = xattn::softmax(xattn::score(scaled_product{}, xattn::ref(q), xattn::ref(k))) * xattn::ref(v);
  const auto f = xattn::eval_with_lse(e);
  auto g = xattn::grad(e, f, f.output);
  (void)g;
}
