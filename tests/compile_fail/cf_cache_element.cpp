// A kv_cache of an element type that is no page format (double pages do not exist).
#include <xattn/cache.hpp>

int main() {
  xattn::kv_cache<double> cache({.kv_heads = 1, .head_dim = 8, .page_size = 4, .max_tokens = 16});
  (void)cache;
}
