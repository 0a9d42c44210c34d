#include "fuzz_case.hpp"

#include <sstream>

namespace xattn::fuzz {

namespace {

/// Sizes leaning on the edges: 1, small odd numbers, and a few large ones.
std::size_t seq_len(testing::rng& r, std::size_t hi) {
  const double u = r.uniform(0, 1);
  if (u < 0.15) return 1;
  if (u < 0.40) return r.size(1, 17);
  if (u < 0.90) return r.size(1, hi);
  return r.size(hi, 2 * hi);
}

std::size_t head_dim(testing::rng& r) {
  const double u = r.uniform(0, 1);
  if (u < 0.10) return 1;
  if (u < 0.40) return r.size(2, 17);
  if (u < 0.92) return r.size(2, 96);
  return r.size(97, 320);
}

std::size_t block(testing::rng& r) { return r.coin(0.4) ? r.size(1, 32) : r.size(1, 300); }

terminal terminal_of(storage s) {
  return s == storage::raw      ? terminal::raw
         : s == storage::packed ? terminal::packed
         : s == storage::cache  ? terminal::cache
                                : terminal::rank0;
}

/// The reference evaluator is O(B·Hq·Sq·Skv·(D + Dv)) with an allocation per pair; keep each case
/// to a few tens of milliseconds so 500 cases fit a CTest budget.
void fit_budget(testing::case_sizes& s) {
  auto work = [&] { return double(s.B * s.Hq() * s.Sq * s.Skv) * double(s.Dq + s.Dk + s.Dv + 40); };
  while (work() > 2.5e7) {
    std::size_t& big = s.Sq > s.Skv ? s.Sq : s.Skv;
    big = (big + 1) / 2;
  }
}

}  // namespace

fuzz_case draw_case(testing::rng& r, std::uint64_t run_seed, std::uint64_t index) {
  fuzz_case c;
  c.run_seed = run_seed;
  c.index = index;
  const double e = r.uniform(0, XATTN_FUZZ_16BIT ? 1 : 0.7);
  c.elem = e < 0.45  ? element::f32
           : e < 0.7 ? element::f64
           : e < 0.8 ? element::bf16
           : e < 0.9 ? element::f16
                     : element::mixed;
  const double u = r.uniform(0, 1);
  c.kind = u < 0.35   ? storage::contiguous
           : u < 0.55 ? storage::strided
           : u < 0.70 ? storage::transposed
           : u < 0.80 ? storage::raw
           : u < 0.90 ? storage::packed
                      : storage::cache;
  if (c.kind == storage::cache && (c.elem == element::f64 || c.elem == element::mixed))  // no such pages
    c.kind = storage::contiguous;
  if (index < combination_count()) {  // every pipeline once, then random ones
    std::size_t k = 0;
    for_each_combination([&](combination p) {
      if (k++ != index) return;
      c.elem = p.elem;
      c.scorer = p.scorer;
      c.masks = p.masks;
      if (p.term != terminal_of(c.kind))
        c.kind = p.term == terminal::raw      ? storage::raw
                 : p.term == terminal::packed ? storage::packed
                 : p.term == terminal::cache  ? storage::cache
                                              : storage::contiguous;
    });
  } else {
    do {
      c.scorer = r.size(0, scorer_names.size() - 1);
      c.masks = r.size(0, mask_names.size() - 1);
    } while (!allowed(c.elem, terminal_of(c.kind), c.scorer, c.masks));
  }
  const terminal t = terminal_of(c.kind);

  auto& s = c.sizes;
  s.three_d = t == terminal::rank0 && r.coin(0.3);
  s.B = r.size(1, 3);
  s.Hkv = s.three_d ? 1 : r.size(1, 3);
  s.G = s.three_d ? 1 : std::array<std::size_t, 5>{1, 1, 2, 3, 4}[r.size(0, 4)];
  s.Sq = t == terminal::cache && r.coin(0.5) ? r.size(1, 4) : seq_len(r, 130);  // decoding reads pages in place
  s.Skv = seq_len(r, 300);
  s.Dq = head_dim(r);
  if (rotates_rows(c.scorer)) s.Dq = std::max<std::size_t>(s.Dq, 2);
  s.Dk = needs_same_dim(c.scorer) ? s.Dq : head_dim(r);
  s.Dv = t == terminal::cache ? s.Dk : head_dim(r);  // a cache's keys and values have one head size
  fit_budget(s);
  if (c.masks == tree) s.Sq = std::min(s.Sq, s.Skv);  // the tree's tokens are the newest keys (cache_operands too)

  c.sch = {block(r), block(r), int(r.size(1, 2))};
  c.q_amplitude = std::array<double, 5>{1, 1, 1, 4, 16}[r.size(0, 4)];
  if (t == terminal::cache && c.elem == element::f32) c.fp8_pages = r.coin(0.5);  // drawn last: other cases unchanged
  if (t == terminal::cache && c.elem == element::f32 && !c.fp8_pages) c.q4_pages = r.coin(0.5);
  if (c.q4_pages) c.q4c_keys = r.coin(0.5);
  return c;
}

std::string describe(const fuzz_case& c) {
  const auto& s = c.sizes;
  std::ostringstream os;
  os << name(c.elem) << " " << scorer_names[c.scorer] << " / " << mask_names[c.masks] << ", " << name(c.kind)
     << (s.three_d ? " rank-3" : "") << ", B=" << s.B << " Hq=" << s.Hq() << " Hkv=" << s.Hkv << " Sq=" << s.Sq
     << " Skv=" << s.Skv << " Dq=" << s.Dq << " Dk=" << s.Dk << " Dv=" << s.Dv << ", block_q=" << c.sch.block_q
     << " block_k=" << c.sch.block_k << " threads=" << c.sch.threads << ", |Q| x" << c.q_amplitude
     << (c.fp8_pages ? ", float8_e4m3 pages" : "")
     << (c.q4_pages ? (c.q4c_keys ? ", q4c keys, q4 values" : ", q4 pages") : "");
  return os.str();
}

}  // namespace xattn::fuzz
