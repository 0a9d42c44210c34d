#pragma once
// A separated score's feature map (record/separate.hpp): Σ_g map(a_g(q), b_g(k)) for one query row
// against a block of keys, the body run on lanes of (feature, key) -- every feature of a batch of
// keys in one run, so that each operation's dispatch is paid once per feature and batch, not per
// pair -- and in reverse: the gradient at each feature's query values summed over the keys, at its
// key values kept per key, at the learnables summed. The body |q − k| (an L1 distance) runs
// compiled instead, its sum and its gradients in registers.
#include "../../../kernel/aligned.hpp"
#include "../../../kernel/trace.hpp"
#include "../../../record/machine.hpp"
#include "../../../record/separate.hpp"
#include "../../../simd/compat.hpp"

#include <algorithm>
#include <span>
#include <vector>

namespace xattn {

template <class Acc>
class feature_map_runner {
  using machine = record::machine<Acc>;
  using B = simd::batch<Acc>;
  static constexpr std::size_t w = simd::width<Acc>;
  // features per run: enough to pay each operation's dispatch once for many vectors, few enough
  // for the run's values to stay in L1 beside the key block
  static constexpr std::size_t chunk = 64;

 public:
  explicit feature_map_runner(const record::separated& s)
      : s_(s), g_(s.map_features), mq_(s.map_query), mk_(s.map_key), in_(mq_ + mk_), l1_(l1_order(s)) {}

  bool empty() const noexcept { return g_ == 0; }

  /// The key block's values: key(t, g) points to feature g's value t of keys j0.., `cols` of them.
  /// Kept by batches of keys, each batch's features side by side: a run's lanes as they lie.
  template <class Key>
  void load_keys(Key&& key, std::size_t cols) {
    batches_ = (cols + w - 1) / w;
    keys_.assign(mk_ * batches_ * g_ * w, Acc(0));
    for (std::size_t t = 0; t < mk_; ++t)
      for (std::size_t g = 0; g < g_; ++g) {
        const Acc* from = key(t, g);
        for (std::size_t c = 0; c < cols; ++c) keys_[at(t, c / w, g) + c % w] = from[c];
      }
  }

  /// out[c] = Σ_g map(q's feature g, key c's feature g) for c < colsp (whole batches; the keys past
  /// the block's are zeros); q: the row's values, feature by feature.
  void sum(const Acc* q, std::size_t colsp, Acc* out) {
    kernel::trace::note(kernel::tile_op{kernel::operation::pair_program});
    if (l1_) {  // |a − b|, compiled: the sum in a register
      for (std::size_t c0 = 0; c0 < colsp; c0 += w) {
        B total(Acc(0));
        for (std::size_t g = 0; g < g_; ++g)
          total += xsimd::abs(B(q[g]) - B::load_unaligned(keys_.data() + at(0, c0 / w, g)));
        total.store_unaligned(out + c0);
      }
      return;
    }
    load_query(q);
    for (std::size_t c0 = 0; c0 < colsp; c0 += w) {
      B total(Acc(0));
      for (std::size_t g0 = 0; g0 < g_; g0 += chunk) {
        const std::size_t n = run(c0, g0);
        const Acc* v = m_.value(s_.map.outputs[0]);
        for (std::size_t g = 0; g < n; ++g) total += B::load_unaligned(v + g * w);
      }
      total.store_unaligned(out + c0);
    }
  }

