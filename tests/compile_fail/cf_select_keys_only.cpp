// select(K, idx) with V not selected: the weights are over k columns, V has Skv rows.
#include <xattn/xattn.hpp>

int main() {
  using namespace xattn;
  xt::xtensor<float, 4> q = xt::zeros<float>({1, 2, 3, 8}), k = xt::zeros<float>({1, 2, 20, 8}), v = k;
  xt::xtensor<std::int32_t, 4> idx = xt::zeros<std::int32_t>({1, 2, 3, 4});
  auto out = eval(softmax(ref(q) * trans(select(ref(k), idx))) * ref(v));
  (void)out;
}
