#include "case_fixture.hpp"

#include <conformance/case_io.hpp>

#include <catch2/catch.hpp>

#include <bit>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <vector>

using namespace xattn::onnx;
using namespace xattn::conformance;
using namespace conformance_test;
using Catch::Matchers::Contains;

namespace {

std::vector<float> read_f32(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
  std::vector<float> v(bytes.size() / 4);
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::uint32_t u = 0;
    for (int b = 3; b >= 0; --b) u = (u << 8) | static_cast<unsigned char>(bytes[i * 4 + static_cast<std::size_t>(b)]);
    v[i] = std::bit_cast<float>(u);
  }
  return v;
}

std::vector<fs::path> all_cases() {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(data_dir()))
    if (fs::is_regular_file(e.path() / "case.json")) dirs.push_back(e.path());
  return dirs;
}

}  // namespace

TEST_CASE("a float16 case with past/present loads with every field bound by slot", "[case_io]") {
  const auto c = load_case(data_dir() / "test_attention_4d_gqa_with_past_and_present_fp16");
  CHECK(c.name == "test_attention_4d_gqa_with_past_and_present_fp16");
  CHECK(c.op_type == "Attention");
  CHECK(c.opset == 23);
  CHECK(c.attributes.empty());
  CHECK(c.node_inputs == std::vector<std::string>{"Q", "K", "V", "attn_mask", "past_key", "past_value"});
  CHECK(c.node_outputs == std::vector<std::string>{"Y", "present_key", "present_value"});
  CHECK(c.tol.rtol == 1e-3);
  CHECK(c.tol.atol == 1e-7);
  REQUIRE(c.inputs.size() == 6);
  REQUIRE(c.outputs.size() == 3);

  const tensor_blob* q = c.input(0);
  REQUIRE(q);
  CHECK(q->name == "Q");
  CHECK(q->type == dtype::f16);
  CHECK(q->shape == std::vector<std::int64_t>{2, 9, 4, 8});
  CHECK(q->numel() == 576);
  CHECK(c.input(3)->shape == std::vector<std::int64_t>{4, 18});
  CHECK(c.input(6) == nullptr);
  CHECK(c.output(2)->name == "present_value");
  CHECK(c.output(2)->shape == std::vector<std::int64_t>{2, 3, 18, 8});
  CHECK(c.output_requested(2));
  CHECK_FALSE(c.output_requested(3));
}

TEST_CASE("slots, not file order, bind inputs; bool and int64 decode", "[case_io]") {
  const auto c = load_case(data_dir() / "test_attention_4d_causal_nonpad_attn_mask_composition");
  CHECK(c.opset == 24);
  CHECK(c.attr("is_causal")->is_int);
  CHECK(c.attr("is_causal")->value == 1);
  CHECK_FALSE(c.attr("scale"));
  const tensor_blob* n = c.input(6);  // stored as input_4.bin
  REQUIRE(n);
  CHECK(n->type == dtype::i64);
  CHECK(n->values == std::vector<double>{4, 5});
  CHECK(c.input(4) == nullptr);
  CHECK(c.input(5) == nullptr);
  const tensor_blob* mask = c.input(3);
  REQUIRE(mask);
  CHECK(mask->type == dtype::b8);
  CHECK(mask->shape == std::vector<std::int64_t>{2, 1, 3, 6});
  for (double v : mask->values) CHECK((v == 0 || v == 1));
}

TEST_CASE("float attributes keep their kind and float32 value", "[case_io]") {
  const auto c = load_case(data_dir() / "test_attention_3d_gqa_scaled");
  REQUIRE(c.attr("scale"));
  CHECK_FALSE(c.attr("scale")->is_int);
  CHECK(static_cast<float>(c.attr("scale")->value) == 0.01f);
  CHECK(c.attr("q_num_heads")->is_int);
  CHECK(c.attr("q_num_heads")->value == 9);
  CHECK(c.attr("kv_num_heads")->value == 3);
}

TEST_CASE("every shared case loads, and decoded float16 agrees with the .f32 copies", "[case_io]") {
  const auto dirs = all_cases();
  CHECK(dirs.size() == 57);
  int halves = 0;
  for (const auto& dir : dirs) {
    INFO(dir);
    const auto c = load_case(dir);
    const auto j = read_json(dir / "case.json");
    for (const char* kind : {"inputs", "outputs"}) {
      for (const auto& t : j[kind]) {
        if (t["dtype"] != "float16") continue;
        ++halves;
        const int slot = t[std::string(kind) == "inputs" ? "node_input_index" : "node_output_index"];
        const tensor_blob* b = std::string(kind) == "inputs" ? c.input(slot) : c.output(slot);
        REQUIRE(b);
        const auto f32 = read_f32(dir / t["file_f32"].get<std::string>());
        REQUIRE(f32.size() == b->values.size());
        for (std::size_t i = 0; i < f32.size(); ++i) REQUIRE(static_cast<double>(f32[i]) == b->values[i]);
      }
    }
  }
  CHECK(halves == 18);
}