  /// Starts a query row's gradients (zeroes its accumulators).
  void begin_row() { qacc_.assign(mq_ * g_ * w, Acc(0)); }
  /// The gradient at the sum for keys c < colsp (d, 0 past the keys) back through the map: into
  /// the row's accumulators, the key block's (key_grads()) and dparams (by parameter index).
  void backward(const Acc* q, std::size_t colsp, const Acc* d, std::span<double> dparams) {
    kernel::trace::note(kernel::tile_op{kernel::operation::pair_program_gradients});
    if (dkeys_.size() != keys_.size()) dkeys_.assign(keys_.size(), Acc(0));
    if (l1_) {  // d|x|/dx = 1 at 0, as the machine's abs: x the first operand of the sub
      for (std::size_t c0 = 0; c0 < colsp; c0 += w) {
        const B dv = B::load_unaligned(d + c0);
        if (xsimd::all(dv == B(Acc(0)))) continue;
        for (std::size_t g = 0; g < g_; ++g) {
          Acc* dk = dkeys_.data() + at(0, c0 / w, g);
          const B k = B::load_unaligned(keys_.data() + at(0, c0 / w, g)), x = l1_ > 0 ? B(q[g]) - k : k - B(q[g]);
          const B sd = xsimd::select(x < B(Acc(0)), -dv, dv);  // d x
          Acc* dq = qacc_.data() + g * w;
          (B::load_unaligned(dq) + (l1_ > 0 ? sd : -sd)).store_unaligned(dq);
          (B::load_unaligned(dk) + (l1_ > 0 ? -sd : sd)).store_unaligned(dk);
        }
      }
      return;
    }
    seed_.resize(chunk * w);
    const record::program& p = s_.map;
    load_query(q);
    for (std::size_t c0 = 0; c0 < colsp; c0 += w) {
      const B dv = B::load_unaligned(d + c0);
      if (xsimd::all(dv == B(Acc(0)))) continue;
      for (std::size_t g = 0; g < chunk; ++g) dv.store_unaligned(seed_.data() + g * w);
      for (std::size_t g0 = 0; g0 < g_; g0 += chunk) {
        const std::size_t lanes = run(c0, g0) * w;
        const std::pair<std::uint32_t, const Acc*> seed{p.outputs[0], seed_.data()};
        m_.reverse(p, std::span(&seed, 1));
        for (std::uint32_t i = 0; i < p.size(); ++i) {
          const record::node& x = p.code[i];
          const Acc* a = m_.adjoint(i);
          if (x.o == record::op::input && x.a < mq_) {
            Acc* to = qacc_.data() + (x.a * g_ + g0) * w;
            for (std::size_t v = 0; v < lanes; v += w)
              (B::load_unaligned(to + v) + B::load_unaligned(a + v)).store_unaligned(to + v);
          } else if (x.o == record::op::input) {
            Acc* to = dkeys_.data() + at(x.a - mq_, c0 / w, g0);
            for (std::size_t v = 0; v < lanes; v += w)
              (B::load_unaligned(to + v) + B::load_unaligned(a + v)).store_unaligned(to + v);
          } else if (x.o == record::op::param) {
            B sum(Acc(0));
            for (std::size_t v = 0; v < lanes; v += w) sum += B::load_unaligned(a + v);
            dparams[x.a] += double(simd::hsum(sum));
          }
        }
      }
    }
  }
  /// The row's gradient at its values (feature by feature) added into dq.
  void end_row(Acc* dq) const {
    for (std::size_t t = 0; t < mq_; ++t)
      for (std::size_t g = 0; g < g_; ++g)
        dq[g * mq_ + t] += simd::hsum(B::load_unaligned(qacc_.data() + (t * g_ + g) * w));
  }
  /// The key block's gradient at key c's value t of feature g.
  Acc key_grad(std::size_t t, std::size_t g, std::size_t c) const {
    return dkeys_.empty() ? Acc(0) : dkeys_[at(t, c / w, g) + c % w];
  }
  /// Forgets the key block's gradients (a new block).
  void clear_key_grads() { dkeys_.clear(); }

 private:
  /// Whether the body is |q − k| (1), |k − q| (−1) or something else (0): those two run compiled.
  static int l1_order(const record::separated& s) {
    const record::program& p = s.map;
    if (s.map_query != 1 || s.map_key != 1 || p.outputs.size() != 1) return 0;
    const record::node& a = p.code[p.outputs[0]];
    if (a.o != record::op::abs) return 0;
    const record::node& d = p.code[a.a];
    if (d.o != record::op::sub) return 0;
    const record::node &x = p.code[d.a], &y = p.code[d.b];
    if (x.o != record::op::input || y.o != record::op::input || x.a == y.a) return 0;
    return x.a == 0 ? 1 : -1;
  }

  /// Where value t of feature g of batch `batch` of the block's keys starts.
  std::size_t at(std::size_t t, std::size_t batch, std::size_t g) const noexcept {
    return ((t * batches_ + batch) * g_ + g) * w;
  }
  /// The row's values spread over a run's lanes: feature g's over lanes [g · w, (g + 1) · w).
  void load_query(const Acc* q) {
    qin_.resize(mq_ * g_ * w);
    for (std::size_t t = 0; t < mq_; ++t)
      for (std::size_t g = 0; g < g_; ++g) B(q[g * mq_ + t]).store_unaligned(qin_.data() + (t * g_ + g) * w);
  }
  /// The body on keys [c0, c0 + w) of the block, features [g0, g0 + chunk) (returns how many):
  /// its inputs read where they lie.
  std::size_t run(std::size_t c0, std::size_t g0) {
    const std::size_t n = std::min(chunk, g_ - g0);
    for (std::size_t t = 0; t < mq_; ++t) in_[t] = {qin_.data() + (t * g_ + g0) * w, false};
    for (std::size_t t = 0; t < mk_; ++t) in_[mq_ + t] = {keys_.data() + at(t, c0 / w, g0), false};
    m_.run(s_.map, n * w, in_.data());
    return n;
  }

  const record::separated& s_;
  std::size_t g_, mq_, mk_, batches_ = 0;
  machine m_;
  std::vector<typename machine::input> in_;
  kernel::aligned_vector<Acc> keys_, dkeys_;  // the key block's values and gradients (at())
  kernel::aligned_vector<Acc> qin_, seed_, qacc_;
  int l1_;  // l1_order
};

}  // namespace xattn
