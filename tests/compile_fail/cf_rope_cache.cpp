// rope() of a cache's keys: the cache stores them rotated instead (kv_cache_options::rope).
#include <xattn/cache.hpp>
#include <xattn/xattn.hpp>

int main() {
  xattn::kv_cache<float> cache({.kv_heads = 1, .head_dim = 8, .page_size = 4, .max_tokens = 16});
  const auto s = cache.add_sequence();
  xt::xtensor<float, 4> q = xt::zeros<float>({1, 1, 1, 8});
  const auto e = xattn::softmax(xattn::ref(q) * xattn::trans(xattn::rope(cache.keys({s}), 0))) * cache.values({s});
  (void)e;
}
