// The value paths: every way the forward reads V (strips, bf16 pairs, in place, widened per head,
// copied per task) adds the same P·V, against a double product of the same probabilities and
// values, block by block and head after head (each path keeps per-head copies it must not reuse
// across heads); and what V tells the schedule.
#include "support/random.hpp"

#include <xattn/eval/values/reader.hpp>
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace xattn;

namespace {

/// max over rows and features of |o - (o0 + p · V)| / (1 + Σ |p v|), V's rows of head (b, hk) from j0.
template <class T>
double worst_error(const xt::xarray<T>& v, std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols,
                   const std::vector<float>& p, std::size_t lds, std::size_t rows, const std::vector<float>& o0,
                   const std::vector<float>& o, std::size_t ldo) {
  double worst = 0;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t d = 0; d < v.shape()[3]; ++d) {
      double want = o0[r * ldo + d], size = 0;
      for (std::size_t c = 0; c < cols; ++c) {
        const double t = double(p[r * lds + c]) * double(v(b, hk, j0 + c, d));
        want += t;
        size += std::abs(t);
      }
      worst = std::max(worst, std::abs(double(o[r * ldo + d]) - want) / (1 + size));
    }
  return worst;
}

template <class T>
void check_reader(value_reads mode, std::size_t dv, double tol) {
  testing::rng g(20261205);
  const std::size_t B = 2, H = 2, S = 300, bk = 128, rows = 5;
  const auto v = g.tensor<T>({B, H, S, dv});
  const auto V = ref(v);
  problem pr;
  pr.batch = B;
  pr.q_heads = pr.kv_heads = H;
  pr.q_len = rows;
  pr.kv_len = S;
  pr.q_dim = pr.k_dim = pr.v_dim = dv;
  forward_schedule fs;
  fs.block_q = rows;
  fs.block_k = bk;
  fs.values = mode;
  value_reader<float, std::decay_t<decltype(V)>> reader(V, pr, fs);
  const std::size_t lds = bk + 16, ldo = simd::padded<float>(dv) + 16;
  // head (1, 1), then (0, 1), then (1, 1) again: per-head copies are remade for each head
  for (const auto& [b, hk] : {std::pair{1, 1}, std::pair{0, 1}, std::pair{1, 1}})
    for (std::size_t j0 = 0; j0 < S; j0 += bk) {
      const std::size_t cols = std::min(bk, S - j0);
      std::vector<float> p(rows * lds, 0.0f), o(rows * ldo);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) p[r * lds + c] = float(g.uniform(0, 1));
      for (auto& x : o) x = float(g.uniform(-1, 1));
      const std::vector<float> o0 = o;
      reader.accumulate(std::size_t(b), std::size_t(hk), j0, cols, p.data(), lds, rows, o.data(), ldo);
      INFO("mode " << int(mode) << ", Dv " << dv << ", head (" << b << ", " << hk << "), keys from " << j0);
      CHECK(worst_error(v, std::size_t(b), std::size_t(hk), j0, cols, p, lds, rows, o0, o, ldo) < tol);
    }
  // a tensor's rows stream well: only a cache's pages are prefetched with the keys
  CHECK_FALSE(reader.with_prefetch(0, 0, 0, [](kernel::row_prefetch) { FAIL("called"); }));
}

}  // namespace

TEST_CASE("value paths: every way of reading V adds the same P·V") {
  for (const std::size_t dv : {std::size_t(64), std::size_t(40)}) {
    check_reader<float>(value_reads::strips, dv, 1e-6);
    check_reader<float>(value_reads::copied_per_task, dv, 1e-6);
    check_reader<bfloat16>(value_reads::strips, dv, 1e-6);
    check_reader<bfloat16>(value_reads::widened_per_head, dv, 1e-6);
    check_reader<float16>(value_reads::widened_per_head, dv, 1e-6);
  }
  check_reader<float>(value_reads::in_place, 64, 1e-6);
  check_reader<bfloat16>(value_reads::in_place, 64, 1e-6);
  check_reader<float16>(value_reads::in_place, 64, 1e-6);
  // vdpbf16ps rounds the probabilities to bf16 (2^-9 relative) before the product
  if constexpr (takes_value_pairs_v<float, bfloat16>)
    for (const std::size_t dv : {std::size_t(64), std::size_t(40)})
      check_reader<bfloat16>(value_reads::bf16_pairs, dv, 0x1p-8);
}

TEST_CASE("value paths: what V tells the schedule") {
  testing::rng g(7);
  problem pr;
  pr.kv_len = 8;
  pr.v_dim = 64;
  const auto v = g.tensor<float>({1, 1, 8, 64});
  const auto b = g.tensor<bfloat16>({1, 1, 8, 64});
  const auto vf = value_facts_of<float, float>(ref(v).view, pr);
  CHECK((vf.same_type && vf.in_place_ok && !vf.bf16_pairs));
  const auto vb = value_facts_of<float, bfloat16>(ref(b).view, pr);
  CHECK((!vb.same_type && vb.bf16_pairs == kernel::has_dpbf16 && vb.in_place_ok == simd::widens16_v<float, bfloat16>));
  // not whole batches of features: not in place
  pr.v_dim = 40;
  const auto v40 = g.tensor<float>({1, 1, 8, 40});
  CHECK_FALSE(value_facts_of<float, float>(ref(v40).view, pr).in_place_ok);
  // features not contiguous (a transposed view): not in place
  pr.v_dim = 64;
  const auto t = g.tensor<float>({1, 1, 64, 8});
  const auto vt = xt::transpose(t, {0, 1, 3, 2});
  CHECK_FALSE(value_facts_of<float, float>(ref(vt).view, pr).in_place_ok);
}
