// Catalogue E51-E56: malformed ONNX case files (tools/conformance/case_io.hpp) that
// tests/conformance/test_case_io.cpp does not already break. Same fixture: a real case is
// copied, damaged, and must be rejected with case_error naming the directory and the problem.
#include "conformance/case_fixture.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

using namespace conformance_test;
using Catch::Contains;

namespace {
const std::string softmax_case = "test_softmax_example";  // x: float32 [1,3]
}

TEST_CASE("E51 a tensor shape whose element count is implausibly large", "[errors][case_io]") {
  scratch_dir tmp;
  const auto d = copy_case(softmax_case, tmp.path / "c", [](auto& j) {
    j["inputs"][0]["shape"] = {1 << 20, 1 << 20};
    j["inputs"][0]["numel"] = std::int64_t(1) << 40;
  });
  CHECK_THAT(load_error(d),
             Contains(d.string()) && Contains("tensor 'x': shape [1048576,1048576] is implausibly large"));
}

TEST_CASE("E52 an int64 value beyond 2^53 (not exact as double)", "[errors][case_io]") {
  scratch_dir tmp;
  const auto d = copy_case("test_attention_4d_causal_nonpad_attn_mask_composition", tmp.path / "c");
  std::string bytes(16, '\0');  // nonpad_kv_seqlen: two int64; the first becomes 2^60
  bytes[7] = 0x10;
  bytes[8] = 5;
  write_bytes(d / "input_4.bin", bytes);
  CHECK_THAT(
      load_error(d),
      Contains("tensor 'nonpad_kv_seqlen': int64 value 1152921504606846976 at element 0 is not exactly representable"));
}

TEST_CASE("E53 an unsupported format or domain", "[errors][case_io]") {
  scratch_dir tmp;
  const auto f = copy_case(softmax_case, tmp.path / "f", [](auto& j) { j["format"] = "onnx-node-test-plain/2"; });
  CHECK_THAT(load_error(f), Contains("unsupported format 'onnx-node-test-plain/2'"));
  const auto d = copy_case(softmax_case, tmp.path / "d", [](auto& j) { j["domain"] = "com.microsoft"; });
  CHECK_THAT(load_error(d), Contains("unsupported domain 'com.microsoft'"));
}

TEST_CASE("E54 a negative or non-numeric tolerance", "[errors][case_io]") {
  scratch_dir tmp;
  const auto n = copy_case(softmax_case, tmp.path / "n", [](auto& j) { j["tolerance"]["rtol"] = -1e-3; });
  CHECK_THAT(load_error(n), Contains("tolerance.rtol is not a finite number >= 0"));
  const auto s = copy_case(softmax_case, tmp.path / "s", [](auto& j) { j["tolerance"]["atol"] = "tiny"; });
  CHECK_THAT(load_error(s), Contains("tolerance.atol is not a finite number >= 0"));
}

TEST_CASE("E55 a required input slot left empty, or output 0 not requested", "[errors][case_io]") {
  scratch_dir tmp;
  const auto i = copy_case("test_attention_4d", tmp.path / "i", [](auto& j) { j["node_inputs"][1] = ""; });
  CHECK_THAT(load_error(i), Contains("required input slot 1 of Attention-23 is missing"));
  const auto o = copy_case(softmax_case, tmp.path / "o", [](auto& j) { j["node_outputs"][0] = ""; });
  CHECK_THAT(load_error(o), Contains("output slot 0 of Softmax-13 is not requested"));
}

TEST_CASE("E56 two tensors bound to the same slot", "[errors][case_io]") {
  scratch_dir tmp;
  const auto d = copy_case("test_attention_4d", tmp.path / "c", [](auto& j) {
    j["inputs"].push_back(j["inputs"][0]);  // Q twice
  });
  CHECK_THAT(load_error(d), Contains("node_input_index 0 is bound twice"));
}
