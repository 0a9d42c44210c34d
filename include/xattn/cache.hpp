#pragma once
// Key/value caches for decoding and serving: kv_cache<K[, V]> of float, bfloat16, float16 or
// int8 pages.
#include "cache/kv_cache.hpp"