TEST_CASE("malformed cases throw case_error naming the directory and the problem", "[case_io]") {
  scratch_dir tmp;
  const std::string good = "test_softmax_example";  // x: float32 [1,3]

  SECTION("missing case.json") {
    const auto d = copy_case(good, tmp.path / "c");
    fs::remove(d / "case.json");
    const auto msg = load_error(d);
    CHECK_THAT(msg, Contains(d.string()) && Contains("missing case.json"));
  }
  SECTION("directory does not exist") { CHECK_THAT(load_error(tmp.path / "nope"), Contains("missing case.json")); }
  SECTION("missing data file") {
    const auto d = copy_case(good, tmp.path / "c");
    fs::remove(d / "output_0.bin");
    CHECK_THAT(load_error(d), Contains(d.string()) && Contains("missing data file output_0.bin"));
  }
  SECTION("file size differs from numel * element size") {
    const auto d = copy_case(good, tmp.path / "c");
    write_bytes(d / "input_0.bin", std::string(10, '\0'));
    CHECK_THAT(load_error(d), Contains("data file input_0.bin has 10 bytes, expected 12"));
  }
  SECTION("nbytes disagrees with numel") {
    const auto d = copy_case(good, tmp.path / "c", [](auto& j) { j["inputs"][0]["nbytes"] = 16; });
    CHECK_THAT(load_error(d), Contains("tensor 'x': nbytes 16 != numel 3 x 4 bytes (float32)"));
  }
  SECTION("numel disagrees with shape") {
    const auto d = copy_case(good, tmp.path / "c", [](auto& j) { j["inputs"][0]["shape"] = {1, 4}; });
    CHECK_THAT(load_error(d), Contains("tensor 'x': numel 3 does not match shape [1,4] (4 elements)"));
  }
  SECTION("unknown dtype") {
    const auto d = copy_case(good, tmp.path / "c", [](auto& j) { j["outputs"][0]["dtype"] = "bfloat16"; });
    CHECK_THAT(load_error(d), Contains(d.string()) && Contains("tensor 'y': unknown dtype 'bfloat16'"));
  }
  SECTION("unknown attribute for Softmax") {
    const auto d = copy_case(good, tmp.path / "c", [](auto& j) {
      j["attributes"]["is_causal"] = 1;
      j["attribute_types"]["is_causal"] = "int";
    });
    CHECK_THAT(load_error(d), Contains("unknown attribute 'is_causal' for Softmax-13"));
  }
  SECTION("unknown attribute for Attention (an opset-25 one)") {
    const auto d = copy_case("test_attention_4d", tmp.path / "c", [](auto& j) {
      j["attributes"]["left_window_size"] = 2;
      j["attribute_types"]["left_window_size"] = "int";
    });
    CHECK_THAT(load_error(d), Contains("unknown attribute 'left_window_size' for Attention-23"));
  }
  SECTION("attribute of the wrong kind") {
    const auto d =
        copy_case("test_attention_4d_scaled", tmp.path / "c", [](auto& j) { j["attribute_types"]["scale"] = "int"; });
    CHECK_THAT(load_error(d), Contains("attribute 'scale' of Attention-23 must be float, case says int"));
  }
  SECTION("attribute without a type") {
    const auto d = copy_case(good, tmp.path / "c", [](auto& j) { j["attributes"]["axis"] = 0; });
    CHECK_THAT(load_error(d), Contains("attribute 'axis' has no type in attribute_types"));
  }
  SECTION("bad JSON") {
    const auto d = copy_case(good, tmp.path / "c");
    write_text(d / "case.json", "{\"format\": \"onnx-node-test-plain/1\", ");
    CHECK_THAT(load_error(d), Contains(d.string()) && Contains("case.json is not valid JSON"));
  }
  SECTION("missing field") {
    const auto d = copy_case(good, tmp.path / "c", [](auto& j) { j["inputs"][0].erase("file"); });
    CHECK_THAT(load_error(d), Contains("missing field 'inputs[0].file'"));
  }
  SECTION("slot index that does not name the tensor") {
    const auto d =
        copy_case("test_attention_4d", tmp.path / "c", [](auto& j) { j["inputs"][1]["node_input_index"] = 2; });
    CHECK_THAT(load_error(d), Contains("node_input_index 2 does not name 'K'"));
  }
  SECTION("node input without a tensor") {
    const auto d = copy_case(good, tmp.path / "c", [](auto& j) { j["inputs"] = nlohmann::json::array(); });
    CHECK_THAT(load_error(d), Contains("node slot 0 'x' has no entry in 'inputs'"));
  }
  SECTION("opset with different semantics") {
    const auto d = copy_case(good, tmp.path / "c", [](auto& j) { j["opset"] = 11; });
    CHECK_THAT(load_error(d), Contains("unsupported operator Softmax at opset 11"));
  }
  SECTION("nonpad_kv_seqlen slot before opset 24") {
    const auto d =
        copy_case("test_attention_4d_gqa_causal_nonpad_decode", tmp.path / "c", [](auto& j) { j["opset"] = 23; });
    CHECK_THAT(load_error(d), Contains("node_inputs has 7 slots, Attention-23 takes at most 6"));
  }
  SECTION("bool byte other than 0/1") {
    const auto d = copy_case("test_attention_4d_attn_mask_bool", tmp.path / "c");
    write_bytes(d / "input_3.bin", std::string(23, '\1') + '\2');
    CHECK_THAT(load_error(d), Contains("tensor 'attn_mask': bool byte 2 at element 23 is neither 0 nor 1"));
  }
  SECTION("data file outside the case directory") {
    const auto d = copy_case(good, tmp.path / "c", [](auto& j) { j["inputs"][0]["file"] = "../input_0.bin"; });
    CHECK_THAT(load_error(d), Contains("is not a plain file name"));
  }
}
