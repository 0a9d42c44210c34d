#pragma once
// Loader for one converted ONNX node-test case: a directory with case.json plus raw
// little-endian tensor files (format "onnx-node-test-plain/1", see
// tests/data/onnx/README.md). Anything malformed throws case_error, so a broken
// case can never be mistaken for a failing kernel.

#include "case_types.hpp"

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

namespace detail {

// What the loader needs to know about each operator it accepts. Attention-25 changes
// attributes and semantics, so only 23/24 are accepted; Softmax-13 is still current.
struct op_schema {
  int required_inputs;
  int max_inputs;
  int max_outputs;
  std::vector<std::pair<std::string_view, bool>> attrs;  // name, is_int
};

inline std::optional<op_schema> find_schema(std::string_view op_type, int opset) {
  if (op_type == "Softmax" && opset >= 13) return op_schema{1, 1, 1, {{"axis", true}}};
  if (op_type == "Attention" && (opset == 23 || opset == 24))
    return op_schema{3,
                     opset >= 24 ? 7 : 6,
                     4,
                     {{"is_causal", true},
                      {"q_num_heads", true},
                      {"kv_num_heads", true},
                      {"qk_matmul_output_mode", true},
                      {"scale", false},
                      {"softcap", false},
                      {"softmax_precision", true}}};
  return std::nullopt;
}

class case_reader {
 public:
  explicit case_reader(std::filesystem::path dir) : dir_(std::move(dir)) {}

  [[noreturn]] void fail(const std::string& problem) const {
    throw case_error("malformed case " + dir_.string() + ": " + problem);
  }

  onnx_case read() {
    const auto json_path = dir_ / "case.json";
    if (!std::filesystem::is_regular_file(json_path)) fail("missing case.json");
    nlohmann::json j;
    try {
      std::ifstream in(json_path);
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail(std::string("case.json is not valid JSON: ") + e.what());
    }
    if (!j.is_object()) fail("case.json: top level is not an object");

    onnx_case c;
    c.dir = dir_;
    const auto format = str(j, "format", "");
    if (format != "onnx-node-test-plain/1") fail("case.json: unsupported format '" + format + "'");
    c.name = str(j, "name", "");
    c.op_type = str(j, "op_type", "");
    if (const auto domain = str(j, "domain", ""); !domain.empty() && domain != "ai.onnx")
      fail("case.json: unsupported domain '" + domain + "'");
    c.opset = static_cast<int>(integer(j, "opset", ""));
    const auto schema = find_schema(c.op_type, c.opset);
    if (!schema) fail("case.json: unsupported operator " + c.op_type + " at opset " + std::to_string(c.opset));
    op_ = c.op_type + "-" + std::to_string(c.opset);

    read_attributes(j, *schema, c);
    c.node_inputs = names(j, "node_inputs");
    c.node_outputs = names(j, "node_outputs");
    if (c.node_inputs.size() > static_cast<std::size_t>(schema->max_inputs))
      fail("node_inputs has " + std::to_string(c.node_inputs.size()) + " slots, " + op_ + " takes at most " +
           std::to_string(schema->max_inputs));
    if (c.node_outputs.size() > static_cast<std::size_t>(schema->max_outputs))
      fail("node_outputs has " + std::to_string(c.node_outputs.size()) + " slots, " + op_ + " has at most " +
           std::to_string(schema->max_outputs));
    for (int s = 0; s < schema->required_inputs; ++s)
      if (static_cast<std::size_t>(s) >= c.node_inputs.size() || c.node_inputs[static_cast<std::size_t>(s)].empty())
        fail("required input slot " + std::to_string(s) + " of " + op_ + " is missing");
    if (c.node_outputs.empty() || c.node_outputs[0].empty()) fail("output slot 0 of " + op_ + " is not requested");

    c.inputs = tensors(j, "inputs", "graph_inputs", "node_input_index", c.node_inputs);
    c.outputs = tensors(j, "outputs", "graph_outputs", "node_output_index", c.node_outputs);
    c.tol = read_tolerance(j);
    return c;
  }

 private:
  std::filesystem::path dir_;
  std::string op_;

  const nlohmann::json& field(const nlohmann::json& j, const std::string& key, const std::string& where) const {
    auto it = j.find(key);
    if (it == j.end()) fail("case.json: missing field '" + where + key + "'");
    return *it;
  }
  std::string str(const nlohmann::json& j, const std::string& key, const std::string& where) const {
    const auto& v = field(j, key, where);
    if (!v.is_string()) fail("case.json: field '" + where + key + "' is not a string");
    return v.get<std::string>();
  }
  std::int64_t integer(const nlohmann::json& j, const std::string& key, const std::string& where) const {
    const auto& v = field(j, key, where);
    if (!v.is_number_integer()) fail("case.json: field '" + where + key + "' is not an integer");
    return v.get<std::int64_t>();
  }

