#pragma once
// The in-memory form of one ONNX conformance case: dtypes, tensors (values widened to double),
// attributes, tolerance; case_io.hpp reads it from disk.
#include <xattn/onnx/half.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace xattn::conformance {

struct case_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class dtype { f32, f16, f64, i64, i32, b8 };

inline std::optional<dtype> parse_dtype(std::string_view s) {
  if (s == "float32") return dtype::f32;
  if (s == "float16") return dtype::f16;
  if (s == "float64") return dtype::f64;
  if (s == "int64") return dtype::i64;
  if (s == "int32") return dtype::i32;
  if (s == "bool") return dtype::b8;
  return std::nullopt;
}

inline std::string_view dtype_name(dtype t) {
  switch (t) {
    case dtype::f32:
      return "float32";
    case dtype::f16:
      return "float16";
    case dtype::f64:
      return "float64";
    case dtype::i64:
      return "int64";
    case dtype::i32:
      return "int32";
    case dtype::b8:
      return "bool";
  }
  return "?";
}

inline std::size_t element_size(dtype t) {
  switch (t) {
    case dtype::f16:
      return 2;
    case dtype::f32:
    case dtype::i32:
      return 4;
    case dtype::f64:
    case dtype::i64:
      return 8;
    case dtype::b8:
      return 1;
  }
  return 0;
}

inline bool is_floating(dtype t) { return t == dtype::f32 || t == dtype::f16 || t == dtype::f64; }

inline std::string format_shape(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// One tensor file. Values are widened to double, which is exact for every supported
// dtype (int64 is checked to fit in 53 bits), so one representation serves all ops;
// `type` keeps the stored dtype because outputs must be produced in it.
struct tensor_blob {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;
  int slot = -1;  // operator slot: node_input_index / node_output_index
  std::vector<double> values;

  std::size_t numel() const { return values.size(); }
};

// ONNX keeps int and float attributes apart; float ones are float32, so users should
// cast `value` to float (the JSON holds the shortest decimal of that float32).
struct attribute {
  double value = 0;
  bool is_int = false;
};

struct tolerance {
  double rtol = 0;
  double atol = 0;
};

struct onnx_case {
  std::filesystem::path dir;
  std::string name;
  std::string op_type;
  int opset = 0;
  std::map<std::string, attribute> attributes;  // only explicitly set ones
  std::vector<std::string> node_inputs;         // by slot; "" = omitted optional input
  std::vector<std::string> node_outputs;        // by slot; "" = output not requested
  std::vector<tensor_blob> inputs;
  std::vector<tensor_blob> outputs;  // expected values
  tolerance tol;

  const tensor_blob* input(int slot) const { return find(inputs, slot); }
  const tensor_blob* output(int slot) const { return find(outputs, slot); }
  bool output_requested(int slot) const {
    return slot >= 0 && static_cast<std::size_t>(slot) < node_outputs.size() &&
           !node_outputs[static_cast<std::size_t>(slot)].empty();
  }
  std::optional<attribute> attr(const std::string& key) const {
    auto it = attributes.find(key);
    return it == attributes.end() ? std::nullopt : std::optional<attribute>(it->second);
  }

 private:
  static const tensor_blob* find(const std::vector<tensor_blob>& v, int slot) {
    for (const auto& t : v)
      if (t.slot == slot) return &t;
    return nullptr;
  }
};

}  // namespace xattn::conformance
