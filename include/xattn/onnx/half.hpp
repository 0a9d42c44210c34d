#pragma once
// The conformance data's float16 tensors are raw bit patterns: the exact conversions of
// xattn::float16, under the names the ONNX tools use.
#include "../float16.hpp"

namespace xattn::onnx {

using detail::double_to_half;
using detail::float_to_half;
using detail::half_to_float;
using detail::round_to_half;

}  // namespace xattn::onnx
