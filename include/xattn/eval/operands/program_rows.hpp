#pragma once
// Rows through a row program of a separated score (record/separate.hpp): each query or key row
// gives n features and some scalars, computed once per evaluation (or per query block) on lanes
// of rows, and, in the backward, the gradient at the row from those at its outputs, by the same
// program in reverse.
#include "../../kernel/rows.hpp"
#include "../../layout.hpp"
#include "../../record/linear.hpp"
#include "../../record/machine.hpp"
#include "features.hpp"

#include <algorithm>
#include <array>
#include <span>
#include <vector>

namespace xattn {

/// Rows lanes-wide for program p (the part on the machine): as many as keep its values within
/// about 64 KiB, whole batches, from one batch to 64 rows.
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

/// A row program as it runs (record/linear.hpp): its linear outputs as one product by M, made
/// once per evaluation from the learnables' values, the rest on the lane machine.
template <class Acc>
struct row_program {
  const record::program* p = nullptr;
  const record::linear_split* split = nullptr;
  std::vector<Acc> m;                 // M: p->inputs x linear outputs, row-major
  std::vector<std::ptrdiff_t> where;  // output o: its index among the linear outputs, or ~ its index among the rest
  std::vector<char> learns;           // M's entry depends on a learnable: its gradient is wanted
  // M's nonzero entries column by column: column o's rows column_row[column_at[o], column_at[o + 1])
  std::vector<std::size_t> column_at{0}, column_row;
  std::vector<Acc> column_value;

  row_program() = default;
  row_program(const record::program& program, const record::linear_split& s) : p(&program), split(&s) {
    where.assign(program.outputs.size(), 0);
    for (std::size_t l = 0; l < s.linear.size(); ++l) where[s.linear[l]] = std::ptrdiff_t(l);
    for (std::size_t r = 0; r < s.rest.size(); ++r) where[s.rest[r]] = ~std::ptrdiff_t(r);
    if (s.linear.empty()) return;
    record::machine<double> mm;  // M's entries from constants and learnables: the same in every lane
    mm.run(s.matrix, simd::width<double>, nullptr);
    m.resize(s.matrix.outputs.size());
    for (std::size_t e = 0; e < m.size(); ++e) m[e] = Acc(mm.value(s.matrix.outputs[e])[0]);
    std::vector<char> reads(s.matrix.size(), 0);  // the node depends on a learnable
    for (std::size_t i = 0; i < s.matrix.size(); ++i) {
      const record::node& x = s.matrix.code[i];
      const int n = record::arity(x.o);
      reads[i] = x.o == record::op::param || (n > 0 && reads[x.a]) || (n > 1 && reads[x.b]) || (n > 2 && reads[x.c]);
    }
    learns.resize(m.size());
    for (std::size_t e = 0; e < m.size(); ++e) learns[e] = reads[s.matrix.outputs[e]];
    const std::size_t nl = s.linear.size();
    column_at.assign(1, 0);
    for (std::size_t o = 0; o < nl; ++o) {
      for (std::size_t r = 0; r < program.inputs; ++r)
        if (m[r * nl + o] != Acc(0)) column_row.push_back(r), column_value.push_back(m[r * nl + o]);
      column_at.push_back(column_row.size());
    }
  }
  std::size_t inputs() const noexcept { return p->inputs; }
  std::size_t linear() const noexcept { return split->linear.size(); }

  /// The learnables' gradient (by parameter index, added into dparams) from M's (dm, as m).
  void matrix_backward(std::span<const double> dm, std::span<double> dparams) const {
    if (split->linear.empty()) return;
    constexpr std::size_t w = simd::width<double>;
    record::machine<double> mm;
    mm.run(split->matrix, w, nullptr);
    std::vector<double> seeds(dm.size() * w, 0.0);
    std::vector<std::pair<std::uint32_t, const double*>> pairs;
    for (std::size_t e = 0; e < dm.size(); ++e) {
      seeds[e * w] = dm[e];
      pairs.push_back({split->matrix.outputs[e], seeds.data() + e * w});
    }
    mm.reverse(split->matrix, pairs);
    for (std::uint32_t i = 0; i < split->matrix.size(); ++i)
      if (split->matrix.code[i].o == record::op::param) dparams[split->matrix.code[i].a] += mm.adjoint(i)[0];
  }
};

/// One thread's runs of a row program: rows in, their outputs (and the gradients at them) out.
template <class Acc>
class row_runner {
  using machine = record::machine<Acc>;
  using B = simd::batch<Acc>;
  static constexpr std::size_t w = simd::width<Acc>;

