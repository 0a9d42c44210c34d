// A scoring policy written for float only, without analytic gradient members, cannot be
// differentiated: grad() says what to add.
#include <xattn/xattn.hpp>

#include <span>

struct float_only_policy {
  float operator()(std::span<const float> q, std::span<const float> k) const { return q[0] * k[0]; }
};

int main() {
  xt::xtensor<float, 4> q = xt::zeros<float>({1, 1, 4, 8}), k = q, v = q;
  const auto e = xattn::softmax(xattn::score(float_only_policy{}, xattn::ref(q), xattn::ref(k))) * xattn::ref(v);
  const auto f = xattn::eval_with_lse(e);
  auto g = xattn::grad(e, f, f.output);
  (void)g;
}
