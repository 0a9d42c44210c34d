#pragma once
// Rows of Q and K as one product of rows sees them when the score is a sum of products: row i of
// Q̃ is [s1 · Q1(i), s2 · Q2(i)] and row j of K̃ is [K1(j), K2(j)], each term rotated when it has
// rope, so that Σ_t s_t · Q_t(i)·K_t(j) = Q̃(i)·K̃(j) runs through the score microkernel in one
// pass. A term whose keys have fewer heads gives each kernel key head its group's row. Gradients
// at Q̃ and K̃ go back the same way: split per term, scaled, summed over a shared head's group and
// rotated back (the rotation's transpose).
#include "../../bfloat16.hpp"
#include "../../hana.hpp"
#include "../../kernel/dpbf16.hpp"
#include "../../layout.hpp"
#include "../plan/plan.hpp"
#include "transformed_rows.hpp"

#include <cstddef>
#include <type_traits>

namespace xattn {

/// One term's rows: where its features sit in the assembled rows and how its key heads map.
template <class Acc, class Q, class K>
struct term_rows {
  transformed_rows<Acc, Q> q;
  transformed_rows<Acc, K> k;
  std::size_t dim, offset = 0, key_group;  // kernel key head hk reads this term's head hk / key_group
  Acc scale;

  term_rows(const score_term<Q, K>& t, const problem& pr)
      : q(t.q, pr.batch, pr.q_len, t.q.view.at.shape[3]),
        k(t.k, pr.batch, pr.kv_len, t.k.view.at.shape[3]),
        dim(t.q.view.at.shape[3]),
        key_group(pr.kv_heads / t.k.view.at.shape[1]),
        scale(Acc(t.scale)) {}
};

template <class Acc, class Q, class K>
term_rows<Acc, Q, K> make_term_rows(const score_term<Q, K>& t, const problem& pr) {
  return {t, pr};
}

template <class Acc, class Base>
struct term_rows_of;
template <class Acc, class P, class Q, class K>
struct term_rows_of<Acc, policy_base<P, Q, K>> {
  using type = hana::tuple<term_rows<Acc, Q, K>>;
};
template <class Acc, class Q, class K, class Q2, class K2>
struct term_rows_of<Acc, sum_base<Q, K, Q2, K2>> {
  using type = hana::tuple<term_rows<Acc, Q, K>, term_rows<Acc, Q2, K2>>;
};

template <class Acc, class Base>
class assembled_rows {
 public:
  using terms_t = typename term_rows_of<Acc, Base>::type;
  static constexpr std::size_t terms = decltype(hana::length(std::declval<terms_t>()))::value;

  assembled_rows(const Base& base, const problem& pr)
      : terms_(
            hana::unpack(score_terms(base), [&](const auto&... t) { return terms_t(make_term_rows<Acc>(t, pr)...); })) {
    hana::for_each(terms_, [&](auto& t) {
      t.offset = n_;
      n_ += t.dim;
    });
    each(base, [](auto& t, const auto& s) { t.k.share(s.k, t.q, s.q); });  // one table when Q and K agree
  }
  // the key rows may read the query rows' table (share): the object stays where it was built
  assembled_rows(const assembled_rows&) = delete;
  assembled_rows& operator=(const assembled_rows&) = delete;

  /// Features per assembled row.
  std::size_t width() const noexcept { return n_; }
  static std::size_t width_of(const Base& base) {
    std::size_t n = 0;
    hana::for_each(score_terms(base), [&](const auto& s) { n += s.q.view.at.shape[3]; });
    return n;
  }

  /// The rotation tables: orphaned `omp for`s, called by every thread of a parallel region.
  void build(const Base& base) {
    each(base, [](auto& t, const auto& s) {
      t.q.build(s.q);
      t.k.build(s.k);
    });
  }

  /// out[0, n) = assembled query row i of head (b, h), times c.
  void load_query(const Base& base, std::size_t b, std::size_t h, std::size_t i, Acc c, Acc* out) const {
    each(base, [&](const auto& t, const auto& s) { t.q.load(s.q, b, h, i, c * t.scale, out + t.offset); });
  }

  /// out[0, n) = assembled key row j of kernel key head (b, hk).
  void load_key(const Base& base, std::size_t b, std::size_t hk, std::size_t j, Acc* out) const {
    each(base, [&](const auto& t, const auto& s) { t.k.load(s.k, b, hk / t.key_group, j, Acc(1), out + t.offset); });
  }

  /// Query row i of head (b, h) in bfloat16 for the vdpbf16ps products: term t times s_t / s_1 (the
  /// first term's scale and the expression's go on the fp32 sums instead), a term that is kept in
  /// bfloat16 and not rotated or rescaled copied as it is, any other computed in Acc and rounded.
  void load_query_bf16(const Base& base, std::size_t b, std::size_t h, std::size_t i, bfloat16* out,
                       Acc* scratch) const {
    const double first = first_scale();
    each(base, [&](const auto& t, const auto& s) {
      const Acc c = Acc(double(t.scale) / first);
      round_row(s.q, t.q, b, h, i, c, out + t.offset, scratch);
    });
  }

