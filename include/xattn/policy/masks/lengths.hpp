#pragma once
// lengths(lens): key j is visible to query i of batch b iff j < lens[b] (lens of shape (B,)) or
// j < lens[b, i] (shape (B, Sq)). By default masked scores become -1e6 exactly as d2l's
// masked_softmax does, so a row with length 0 is uniform; masked_rows::zero excludes them instead
// (ONNX / SDPA / FlexAttention): such a row gets weight 0 everywhere and a zero output.
#include "../../error.hpp"
#include "../problem.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

namespace xattn {

enum class masked_rows { uniform, zero };

struct lengths_mask {
  std::vector<std::int64_t> lens;
  std::vector<std::size_t> shape;  // (B) or (B, Sq)
  double fill_value = -1e6;
  std::size_t q_len = 0;  // set by bind

  std::int64_t len(std::size_t b, std::size_t i) const noexcept {
    return shape.size() == 1 ? lens[b] : lens[b * q_len + i];
  }
  bool visible(std::size_t b, std::size_t, std::size_t i, std::size_t j) const noexcept {
    return std::int64_t(j) < len(b, i);
  }
  block classify(std::size_t b, std::size_t, std::size_t i0, std::size_t i1, std::size_t j0, std::size_t j1) const {
    std::int64_t lo = len(b, i0), hi = lo;
    for (std::size_t i = i0 + 1; i < i1 && shape.size() == 2; ++i) {
      lo = std::min(lo, len(b, i));
      hi = std::max(hi, len(b, i));
    }
    if (std::int64_t(j1) <= lo) return block::visible;
    if (std::int64_t(j0) >= hi) return block::hidden;
    return block::partial;
  }
  double fill() const noexcept { return fill_value; }
  std::pair<std::int64_t, std::int64_t> row_span(std::size_t b, std::size_t, std::size_t i) const noexcept {
    return {0, len(b, i)};
  }

  lengths_mask bind(const problem& pr) const {
    const bool one_d = shape.size() == 1 && shape[0] == pr.batch;
    const bool two_d = shape.size() == 2 && shape[0] == pr.batch && shape[1] == pr.q_len;
    if (!one_d && !two_d)
      fail("lengths(lens): lens has shape ", shape_str(shape), " but must be (", pr.batch, ") [batch] or (", pr.batch,
           ",", pr.q_len, ") [batch, queries] for scores ", shape_str(pr.score_shape()));
    for (std::size_t n = 0; n < lens.size(); ++n) {
      if (lens[n] < 0 || std::uint64_t(lens[n]) > pr.kv_len)
        fail("lengths(lens): lens", shape.size() == 1 ? "[" : "[flat ", n, "] = ", lens[n], " is outside [0, ",
             pr.kv_len, "] (the number of keys); lens shape ", shape_str(shape));
    }
    lengths_mask b = *this;
    b.q_len = pr.q_len;
    return b;
  }
};

/// lengths(lens [, masked_rows]): valid lengths of shape (batch,) or (batch, queries), any integer type.
template <class E>
lengths_mask lengths(const E& lens, masked_rows rows = masked_rows::uniform) {
  static_assert(std::is_integral_v<typename E::value_type>, "xattn: lengths(lens) needs an integer tensor");
  lengths_mask m;
  m.shape.assign(lens.shape().begin(), lens.shape().end());
  if (m.shape.empty() || m.shape.size() > 2)
    fail("lengths(lens): lens must have rank 1 (batch) or 2 (batch, queries), got shape ", shape_str(m.shape));
  for (auto v : lens) m.lens.push_back(std::int64_t(v));
  m.fill_value = rows == masked_rows::uniform ? -1e6 : -std::numeric_limits<double>::infinity();
  return m;
}

}  // namespace xattn
