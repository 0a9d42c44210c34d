#pragma once
// Rows through a row program of a separated score (record/separate.hpp): each query or key row
// gives n features and some scalars, computed once per evaluation (or per query block) on lanes
// of rows, and, in the backward, the gradient at the row from those at its outputs, by the same
// program in reverse.
#include "../../kernel/rows.hpp"
#include "../../layout.hpp"
#include "../../record/machine.hpp"
#include "features.hpp"

#include <algorithm>
#include <array>
#include <span>
#include <vector>

namespace xattn {

/// Rows lanes-wide for program p: as many as keep its values within about 64 KiB, whole batches,
/// from one batch to 64 rows.
template <class Acc>
std::size_t row_lanes(const record::program& p) {
  constexpr std::size_t w = simd::width<Acc>;
  const std::size_t fit = (std::size_t(64) << 10) / (std::max<std::size_t>(p.size(), 1) * sizeof(Acc));
  return std::clamp<std::size_t>(fit / w * w, w, std::max<std::size_t>(w, 64));
}

/// Every row's features, (B, H, S, n), and its scalars, scalar c of row r (B, H, S row-major) at
/// c · stride + r; the scalars are padded by a batch so that a block of them may be read whole.
template <class Acc>
struct program_rows {
  row_features<Acc> f;
  std::size_t count = 0, stride = 0;
  std::vector<Acc> scalars;

  program_rows() = default;
  program_rows(std::size_t batch, std::size_t heads, std::size_t len, std::size_t n, std::size_t scalar_count)
      : f(batch, heads, len, n),
        count(scalar_count),
        stride(batch * heads * len + simd::width<Acc>),
        scalars(scalar_count * (batch * heads * len + simd::width<Acc>), Acc(0)) {}

  std::size_t index(std::size_t b, std::size_t h, std::size_t j) const noexcept {
    return std::size_t(f.term_at(b, h, j));
  }
  const Acc* scalar(std::size_t c, std::size_t b, std::size_t h, std::size_t j) const noexcept {
    return scalars.data() + c * stride + index(b, h, j);
  }
};

/// One thread's runs of a row program: rows in, their outputs (and the gradients at them) out.
template <class Acc>
class row_runner {
  using machine = record::machine<Acc>;

 public:
  /// p on rows l < n of a block of `lanes` (load(l, dst) writes row l's p.inputs values to dst).
  template <class Load>
  void forward(const record::program& p, std::size_t n, std::size_t lanes, Load&& load) {
    lanes_ = lanes;
    in_.assign(p.inputs * lanes, Acc(0));
    row_.resize(p.inputs);
    for (std::size_t l = 0; l < n; ++l) {
      load(l, row_.data());
      for (std::size_t s = 0; s < p.inputs; ++s) in_[s * lanes + l] = row_[s];
    }
    slots_.resize(p.inputs);
    for (std::size_t s = 0; s < p.inputs; ++s) slots_[s] = {in_.data() + s * lanes, false};
    m_.run(p, lanes, slots_.data());
  }
  /// Output o's value in lane l.
  Acc output(const record::program& p, std::size_t o, std::size_t l) const { return m_.value(p.outputs[o])[l]; }

  /// After forward(): the adjoints from the seeds (output o's lanes at seeds(o), written by the
  /// caller), each input slot's lanes of gradient to store(slot, lanes), the parameters' (by
  /// index) summed into dparams.
  Acc* seeds(const record::program& p, std::size_t o) {
    seeds_.resize(p.outputs.size() * lanes_);
    return seeds_.data() + o * lanes_;
  }
  template <class Store>
  void reverse(const record::program& p, std::size_t n, Store&& store, std::span<double> dparams) {
    seeds_.resize(p.outputs.size() * lanes_);
    pairs_.clear();
    for (std::size_t o = 0; o < p.outputs.size(); ++o) pairs_.push_back({p.outputs[o], seeds_.data() + o * lanes_});
    m_.reverse(p, pairs_);
    for (std::uint32_t i = 0; i < p.size(); ++i) {
      const record::node& x = p.code[i];
      if (x.o == record::op::input)
        store(x.a, m_.adjoint(i));
      else if (x.o == record::op::param)
        for (std::size_t l = 0; l < n; ++l) dparams[x.a] += double(m_.adjoint(i)[l]);
    }
  }

 private:
  machine m_;
  std::size_t lanes_ = 0;
  std::vector<Acc> in_, row_, seeds_;
  std::vector<typename machine::input> slots_;
  std::vector<std::pair<std::uint32_t, const Acc*>> pairs_;
};

/// Every row of view x (d elements each) through p into out: an orphaned `omp for` over blocks of
/// rows, like row_features::for_each_row.
template <class Acc, class View>
void run_program_rows(const record::program& p, const View& x, std::size_t d, program_rows<Acc>& out) {
  kernel::trace::note(kernel::tile_op::project_rows);
  const auto& sh = out.f.term_at.shape;
  const std::size_t rows = sh[0] * sh[1] * sh[2], lanes = row_lanes<Acc>(p), n = out.f.width();
  const auto blocks = std::ptrdiff_t((rows + lanes - 1) / lanes);
  row_runner<Acc> run;
#pragma omp for schedule(static)
  for (std::ptrdiff_t blk = 0; blk < blocks; ++blk) {
    const std::size_t r0 = std::size_t(blk) * lanes, count = std::min(lanes, rows - r0);
    const auto at = [&](std::size_t r) {
      return std::array<std::size_t, 3>{r / sh[2] / sh[1], r / sh[2] % sh[1], r % sh[2]};
    };
    run.forward(p, count, lanes, [&](std::size_t l, Acc* dst) {
      const auto [b, h, j] = at(r0 + l);
      kernel::scaled_copy(x.row(b, h, j), x.inner_stride(), d, Acc(1), dst, 1);
    });
    for (std::size_t l = 0; l < count; ++l) {
      const auto [b, h, j] = at(r0 + l);
      Acc* row = out.f.row(b, h, j);
      for (std::size_t g = 0; g < n; ++g) row[g] = run.output(p, g, l);
      for (std::size_t c = 0; c < out.count; ++c) out.scalars[c * out.stride + r0 + l] = run.output(p, n + c, l);
    }
  }
}

}  // namespace xattn