  /// The scale load_query_bf16 leaves to the sums: the first term's (1 if it is 0).
  double first_scale() const noexcept {
    const Acc s = hana::at_c<0>(terms_).scale;
    return s != Acc(0) ? double(s) : 1.0;
  }

  /// Key row j of kernel key head (b, hk) in bfloat16, likewise.
  void load_key_bf16(const Base& base, std::size_t b, std::size_t hk, std::size_t j, bfloat16* out,
                     Acc* scratch) const {
    each(base, [&](const auto& t, const auto& s) {
      round_row(s.k, t.k, b, hk / t.key_group, j, Acc(1), out + t.offset, scratch);
    });
  }

  /// The gradients at the assembled query rows (dq̃, (B, Hq, Sq, n)) into each term's dQ: term t's
  /// features times its scale, rotated back. dq(t) is term t's target view.
  template <class Targets>
  void queries_back(const Base& base, const strided_view<const Acc>& dqt, Targets&& dq) const {
    const auto& sh = dqt.at.shape;
    each_indexed(base, [&](auto index, const auto& t, const auto& s) {
      const strided_view<Acc> to = dq(index);
      for (std::size_t b = 0; b < sh[0]; ++b)
        for (std::size_t h = 0; h < sh[1]; ++h)
          for (std::size_t i = 0; i < sh[2]; ++i) {
            Acc* row = to.row(b, h, i);
            kernel::scaled_copy(dqt.row(b, h, i) + t.offset, 1, t.dim, t.scale, row, to.inner_stride());
            t.q.transpose(s.q, row, to.inner_stride(), b, i);
          }
    });
  }

  /// The gradients at the assembled key rows (dk̃, (B, Hkv, Skv, n)) into each term's dK: term t's
  /// features summed over the kernel heads sharing its head, rotated back. The targets are zero.
  template <class Targets>
  void keys_back(const Base& base, const strided_view<const Acc>& dkt, Targets&& dk) const {
    const auto& sh = dkt.at.shape;
    each_indexed(base, [&](auto index, const auto& t, const auto& s) {
      const strided_view<Acc> to = dk(index);
      for (std::size_t b = 0; b < sh[0]; ++b)
        for (std::size_t j = 0; j < sh[2]; ++j) {
          for (std::size_t hk = 0; hk < sh[1]; ++hk) {
            Acc* row = to.row(b, hk / t.key_group, j);
            const Acc* g = dkt.row(b, hk, j) + t.offset;
            for (std::size_t d = 0; d < t.dim; ++d) row[std::ptrdiff_t(d) * to.inner_stride()] += g[d];
          }
          for (std::size_t h = 0; h < sh[1] / t.key_group; ++h)
            t.k.transpose(s.k, to.row(b, h, j), to.inner_stride(), b, j);
        }
    });
  }

  /// One term: the gradients at its rotated rows, already in dq and dk, rotated back in place.
  void rotate_back(const Base& base, const strided_view<Acc>& dq, const strided_view<Acc>& dk) const {
    static_assert(terms == 1);
    const auto& t = hana::at_c<0>(terms_);
    const auto s = hana::at_c<0>(score_terms(base));
    for (std::size_t b = 0; b < dq.at.shape[0]; ++b) {
      for (std::size_t h = 0; h < dq.at.shape[1]; ++h)
        for (std::size_t i = 0; i < dq.at.shape[2]; ++i) t.q.transpose(s.q, dq.row(b, h, i), dq.inner_stride(), b, i);
      for (std::size_t h = 0; h < dk.at.shape[1]; ++h)
        for (std::size_t j = 0; j < dk.at.shape[2]; ++j) t.k.transpose(s.k, dk.row(b, h, j), dk.inner_stride(), b, j);
    }
  }

 private:
  template <class Tm, class Rows>
  static void round_row(const Tm& x, const Rows& rows, std::size_t b, std::size_t h, std::size_t i, Acc c,
                        bfloat16* out, Acc* scratch) {
    const std::size_t d = x.view.at.shape[3];
    if constexpr (!Rows::transforms && std::is_same_v<typename Tm::value_type, bfloat16>) {
      if (c == Acc(1)) {
        const bfloat16* row = x.view.row(b, h, i);
        for (std::size_t k = 0; k < d; ++k) out[k] = row[std::ptrdiff_t(k) * x.view.inner_stride()];
        return;
      }
    }
    rows.load(x, b, h, i, c, scratch);
    for (std::size_t k = 0; k < d; ++k) out[k] = kernel::to_bf16(scratch[k]);
  }

  template <class F>
  void each_indexed(const Base& base, F&& f) const {
    const auto s = score_terms(base);
    hana::for_each(hana::make_range(hana::size_c<0>, hana::size_c<terms>),
                   [&](auto index) { f(index, hana::at(terms_, index), hana::at(s, index)); });
  }
  template <class F>
  void each(const Base& base, F&& f) const {
    each_indexed(base, [&](auto, const auto& t, const auto& s) { f(t, s); });
  }
  template <class F>
  void each(const Base& base, F&& f) {
    const auto s = score_terms(base);
    hana::for_each(hana::make_range(hana::size_c<0>, hana::size_c<terms>),
                   [&](auto index) { f(hana::at(terms_, index), hana::at(s, index)); });
  }

  terms_t terms_;
  std::size_t n_ = 0;
};

}  // namespace xattn
