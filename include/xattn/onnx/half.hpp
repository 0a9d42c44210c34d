#pragma once
// The conformance data's float16 tensors are raw bit patterns: the exact conversions of
// xattn::float16, under the names the ONNX tools use.
#include "../float16.hpp"

namespace xattn::onnx {

using xattn::double_to_half;
using xattn::float_to_half;
using xattn::half_to_float;
using xattn::round_to_half;

}  // namespace xattn::onnx
