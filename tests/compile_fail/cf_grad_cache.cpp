// grad() through keys and values read from a kv_cache: caches are for inference.
#include <xattn/cache.hpp>
#include <xattn/xattn.hpp>

int main() {
  xattn::kv_cache<float> cache({.kv_heads = 1, .head_dim = 8, .page_size = 4, .max_tokens = 16});
  const auto s = cache.add_sequence();
  xt::xtensor<float, 3> rows = xt::zeros<float>({1, 2, 8});
  cache.append(s, rows, rows);
  xt::xtensor<float, 4> q = xt::zeros<float>({1, 1, 1, 8});
  const auto e = xattn::softmax(xattn::ref(q) * xattn::trans(cache.keys({s}))) * cache.values({s});
  const auto f = xattn::eval_with_lse(e);
  auto g = xattn::grad(e, f, f.output);
  (void)g;
}
