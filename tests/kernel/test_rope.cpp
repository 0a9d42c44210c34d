// The rotary-embedding row operations against HF transformers' apply_rotary_pos_emb, run by
// PyTorch in float32 as HF does (tests/data/goldens/hf_rope_rows.json: rotate_half and GPT-J's
// rotate_every_two, partial rotary, positions up to 2^20), and against the exact rotation.
#include "support/goldens.hpp"

#include <xattn/kernel/rope.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace xattn;
using testing::golden_tensor;
using testing::read_golden;

TEST_CASE("rope rows: HF's float32 rotation, its inverse frequencies, and the exact rotation") {
  const auto file = read_golden("hf_rope_rows.json");
  REQUIRE(file["cases"].size() == 3);
  for (const auto& c : file["cases"]) {
    INFO(c["name"].get<std::string>());
    const auto x = golden_tensor<double>(c["x"]), hf = golden_tensor<double>(c["hf_float32"]),
               exact = golden_tensor<double>(c["exact"]);
    const auto pos = golden_tensor<std::int64_t>(c["positions"]);
    const auto dims = c["dims"].get<std::size_t>();
    const auto style = c["style"].get<std::string>() == "half" ? rope_style::half : rope_style::interleaved;
    const std::size_t n = x.shape()[1], half = dims / 2;
    // HF's inverse frequencies: torch's float pow and ours agree to an ulp
    std::vector<float> inv(half);
    kernel::rope_inverse_frequencies(float(c["base"].get<double>()), dims, inv.data());
    const auto hf_inv = golden_tensor<double>(c["inv_freq"]);
    for (std::size_t k = 0; k < half; ++k) REQUIRE(std::abs(inv[k] - hf_inv(k)) <= 1.2e-7 * hf_inv(k));
    std::vector<float> hf_invf(hf_inv.begin(), hf_inv.end()), cs(half), sn(half);
    std::vector<float> xf(n), out(n);
    double worst_hf = 0, worst_exact = 0, worst_back = 0;
    for (std::size_t i = 0; i < pos.size(); ++i) {
      for (std::size_t d = 0; d < n; ++d) xf[d] = float(x(i, d));
      // with HF's own frequencies: only the cosines' and sines' last bits may differ
      kernel::rope_angles(pos(i), hf_invf.data(), half, cs.data(), sn.data());
      kernel::rope_row(xf.data(), 1, n, dims, style, cs.data(), sn.data(), 1.0f, out.data());
      for (std::size_t d = 0; d < n; ++d) {
        worst_hf = std::max(worst_hf, std::abs(out[d] - hf(i, d)));
        if (pos(i) <= 4095) worst_exact = std::max(worst_exact, std::abs(out[d] - exact(i, d)));
      }
      for (std::size_t d = dims; d < n; ++d) REQUIRE(out[d] == xf[d]);  // partial rotary: the rest as it is
      // the transpose undoes the rotation
      std::vector<double> back(out.begin(), out.end());
      kernel::rope_row_transposed(back.data(), 1, dims, style, cs.data(), sn.data());
      for (std::size_t d = 0; d < n; ++d) worst_back = std::max(worst_back, std::abs(back[d] - xf[d]));
    }
    INFO("against HF float32 " << worst_hf << ", against exact (positions <= 4095) " << worst_exact
                               << ", transpose of the rotation " << worst_back);
    // |x| < 5: one float rounding of the products and of cos and sin, a few 1e-7
    CHECK(worst_hf < 2e-6);
    // float angles at position 4095 are off by up to 4095 · 2^-24 · inv_freq (2.4e-4 rad) from the exact ones
    CHECK(worst_exact < 2e-3);
    CHECK(worst_back < 1e-6);
  }
}