 public:
  /// rp on rows l < n of a block of `lanes` (load(l, dst) writes row l's inputs to dst).
  template <class Load>
  void forward(const row_program<Acc>& rp, std::size_t n, std::size_t lanes, Load&& load) {
    lanes_ = lanes;
    const std::size_t inputs = rp.inputs(), nl = rp.linear();
    in_.assign(inputs * lanes, Acc(0));
    row_.resize(inputs);
    for (std::size_t l = 0; l < n; ++l) {
      load(l, row_.data());
      for (std::size_t s = 0; s < inputs; ++s) in_[s * lanes + l] = row_[s];
    }
    // y = x · M, four vectors of rows at a time: each output summed in registers over the
    // nonzero entries of its column (a chain through memory per entry would wait on each store)
    lin_.resize(nl * lanes);
    for (std::size_t v = 0; v < lanes; v += 4 * w) {
      const std::size_t nv = std::min<std::size_t>(4, (lanes - v) / w);
      for (std::size_t o = 0; o < nl; ++o) {
        B acc[4] = {B(Acc(0)), B(Acc(0)), B(Acc(0)), B(Acc(0))};
        for (std::size_t e = rp.column_at[o]; e < rp.column_at[o + 1]; ++e) {
          const Acc* x = in_.data() + rp.column_row[e] * lanes + v;
          const B c(rp.column_value[e]);
          for (std::size_t t = 0; t < nv; ++t) acc[t] = xsimd::fma(B::load_unaligned(x + t * w), c, acc[t]);
        }
        for (std::size_t t = 0; t < nv; ++t) acc[t].store_unaligned(lin_.data() + o * lanes + v + t * w);
      }
    }
    if (rp.split->rest.empty()) return;
    slots_.resize(inputs);
    for (std::size_t s = 0; s < inputs; ++s) slots_[s] = {in_.data() + s * lanes, false};
    m_.run(rp.split->others, lanes, slots_.data());
  }
  /// Output o's value in lane l.
  Acc output(const row_program<Acc>& rp, std::size_t o, std::size_t l) const {
    const std::ptrdiff_t at = rp.where[o];
    return at >= 0 ? lin_[std::size_t(at) * lanes_ + l] : m_.value(rp.split->others.outputs[std::size_t(~at)])[l];
  }

  /// Where the caller writes the gradient at output o, lane by lane, before reverse().
  Acc* seeds(const row_program<Acc>& rp, std::size_t o) {
    seeds_.resize(rp.p->outputs.size() * lanes_);
    return seeds_.data() + o * lanes_;
  }
  /// After forward() and the seeds: each input slot's lanes of gradient to store(slot, lanes),
  /// the machine's learnables' (by parameter index) added into dparams, M's gradient x^T · dy
  /// added into dm (as rp.m).
  template <class Store>
  void reverse(const row_program<Acc>& rp, std::size_t n, Store&& store, std::span<double> dparams,
               std::span<double> dm) {
    const std::size_t inputs = rp.inputs(), nl = rp.linear();
    seeds_.resize(rp.p->outputs.size() * lanes_);
    grad_.assign(inputs * lanes_, Acc(0));
    if (!rp.split->rest.empty()) {
      pairs_.clear();
      for (std::size_t r = 0; r < rp.split->rest.size(); ++r)
        pairs_.push_back({rp.split->others.outputs[r], seeds_.data() + rp.split->rest[r] * lanes_});
      m_.reverse(rp.split->others, pairs_);
      for (std::uint32_t i = 0; i < rp.split->others.size(); ++i) {
        const record::node& x = rp.split->others.code[i];
        if (x.o == record::op::input)
          std::copy_n(m_.adjoint(i), lanes_, grad_.data() + x.a * lanes_);
        else if (x.o == record::op::param)
          for (std::size_t l = 0; l < n; ++l) dparams[x.a] += double(m_.adjoint(i)[l]);
      }
    }
    for (std::size_t o = 0; o < nl; ++o) {  // dx += dy · Mᵀ, dM += xᵀ · dy
      const Acc* dy = seeds_.data() + rp.split->linear[o] * lanes_;
      for (std::size_t s = 0; s < inputs; ++s) {
        const Acc* x = in_.data() + s * lanes_;
        if (const Acc c = rp.m[s * nl + o]; c != Acc(0))
          for (std::size_t v = 0; v < lanes_; v += w) {
            Acc* g = grad_.data() + s * lanes_ + v;
            (B::load_unaligned(g) + B::load_unaligned(dy + v) * B(c)).store_unaligned(g);
          }
        if (!rp.learns[s * nl + o]) continue;  // a constant entry (cosine's identity): nothing to learn
        B sum(Acc(0));
        for (std::size_t v = 0; v < lanes_; v += w) sum += B::load_unaligned(x + v) * B::load_unaligned(dy + v);
        dm[s * nl + o] += double(simd::hsum(sum));
      }
    }
    for (std::size_t s = 0; s < inputs; ++s) store(s, grad_.data() + s * lanes_);
  }

 private:
  machine m_;
  std::size_t lanes_ = 0;
  std::vector<Acc> in_, row_, seeds_, lin_, grad_;
  std::vector<typename machine::input> slots_;
  std::vector<std::pair<std::uint32_t, const Acc*>> pairs_;
};

/// Every row of view x (d elements each) through p into out: an orphaned `omp for` over blocks of
/// rows, like row_features::for_each_row.
template <class Acc, class View>
void run_program_rows(const row_program<Acc>& p, const View& x, std::size_t d, program_rows<Acc>& out) {
  kernel::trace::note(kernel::tile_op{kernel::operation::project_rows});
  const auto& sh = out.f.term_at.shape;
  const std::size_t rows = sh[0] * sh[1] * sh[2], lanes = row_lanes<Acc>(p.split->others), n = out.f.width();
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
