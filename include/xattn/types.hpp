#pragma once
// Element types. An operand's *storage* type (what a tensor holds) is kept apart from the
// *accumulator* type the kernel computes in (ThunderKittens' rt<bf16> vs rt<float>): the kernel
// converts where operands enter a tile (queries gathered per task, keys packed into panels,
// values loaded per block) and where results leave it (the output rows).
#include "bfloat16.hpp"
#include "float16.hpp"

#include <type_traits>

namespace xattn {

/// The 16-bit operand types: storage only, computed in float.
template <class T>
inline constexpr bool is_16bit_v = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

/// Types an attention operand may hold.
template <class T>
inline constexpr bool is_element_v = std::is_same_v<T, float> || std::is_same_v<T, double> || is_16bit_v<T>;

template <class T>
concept element = is_element_v<std::remove_cv_t<T>>;

/// The type the kernel accumulates in for operands of these storage types: double if any is
/// double, float otherwise (16-bit operands included).
template <class... Ts>
using accumulator_t = std::conditional_t<(std::is_same_v<Ts, double> || ...), double, float>;

}  // namespace xattn