  std::vector<std::string> names(const nlohmann::json& j, const std::string& key) const {
    const auto& v = field(j, key, "");
    if (!v.is_array()) fail("case.json: field '" + key + "' is not an array");
    std::vector<std::string> out;
    for (const auto& e : v) {
      if (!e.is_string()) fail("case.json: field '" + key + "' holds a non-string");
      out.push_back(e.get<std::string>());
    }
    return out;
  }

  void read_attributes(const nlohmann::json& j, const op_schema& schema, onnx_case& c) const {
    const auto& attrs = field(j, "attributes", "");
    const auto& types = field(j, "attribute_types", "");
    if (!attrs.is_object() || !types.is_object()) fail("case.json: 'attributes' and 'attribute_types' must be objects");
    for (const auto& [key, value] : attrs.items()) {
      const auto spec = std::find_if(schema.attrs.begin(), schema.attrs.end(), [name = key](const auto& a) {
        return a.first == name;
      });  // clang 14: no binding captures
      if (spec == schema.attrs.end()) fail("unknown attribute '" + key + "' for " + op_);
      const auto t = types.find(key);
      if (t == types.end() || !t->is_string()) fail("attribute '" + key + "' has no type in attribute_types");
      const auto kind = t->get<std::string>();
      if (kind != "int" && kind != "float") fail("attribute '" + key + "' has unknown type '" + kind + "'");
      if ((kind == "int") != spec->second)
        fail("attribute '" + key + "' of " + op_ + " must be " + (spec->second ? "int" : "float") + ", case says " +
             kind);
      if (spec->second ? !value.is_number_integer() : !value.is_number())
        fail("attribute '" + key + "' value is not a JSON " + (spec->second ? "integer" : "number"));
      c.attributes[key] = attribute{value.get<double>(), spec->second};
    }
    for (const auto& [key, unused] : types.items())
      if (!attrs.contains(key)) fail("attribute_types names '" + key + "', which is not in attributes");
  }

