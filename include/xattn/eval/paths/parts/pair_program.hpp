#pragma once
// The per-pair program of a separated score (record/separate.hpp) on lanes of tile pairs, and the
// policy's own score of one pair, which the pairs failing a guard take.
#include "../../../kernel/aligned.hpp"
#include "../../../kernel/rows.hpp"
#include "../../../kernel/trace.hpp"
#include "../../../record/machine.hpp"
#include "../../../record/separate.hpp"

#include <algorithm>
#include <span>
#include <vector>

namespace xattn {

/// The score of one pair by policy p itself, from raw rows in any element type (converted to S,
/// the policy's scalar type; buf the caller's scratch).
template <class Acc, class S, class P, class Q, class K>
Acc policy_score(const P& p, const Q& q, std::ptrdiff_t qs, std::size_t dq, const K& k, std::ptrdiff_t ks,
                 std::size_t dk, std::vector<S>& buf) {
  buf.resize(dq + dk);
  kernel::scaled_copy(q, qs, dq, S(1), buf.data(), 1);
  kernel::scaled_copy(k, ks, dk, S(1), buf.data() + dq, 1);
  return Acc(S(p(std::span<const S>(buf.data(), dq), std::span<const S>(buf.data() + dq, dk))));
}

/// How a separated score's pairs are scored, a few tile rows at a time: the per-pair program on
/// lanes of all their pairs (the dispatch of each operation paid once for them), the pairs whose
/// guards fail then by the policy itself.
template <class Acc>
class pair_program_runner {
  using machine = record::machine<Acc>;
  using B = simd::batch<Acc>;
  static constexpr std::size_t w = simd::width<Acc>;

 public:
  /// Tile rows run together, ld lanes apart: enough for each operation's dispatch to be small
  /// beside its work, few enough for the program's values to stay in L1.
  static constexpr std::size_t rows_at_once(std::size_t ld) noexcept { return std::max<std::size_t>(1, 1024 / ld); }

  explicit pair_program_runner(const record::separated& s) : s_(s), in_(s.pair.inputs), one_(s.query_scalars) {}

  /// The program on `rows` tile rows of `ld` lanes each (whole batches): dot the products (row r
  /// at dot + r · ld), query_scalar(c, r) row r's scalar c, key_scalar(c) the key block's scalar c
  /// (ld of them, the same for every row), map_sum the feature map's sums (as dot). One row reads
  /// its inputs where they are.
  template <class QueryScalar, class KeyScalar>
  void run(const Acc* dot, std::size_t rows, std::size_t ld, QueryScalar&& query_scalar, KeyScalar&& key_scalar,
           const Acc* map_sum = nullptr) {
    kernel::trace::note(kernel::tile_op{kernel::operation::pair_program});
    const std::size_t lanes = rows * ld, qs = s_.query_scalars, ks = s_.key_scalars;
    in_[0] = {dot, false};
    if (s_.map_features) in_[1 + qs + ks] = {map_sum, false};  // laid out as the products
    if (rows == 1) {
      for (std::size_t c = 0; c < qs; ++c) {
        one_[c] = query_scalar(c, 0);
        in_[1 + c] = {&one_[c], true};
      }
      for (std::size_t c = 0; c < ks; ++c) in_[1 + qs + c] = {key_scalar(c), false};
      m_.run(s_.pair, lanes, in_.data());
      return;
    }
    buf_.resize((qs + ks) * lanes);
    for (std::size_t c = 0; c < qs; ++c) {
      Acc* to = buf_.data() + c * lanes;
      for (std::size_t r = 0; r < rows; ++r) std::fill_n(to + r * ld, ld, query_scalar(c, r));
      in_[1 + c] = {to, false};
    }
    for (std::size_t c = 0; c < ks; ++c) {
      Acc* to = buf_.data() + (qs + c) * lanes;
      const Acc* from = key_scalar(c);
      for (std::size_t r = 0; r < rows; ++r) std::copy_n(from, ld, to + r * ld);
      in_[1 + qs + c] = {to, false};
    }
    m_.run(s_.pair, lanes, in_.data());
  }
  const Acc* score() const noexcept { return m_.value(s_.pair.outputs[0]); }
  bool guarded() const noexcept { return !s_.expect.empty(); }
  /// Whether some pair of lanes [from, from + n) fails a guard (n a multiple of the SIMD width).
  bool any_fails(std::size_t from, std::size_t n) const noexcept {
    for (std::size_t g = 0; g < s_.expect.size(); ++g) {
      const Acc* v = m_.value(s_.pair.outputs[1 + g]) + from;
      const B want(s_.expect[g] ? Acc(1) : Acc(0));
      for (std::size_t c = 0; c < n; c += w)
        if (xsimd::any(B::load_unaligned(v + c) != want)) return true;
    }
    return false;
  }
  /// Whether lane l's guards all went the recorded way.
  bool holds(std::size_t l) const noexcept {
    for (std::size_t g = 0; g < s_.expect.size(); ++g)
      if ((m_.value(s_.pair.outputs[1 + g])[l] != Acc(0)) != bool(s_.expect[g])) return false;
    return true;
  }

  /// After run(): adjoints from the score's (ds, one per lane).
  void reverse(const Acc* ds) {
    kernel::trace::note(kernel::tile_op{kernel::operation::pair_program_gradients});
    const std::pair<std::uint32_t, const Acc*> seed{s_.pair.outputs[0], ds};
    m_.reverse(s_.pair, std::span(&seed, 1));
  }
  const machine& values() const noexcept { return m_; }

 private:
  const record::separated& s_;
  machine m_;
  std::vector<typename machine::input> in_;
  kernel::aligned_vector<Acc> buf_;  // the scalars spread over the lanes
  std::vector<Acc> one_;             // one row's query scalars
};

}  // namespace xattn
