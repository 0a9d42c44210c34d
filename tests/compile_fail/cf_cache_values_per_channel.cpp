// Values quantized per channel (q4c is for keys: KIVI quantizes values per token).
#include <xattn/cache.hpp>

int main() {
  xattn::kv_cache<xattn::q4c, xattn::q4c> cache({.kv_heads = 1, .head_dim = 32, .page_size = 4, .max_tokens = 16});
  (void)cache;
}
