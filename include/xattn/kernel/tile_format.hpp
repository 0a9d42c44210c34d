#pragma once
// A tile's format: how the elements an operation multiplies are held (float or double rows,
// 16-bit rows widened in registers, bfloat16 feature pairs for vdpbf16ps, a quantized format's
// codes and scales). A tile operation is an (operation, format) pair (trace.hpp), so explain and
// the trace name the format each product reads. A row handle names its own format (a member
// `format`), so a new format is named in the file that defines its rows.
#include "../types.hpp"
#include "row_handle.hpp"

#include <string_view>
#include <type_traits>

namespace xattn::kernel {

/// The format of rows of R (an element pointer, an element type, or a row handle).
template <class R>
constexpr std::string_view format_of() noexcept {
  using T = std::remove_cvref_t<std::remove_pointer_t<std::remove_cvref_t<R>>>;
  if constexpr (requires { T::format; })
    return T::format;
  else if constexpr (std::is_same_v<T, float>)
    return "float";
  else if constexpr (std::is_same_v<T, double>)
    return "double";
  else if constexpr (std::is_same_v<T, bfloat16>)
    return "bfloat16";
  else if constexpr (std::is_same_v<T, float16>)
    return "float16";
  else
    return "other";
}

}  // namespace xattn::kernel
