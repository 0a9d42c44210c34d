#pragma once
// FlexAttention behind the C interface: what the Python package's xattn.flex compiles around the
// score and mask functions it traced. One expression per element type:
//   softmax(mask(modify(Q K^T * scale, score_mod), block_mask(kinds, block, mask_mod))) * V
// with either part left out when the caller gave none. Captured tensors reach the generated code
// as `captured` views (read in place, any strides, clamped indices) or, when they require grad,
// as `table`s of learnables whose gradients the backward returns in their order.
#include "backward.hpp"
#include "forward.hpp"
#include "status.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <tuple>
#include <type_traits>
#include <vector>

namespace xattn::c_api::flex {

/// Index i on an axis of n: negative counts from the end (Python's), then clamped into [0, n): the
/// tracer proved the indices in range before the call, so the clamp only keeps a wrong direct
/// caller from reading outside the tensor.
inline std::int64_t axis_index(std::int64_t i, std::int64_t n) noexcept {
  return std::clamp<std::int64_t>(i < 0 ? i + n : i, 0, n - 1);
}

/// A captured tensor read in place (E: double or int64_t, as the caller converted it).
template <class E>
struct captured {
  const E* data = nullptr;
  std::array<std::int64_t, XATTN_MAX_RANK> shape{}, strides{};

  template <class... I>
  E operator()(I... index) const noexcept {
    std::ptrdiff_t at = 0;
    std::size_t a = 0;
    ((at += std::ptrdiff_t(axis_index(index, shape[a])) * strides[a], ++a), ...);
    return data[at];
  }
};

/// A captured tensor that requires grad: its values as learnables, row-major.
struct table {
  std::vector<learnable<double>> values;
  std::array<std::int64_t, XATTN_MAX_RANK> shape{}, strides{};

