#pragma once
// Runs one loaded case: binds its tensors by operator slot to the matching xattn::onnx
// entry point and returns the requested outputs, already stored in their expected
// dtype. Behaviour comes only from case.json and the data, never from the case name.

#include <xattn/onnx/softmax.hpp>
#include "case_io.hpp"
#include "compare.hpp"

#include <xattn/onnx/attention.hpp>

#include <xtensor/xarray.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace xattn::conformance {

// One produced output, in the same flat row-major form as tensor_blob.
struct actual_tensor {
  int slot = -1;
  std::vector<std::int64_t> shape;
  std::vector<double> values;
};

namespace detail {

template <class T>
xt::xarray<T> to_xarray(const tensor_blob& b) {
  xt::xarray<T> a(std::vector<std::size_t>(b.shape.begin(), b.shape.end()));
  auto it = a.begin();  // row-major traversal, the order of the file
  for (double v : b.values) *it++ = static_cast<T>(v);
  return a;
}

template <class T>
actual_tensor from_xarray(int slot, const xt::xarray<T>& a) {
  actual_tensor t{slot, {a.shape().begin(), a.shape().end()}, {}};
  t.values.reserve(a.size());
  for (auto it = a.begin(); it != a.end(); ++it) t.values.push_back(static_cast<double>(*it));
  return t;
}

inline std::string slot_label(const onnx_case& c, int slot, const tensor_blob& b) {
  return c.op_type + " input slot " + std::to_string(slot) + " '" + b.name + "'";
}

inline const tensor_blob& float_input(const onnx_case& c, int slot) {
  const tensor_blob* b = c.input(slot);
  if (!is_floating(b->type))
    throw case_error("malformed case " + c.dir.string() + ": " + slot_label(c, slot, *b) +
                     " must be a float tensor, got " + std::string(dtype_name(b->type)));
  return *b;
}

template <class T>
std::optional<xt::xarray<T>> optional_input(const onnx_case& c, int slot) {
  if (!c.input(slot)) return std::nullopt;
  return to_xarray<T>(float_input(c, slot));
}

// Outputs are compared in their own dtype, so round once, from the widest value we have.
inline actual_tensor stored_as(const onnx_case& c, actual_tensor t) {
  const tensor_blob* expected = c.output(t.slot);
  if (expected) round_to_dtype(t.values, expected->type);
  return t;
}

inline std::vector<actual_tensor> run_softmax(const onnx_case& c) {
  const tensor_blob& x = float_input(c, 0);
  const auto axis = static_cast<std::int64_t>(c.attr("axis").value_or(attribute{-1, true}).value);
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  if (axis < -rank || axis >= rank)
    throw case_error("malformed case " + c.dir.string() + ": Softmax axis " + std::to_string(axis) +
                     " is out of range for input shape " + format_shape(x.shape));
  return {stored_as(c, from_xarray(0, onnx::softmax(to_xarray<double>(x), axis)))};
}

// Dtype checks that do not depend on the kernel, so a malformed case is reported as
// such even before the Attention implementation exists.
inline void check_attention_dtypes(const onnx_case& c) {
  for (int slot : {0, 1, 2, 4, 5})
    if (c.input(slot)) float_input(c, slot);
  if (const tensor_blob* mask = c.input(3); mask && mask->type != dtype::b8 && !is_floating(mask->type))
    // ONNX allows integer masks but gives them no meaning.
    throw case_error("malformed case " + c.dir.string() + ": " + slot_label(c, 3, *mask) + " has dtype " +
                     std::string(dtype_name(mask->type)) + "; only bool and float masks are defined");
  if (const tensor_blob* n = c.input(6); n && n->type != dtype::i64)
    throw case_error("malformed case " + c.dir.string() + ": " + slot_label(c, 6, *n) + " must be int64, got " +
                     std::string(dtype_name(n->type)));
  for (const auto& out : c.outputs)
    if (!is_floating(out.type))
      throw case_error("malformed case " + c.dir.string() + ": Attention output '" + out.name + "' has dtype " +
                       std::string(dtype_name(out.type)) + "; Attention outputs are float");
}

// T: the operands' type. float16 when Q, K, V (and the caches) are float16: read as stored,
// outputs rounded once from the kernel's float accumulation; float otherwise.
template <class T>
std::vector<actual_tensor> run_attention_as(const onnx_case& c) {
  onnx::attention_inputs<T> in;  // a float16 mask is a bias: widened to float
  in.q = to_xarray<T>(*c.input(0));
  in.k = to_xarray<T>(*c.input(1));
  in.v = to_xarray<T>(*c.input(2));
  if (const tensor_blob* mask = c.input(3)) {
    if (mask->type == dtype::b8)
      in.attn_mask_bool = to_xarray<bool>(*mask);
    else
      in.attn_mask_float = to_xarray<float>(*mask);
  }
  in.past_key = optional_input<T>(c, 4);
  in.past_value = optional_input<T>(c, 5);
  if (const tensor_blob* n = c.input(6)) in.nonpad_kv_seqlen = to_xarray<std::int64_t>(*n);

  const auto int_attr = [&](const char* key) -> std::optional<int> {
    if (auto a = c.attr(key)) return static_cast<int>(a->value);
    return std::nullopt;
  };
  const auto float_attr = [&](const char* key) -> std::optional<float> {
    if (auto a = c.attr(key)) return static_cast<float>(a->value);  // ONNX float attributes are float32
    return std::nullopt;
  };
  onnx::attention_attrs attrs;
  attrs.is_causal = int_attr("is_causal").value_or(0);
  attrs.q_num_heads = int_attr("q_num_heads");
  attrs.kv_num_heads = int_attr("kv_num_heads");
  attrs.qk_matmul_output_mode = int_attr("qk_matmul_output_mode").value_or(0);
  attrs.scale = float_attr("scale");
  attrs.softcap = float_attr("softcap").value_or(0.0f);
  attrs.softmax_precision = int_attr("softmax_precision");

  const bool want_present = c.output_requested(1) || c.output_requested(2);
  const bool want_qk = c.output_requested(3);
  const onnx::attention_outputs<T> out = onnx::attention(in, attrs, want_present, want_qk);

  // Slots: 0 Y, 1 present_key, 2 present_value, 3 qk_matmul_output.
  const xt::xarray<T>* by_slot[] = {&out.y, &out.present_key, &out.present_value, &out.qk_matmul_output};
  std::vector<actual_tensor> results;
  for (int slot = 0; slot < 4; ++slot)
    if (c.output_requested(slot)) results.push_back(stored_as(c, from_xarray(slot, *by_slot[slot])));
  return results;
}

inline std::vector<actual_tensor> run_attention(const onnx_case& c) {
  check_attention_dtypes(c);
  bool all_f16 = true;
  for (int slot : {0, 1, 2, 4, 5})
    if (const tensor_blob* b = c.input(slot)) all_f16 = all_f16 && b->type == dtype::f16;
  return all_f16 ? run_attention_as<float16>(c) : run_attention_as<float>(c);
}

}  // namespace detail

// Throws case_error when the case cannot be bound (wrong dtypes, bad axis); any other
// exception means the implementation itself failed on a valid case.
inline std::vector<actual_tensor> run_case(const onnx_case& c) {
  if (c.op_type == "Softmax") return detail::run_softmax(c);
  if (c.op_type == "Attention") return detail::run_attention(c);
  throw case_error("malformed case " + c.dir.string() + ": no runner for op_type " + c.op_type);
}

}  // namespace xattn::conformance
