#pragma once
// What the cache format tests share: keys with the outlier channels of LLM keys, and a decoding
// step's error over a cache's pages against the double reference over the unquantized rows.
#include "support/random.hpp"

#include <xattn/cache.hpp>
#include <xattn/xattn.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <cstddef>

namespace xattn::testing {

/// Keys (heads, n, dim >= 121) with a few channels 20 times the others on every token, as the
/// trained keys of LLMs have; `offset` is added to one of them (outlier channels sit away from zero).
inline void outlier_channels(xt::xtensor<float, 3>& k, float offset = 0) {
  for (std::size_t h = 0; h < k.shape()[0]; ++h)
    for (std::size_t t = 0; t < k.shape()[1]; ++t) {
      for (std::size_t d : {3, 50, 77, 120}) k(h, t, d) *= 20;
      k(h, t, 50) += offset;
    }
}

/// A decoding step over a kv_cache<K, V> (rotated or not) holding k and v, against the double
/// reference of the same step over the unquantized k and v.
template <class K, class V = K>
double step_error(const xt::xtensor<float, 4>& q, const xt::xtensor<float, 3>& k, const xt::xtensor<float, 3>& v,
                  bool rotate) {
  const std::size_t hkv = k.shape()[0], len = k.shape()[1], dim = k.shape()[2];
  kv_cache<K, V> c({.kv_heads = hkv, .head_dim = dim, .page_size = 16, .max_tokens = len, .rotate = rotate});
  const auto s = c.add_sequence();
  c.append(s, k, v);
  const float scale = 1 / std::sqrt(float(dim));
  const xt::xtensor<float, 4> o = eval(softmax(ref(q) * trans(c.keys({s})) * scale) * c.values({s}));
  const xt::xtensor<float, 4> k4 = xt::view(k, xt::newaxis()), v4 = xt::view(v, xt::newaxis());
  return max_abs_diff(o, reference(softmax(ref(q) * trans(ref(k4)) * scale) * ref(v4)).output);
}

}  // namespace xattn::testing