  template <class... I>
  const learnable<double>& operator()(I... i) const noexcept {
    return values[index(i...)];
  }
  /// The entry's position in values (its gradient's slot within this table).
  template <class... I>
  std::size_t index(I... i) const noexcept {
    std::size_t at = 0, a = 0;
    ((at += std::size_t(axis_index(i, shape[a])) * std::size_t(strides[a]), ++a), ...);
    return at;
  }
};

/// The capture at `view` as E: the caller converted it (double for floats, int64 for integers).
template <class E>
captured<E> capture(const xattn_tensor& view) {
  captured<E> c;
  c.data = static_cast<const E*>(view.data);
  for (int a = 0; a < view.rank; ++a) c.shape[a] = view.shape[a], c.strides[a] = view.strides[a];
  return c;
}

/// The learnable capture at `view` (float64), copied; values advances past it.
inline table learn(const xattn_tensor& view) {
  table t;
  std::int64_t n = 1;
  for (int a = view.rank; a-- > 0;) t.shape[a] = view.shape[a], t.strides[a] = n, n *= view.shape[a];
  t.values.resize(std::size_t(n));
  const auto* src = static_cast<const double*>(view.data);
  for (std::int64_t e = 0; e < n; ++e) {
    std::ptrdiff_t at = 0, rest = e;
    for (int a = view.rank; a-- > 0;) at += (rest % view.shape[a]) * view.strides[a], rest /= view.shape[a];
    t.values[std::size_t(e)].value = src[at];
  }
  return t;
}

/// Python's floor division and modulo on integers (the tracer's `//` and `%`); x // 0 is 0, as
/// the tracer cannot prove a divisor nonzero.
inline std::int64_t floor_div(std::int64_t a, std::int64_t b) noexcept {
  if (b == 0) return 0;
  const std::int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline std::int64_t floor_mod(std::int64_t a, std::int64_t b) noexcept { return a - floor_div(a, b) * b; }

/// a ** b on integers, wrapping as int64 does in torch (b < 0: 0).
inline std::int64_t int_pow(std::int64_t a, std::int64_t b) noexcept {
  if (b < 0) return 0;
  std::uint64_t r = 1, x = std::uint64_t(a);
  for (auto e = std::uint64_t(b); e != 0; e >>= 1) {
    if (e & 1) r *= x;
    x *= x;
  }
  return std::int64_t(r);
}

/// .to(int64) of a double: toward zero; NaN 0 and the infinities the ends of int64 (a C++ cast
/// would be undefined there).
inline std::int64_t to_int(double x) noexcept {
  if (std::isnan(x)) return 0;
  if (x >= 9.2233720368547758e18) return std::numeric_limits<std::int64_t>::max();
  if (x <= -9.2233720368547758e18) return std::numeric_limits<std::int64_t>::min();
  return std::int64_t(x);
}

/// The generated pair of functions (Mod, Mask: void when absent) as one expression.
template <class Mod, class Mask>
struct builder {
  const Mod* mod;
  const block_mask_policy<Mask>* masks;

  template <class Q, class K, class V, class F>
  void operator()(const forward_args& a, const Q& q, const K& k, const V& v, F&& f) const {
    const auto scores = [&] {
      if constexpr (std::is_void_v<Mod>)
        return q * trans(k) * a.scale;
      else
        return modify(q * trans(k) * a.scale, *mod);
    }();
    if constexpr (std::is_void_v<Mask>)
      f(softmax(scores) * v);
    else
      f(softmax(mask(scores, *masks)) * v);
  }
};

/// The block table as the mask policy (nothing when Mask is void): kinds (B', H', nq, nk) uint8.
template <class Mask>
block_mask_policy<Mask> block_table(const xattn_tensor* kinds, const xattn_tensor* spans, std::int64_t q_block,
                                    std::int64_t kv_block, const Mask& mask) {
  // spans (B', H', Sq, 3): each row's first and past-last visible key, and 1 when those are all
  // it sees (the table's maker checked every row)
  block_mask_policy<Mask> m;
  if (kinds == nullptr || kinds->rank != 4 || kinds->dtype != XATTN_I64)
    fail("flex_attention: the block mask's kinds must be a 4-D XATTN_I64 table");
  auto table = std::make_shared<std::vector<std::uint8_t>>();
  for (int a = 0; a < 4; ++a) m.shape[std::size_t(a)] = std::size_t(kinds->shape[a]);
  const auto* src = static_cast<const std::int64_t*>(kinds->data);
  table->reserve(m.shape[0] * m.shape[1] * m.shape[2] * m.shape[3]);
  for (std::int64_t b = 0; b < kinds->shape[0]; ++b)
    for (std::int64_t h = 0; h < kinds->shape[1]; ++h)
      for (std::int64_t x = 0; x < kinds->shape[2]; ++x)
        for (std::int64_t y = 0; y < kinds->shape[3]; ++y) {
          const std::int64_t k =
              src[b * kinds->strides[0] + h * kinds->strides[1] + x * kinds->strides[2] + y * kinds->strides[3]];
          if (k < 0 || k > 2) fail("flex_attention: block_mask kinds hold ", k, "; 0, 1 or 2 only");
          table->push_back(std::uint8_t(k));
        }
  m.kinds = std::move(table);
  if (spans != nullptr) {
    if (spans->rank != 4 || spans->dtype != XATTN_I64 || spans->shape[0] != kinds->shape[0] ||
        spans->shape[1] != kinds->shape[1] || spans->shape[3] != 3)
      fail("flex_attention: the block mask's row spans must be (B', H', Sq, 3) XATTN_I64 beside kinds ",
           shape_of(*kinds));
    m.rows_are_spans = true;
    auto rows = std::make_shared<std::vector<std::pair<std::int64_t, std::int64_t>>>();
    const auto* s = static_cast<const std::int64_t*>(spans->data);
    for (std::int64_t b = 0; b < spans->shape[0]; ++b)
      for (std::int64_t h = 0; h < spans->shape[1]; ++h)
        for (std::int64_t i = 0; i < spans->shape[2]; ++i) {
          const std::int64_t at = b * spans->strides[0] + h * spans->strides[1] + i * spans->strides[2];
          rows->emplace_back(s[at], s[at + spans->strides[3]]);
          m.rows_are_spans = m.rows_are_spans && s[at + 2 * spans->strides[3]] == 1;
        }
    m.row_spans = std::move(rows);
  }
  if (q_block <= 0 || kv_block <= 0)
    fail("flex_attention: BLOCK_SIZE must be positive, not (", q_block, ", ", kv_block, ")");
  m.q_block = std::size_t(q_block);
  m.kv_block = std::size_t(kv_block);
  m.f = mask;
  return m;
}

template <class T>
constexpr xattn_dtype acc_dtype() {
  return std::is_same_v<T, double> ? XATTN_F64 : XATTN_F32;
}

/// The forward of the generated functions, on inputs of any dtype whose accumulator is T.
template <class Mod, class Mask, class T>
void forward(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v, const xattn_attention_desc* desc,
             xattn_tensor* out, xattn_tensor* lse, const Mod* mod, const block_mask_policy<Mask>* masks) {
  const forward_args a = forward_arguments(q, k, v, desc, out, lse, "flex_attention");
  if ((a.dtype == XATTN_F64) != std::is_same_v<T, double>)
    fail("flex_attention: this kernel was compiled for ", dtype_name(acc_dtype<T>()), " accumulation, not ",
         dtype_name(a.dtype), " inputs");
  forward_in_acc_with<T>(a, builder<Mod, Mask>{mod, masks});
}

/// The backward; d_tables (the tables' entries in order, float64) receives their gradients.
template <class Mod, class Mask, class T>
void backward(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v, const xattn_attention_desc* desc,
              const xattn_tensor* out, const xattn_tensor* lse, const xattn_tensor* d_out, xattn_tensor* dq,
              xattn_tensor* dk, xattn_tensor* dv, const Mod* mod, const block_mask_policy<Mask>* masks,
              double* d_tables) {
  const backward_args a = backward_arguments(q, k, v, desc, out, lse, d_out, dq, dk, dv, nullptr, nullptr);
  backward_with<T>(a, builder<Mod, Mask>{mod, masks}, [&](const auto& g) {
    if constexpr (!std::is_void_v<Mod>)
      if constexpr (declares_learnables<Mod>)
        for (std::size_t n = 0; n < g.dmodify.front().size(); ++n) d_tables[n] = g.dmodify.front()[n];
  });
}

}  // namespace xattn::c_api::flex
