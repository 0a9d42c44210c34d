#pragma once
// What a cache page stores per element type T: cache_format<T>. A format is one specialization:
// plain formats (float, bfloat16, float16) store rows as they are; a quantized format stores
// codes with one float scale per `group` features of a row and says
//   code                      the stored element (T itself)
//   name                      how explain names it
//   format                    its name in tile operations (explain's qk_direct[f8_e4m3])
//   quantize(x, xs, n, out)   n <= group values x (xs apart) to codes out[0, n); returns the scale
//   value(code, scale)        a code's value
//   widens<A>, batch<A>(p, s) a batch of A decoded in registers (when widens<A>)
// and optionally row(codes, scales, col, layout), a row handle of its own layout (int8's and
// q4's keys), which names its format; otherwise its rows are kernel::scaled_row<cache_format<T>>,
// one after the other, and `format` names it. A format packing several features in a code (4
// bits) says features_per_code, and reads a feature from its row's codes instead: value_at(row,
// i, s) and batch<A>(row, col, s), and where it quantizes per token code_index(i) (the code
// holding feature i) and feature_value(code, i, s); its quantize writes a group's group /
// features_per_code codes. A format quantizing per channel over a page's rows (per_channel:
// KIVI's keys) has no per-row scales: it says parameters(dim), the floats of a page's
// parameters, quantize_page(x, n, dim, codes, row_codes, param) for a page's n float rows,
// value_at(row, i, param) and a row handle. The formats there are: cache/formats.hpp.
#include "../types.hpp"

#include <cstddef>
#include <type_traits>

namespace xattn {

/// Where a page's codes and scales of one head lie: feature d of row r at code(r, d) elements
/// from the rows' start, scale g of row r at scale(r, g) floats from the scales' start. Rows
/// stand one after the other (row_step = dim), except a cache's int8 and q4 keys, which
/// interleave their rows by pairs of codes (row_step 2, pair_stride 2 · page_size: a pair of codes
/// of 16 consecutive rows is 32 contiguous bytes; d counts codes) and store each group's scales of
/// all rows together (scale_stride page_size), the layout the integer score products read
/// (kernel/qk_q8.hpp, kernel/qk_q4.hpp).
struct row_layout {
  std::size_t row_step = 0, pair_stride = 2, scale_row_step = 0, scale_stride = 1;

  std::size_t code(std::size_t r, std::size_t d) const noexcept { return r * row_step + d / 2 * pair_stride + d % 2; }
  std::size_t scale(std::size_t r, std::size_t g) const noexcept { return r * scale_row_step + g * scale_stride; }
};

template <class T>
struct cache_format {
  static constexpr bool is_format = false;
  static constexpr bool quantized = false;
};

/// float, bfloat16 and float16 rows as they are (converted on write).
template <class T>
requires(is_element_v<T> && !std::is_same_v<T, double>) struct cache_format<T> {
  static constexpr bool is_format = true;
  static constexpr bool quantized = false;
};

/// Features a stored code of format F holds (1 unless it packs them, as 4-bit codes do).
template <class F>
inline constexpr std::size_t features_per_code = [] {
  if constexpr (requires { F::features_per_code; })
    return F::features_per_code;
  else
    return std::size_t(1);
}();

/// Feature i of a row of format F whose codes start at row, with its group's scale.
template <class F>
float code_value(const typename F::code* row, std::size_t i, float scale) noexcept {
  if constexpr (features_per_code<F> != 1)
    return F::value_at(row, i, scale);
  else
    return F::value(row[i], scale);
}

/// Whether T's pages are quantized per channel over their rows (each page's rows quantized together).
template <class T>
inline constexpr bool per_channel_v = [] {
  if constexpr (requires { cache_format<T>::per_channel; })
    return cache_format<T>::per_channel;
  else
    return false;
}();

template <class T>
inline constexpr bool is_cache_element_v = cache_format<T>::is_format;

/// Whether T is a quantized format's code: its rows are read through handles, dequantized.
template <class T>
inline constexpr bool is_quantized_v = cache_format<T>::quantized;

}  // namespace xattn
