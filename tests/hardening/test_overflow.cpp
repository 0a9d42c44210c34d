// Catalogue E29: sizes whose element counts overflow size_t. Only ref(ptr, shape, strides) can
// describe such operands (a container could not be allocated), so the check belongs to eval().
#include "hardening/isolated.hpp"

#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <vector>

using namespace xattn;

// Regression (fixed in 9374fbc): sizes were multiplied unchecked. With Dv = 2^62 and B = 4 the result
// and the worker's value tile wrapped to 0 elements and the kernel wrote through a null pointer
// (SIGSEGV); with B = Sq = 2^32 the first allocation threw std::bad_alloc. In a child process.
TEST_CASE("E29 operand sizes whose products overflow size_t", "[errors][regression]") {
  constexpr std::size_t huge_d = std::size_t(1) << 62, huge_s = std::size_t(1) << 32;
  const auto wrap = hardening::isolated([] {
    std::vector<float> buf(64, 0.5f);
    auto Q = ref(buf.data(), {4, 1, 1, 1}, {0, 0, 0, 0});
    auto K = ref(buf.data(), {4, 1, 1, 1}, {0, 0, 0, 0});
    auto V = ref(buf.data(), {4, 1, 1, huge_d}, {0, 0, 0, 0});  // stride 0: every element is buf[0]
    eval(softmax(Q * trans(K)) * V, {64, 128, 1});
  });
  const auto huge = hardening::isolated([] {
    std::vector<float> buf(64, 0.5f);
    auto Q = ref(buf.data(), {huge_s, 1, huge_s, 1}, {0, 0, 0, 0});
    auto K = ref(buf.data(), {huge_s, 1, 4, 1}, {0, 0, 1, 0});
    auto V = ref(buf.data(), {huge_s, 1, 4, 1}, {0, 0, 1, 0});
    eval(softmax(Q * trans(K)) * V, {64, 128, 1});
  });
  INFO("Dv = 2^62: " << wrap.describe() << "\nB = Sq = 2^32: " << huge.describe());
  CHECK(wrap.threw_invalid_argument());
  CHECK(huge.threw_invalid_argument());
}
