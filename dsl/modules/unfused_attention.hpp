#pragma once
// Attention the usual unfused way, as a user without xattn writes it: materialise all scores
// S = Q Kᵀ / sqrt(d) for every (batch, head) with one sgemm, softmax each row in place, then
// O = P V with another sgemm. The (B, H, Sq, Skv) score tensor is what the fused pass avoids.
#include <cblas.h>
#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cmath>

namespace dsl {

/// q (B, H, Sq, D), k (B, H, Skv, D), v (B, H, Skv, Dv) -> (B, H, Sq, Dv), all contiguous.
inline xt::xtensor<float, 4> unfused_attention(const xt::xtensor<float, 4>& q, const xt::xtensor<float, 4>& k,
                                               const xt::xtensor<float, 4>& v) {
  const std::size_t B = q.shape()[0], H = q.shape()[1], sq = q.shape()[2], d = q.shape()[3];
  const std::size_t skv = k.shape()[2], dv = v.shape()[3];
  xt::xtensor<float, 4> scores = xt::xtensor<float, 4>::from_shape({B, H, sq, skv});
  xt::xtensor<float, 4> out = xt::xtensor<float, 4>::from_shape({B, H, sq, dv});
  const float scale = 1.0f / std::sqrt(float(d));
  for (std::size_t bh = 0; bh < B * H; ++bh) {
    float* s = scores.data() + bh * sq * skv;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(sq), int(skv), int(d), scale, q.data() + bh * sq * d,
                int(d), k.data() + bh * skv * d, int(d), 0.0f, s, int(skv));
    for (std::size_t i = 0; i < sq; ++i) {
      float* row = s + i * skv;
      const float m = *std::max_element(row, row + skv);
      float l = 0;
      for (std::size_t j = 0; j < skv; ++j) l += (row[j] = std::exp(row[j] - m));
      for (std::size_t j = 0; j < skv; ++j) row[j] /= l;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(sq), int(dv), int(skv), 1.0f, s, int(skv),
                v.data() + bh * skv * dv, int(dv), 0.0f, out.data() + bh * sq * dv, int(dv));
  }
  return out;
}

}  // namespace dsl
