#pragma once
// Key/value caches for decoding and serving: kv_cache<K[, V]> of the page formats listed in
// cache/formats.hpp (float, bfloat16, float16 and quantized ones).
#include "cache/kv_cache.hpp"