  tolerance read_tolerance(const nlohmann::json& j) const {
    const auto& t = field(j, "tolerance", "");
    tolerance tol;
    for (auto [key, dst] : {std::pair{"rtol", &tol.rtol}, std::pair{"atol", &tol.atol}}) {
      const auto& v = field(t, key, "tolerance.");
      if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>()))
        fail(std::string("tolerance.") + key + " is not a finite number >= 0");
      *dst = v.get<double>();
    }
    return tol;
  }

  std::vector<tensor_blob> tensors(const nlohmann::json& j, const std::string& key, const std::string& graph_key,
                                   const std::string& slot_key, const std::vector<std::string>& node_names) const {
    const auto graph = names(j, graph_key);
    const auto& list = field(j, key, "");
    if (!list.is_array()) fail("case.json: field '" + key + "' is not an array");
    std::vector<tensor_blob> out;
    std::set<int> slots;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const auto& e = list[i];
      const std::string where = key + "[" + std::to_string(i) + "].";
      if (!e.is_object()) fail("case.json: '" + key + "[" + std::to_string(i) + "]' is not an object");
      tensor_blob b;
      b.name = str(e, "name", where);
      const auto index = integer(e, "index", where);
      if (index < 0 || static_cast<std::size_t>(index) >= graph.size() ||
          graph[static_cast<std::size_t>(index)] != b.name)
        fail(where + "index " + std::to_string(index) + " does not name '" + b.name + "' in " + graph_key);
      const auto slot = integer(e, slot_key, where);
      if (slot < 0 || static_cast<std::size_t>(slot) >= node_names.size() ||
          node_names[static_cast<std::size_t>(slot)] != b.name)
        fail(where + slot_key + " " + std::to_string(slot) + " does not name '" + b.name + "' in node slots");
      b.slot = static_cast<int>(slot);
      if (!slots.insert(b.slot).second) fail(where + slot_key + " " + std::to_string(slot) + " is bound twice");

      const auto dtype_str = str(e, "dtype", where);
      const auto t = parse_dtype(dtype_str);
      if (!t) fail("tensor '" + b.name + "': unknown dtype '" + dtype_str + "'");
      b.type = *t;
      b.shape = shape(e, where);
      const std::int64_t numel = integer(e, "numel", where);
      const std::int64_t expected_numel = product(b.shape, b.name);
      if (numel != expected_numel)
        fail("tensor '" + b.name + "': numel " + std::to_string(numel) + " does not match shape " +
             format_shape(b.shape) + " (" + std::to_string(expected_numel) + " elements)");
      const std::int64_t nbytes = integer(e, "nbytes", where);
      const auto want_bytes = static_cast<std::uint64_t>(numel) * element_size(b.type);
      if (nbytes < 0 || static_cast<std::uint64_t>(nbytes) != want_bytes)
        fail("tensor '" + b.name + "': nbytes " + std::to_string(nbytes) + " != numel " + std::to_string(numel) +
             " x " + std::to_string(element_size(b.type)) + " bytes (" + std::string(dtype_name(b.type)) + ")");
      b.values = decode(read_file(str(e, "file", where), want_bytes), b.type, b.name);
      out.push_back(std::move(b));
    }
    for (std::size_t s = 0; s < node_names.size(); ++s)
      if (!node_names[s].empty() && !slots.count(static_cast<int>(s)))
        fail("node slot " + std::to_string(s) + " '" + node_names[s] + "' has no entry in '" + key + "'");
    return out;
  }

  std::vector<std::int64_t> shape(const nlohmann::json& e, const std::string& where) const {
    const auto& v = field(e, "shape", where);
    if (!v.is_array()) fail("case.json: field '" + where + "shape' is not an array");
    std::vector<std::int64_t> s;
    for (const auto& d : v) {
      if (!d.is_number_integer() || d.get<std::int64_t>() < 0)
        fail("case.json: field '" + where + "shape' holds a non-integer or negative dimension");
      s.push_back(d.get<std::int64_t>());
    }
    return s;
  }

  std::int64_t product(const std::vector<std::int64_t>& shape, const std::string& name) const {
    std::int64_t n = 1;  // a scalar (shape []) has one element
    for (auto d : shape) {
      if (d != 0 && n > std::numeric_limits<std::int32_t>::max() / d)
        fail("tensor '" + name + "': shape " + format_shape(shape) + " is implausibly large");
      n *= d;
    }
    return n;
  }

  std::vector<unsigned char> read_file(const std::string& file, std::uint64_t want_bytes) const {
    // Only plain names: a case must not reach outside its own directory.
    if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos || file == "." ||
        file == "..")
      fail("data file name '" + file + "' is not a plain file name");
    const auto path = dir_ / file;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) fail("missing data file " + file);
    const auto size = std::filesystem::file_size(path, ec);
    if (ec || size != want_bytes)
      fail("data file " + file + " has " + std::to_string(size) + " bytes, expected " + std::to_string(want_bytes));
    std::ifstream in(path, std::ios::binary);
    std::vector<unsigned char> bytes(static_cast<std::size_t>(size));
    if (size != 0 && !in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size)))
      fail("cannot read data file " + file);
    return bytes;
  }

  // The files are little-endian whatever the host is, so assemble bytes explicitly.
  static std::uint64_t le(const unsigned char* p, std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = n; i-- > 0;) v = (v << 8) | p[i];
    return v;
  }

  std::vector<double> decode(const std::vector<unsigned char>& bytes, dtype t, const std::string& name) const {
    const std::size_t es = element_size(t);
    const std::size_t n = bytes.size() / es;
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t raw = le(bytes.data() + i * es, es);
      switch (t) {
        case dtype::f32:
          v[i] = std::bit_cast<float>(static_cast<std::uint32_t>(raw));
          break;
        case dtype::f16:
          v[i] = onnx::half_to_float(static_cast<std::uint16_t>(raw));
          break;
        case dtype::f64:
          v[i] = std::bit_cast<double>(raw);
          break;
        case dtype::i32:
          v[i] = static_cast<std::int32_t>(static_cast<std::uint32_t>(raw));
          break;
        case dtype::i64: {
          const auto x = static_cast<std::int64_t>(raw);
          constexpr std::int64_t exact = std::int64_t{1} << 53;
          if (x > exact || x < -exact)
            fail("tensor '" + name + "': int64 value " + std::to_string(x) + " at element " + std::to_string(i) +
                 " is not exactly representable as double");
          v[i] = static_cast<double>(x);
          break;
        }
        case dtype::b8:
          if (raw > 1)
            fail("tensor '" + name + "': bool byte " + std::to_string(raw) + " at element " + std::to_string(i) +
                 " is neither 0 nor 1");
          v[i] = static_cast<double>(raw);
          break;
      }
    }
    return v;
  }
};

}  // namespace detail

// Loads and validates everything: JSON structure, operator/opset, attribute names and
// kinds, slot bindings, dtypes, shapes against numel/nbytes, and the files' sizes.
inline onnx_case load_case(const std::filesystem::path& dir) { return detail::case_reader(dir).read(); }

}  // namespace xattn::conformance
