#pragma once
// The lane machine: runs a program (program.hpp) on many lanes at once -- query rows, key rows or
// (query, key) pairs, one per lane -- each operation over all the lanes before the next, so its
// dispatch is paid once per operation, not per lane. A value the same in every lane (a constant,
// a learnable, an input given once for all lanes, and what is computed from those alone) is kept
// and computed once. Values are kept for the reverse pass, which takes adjoints from the outputs
// back to every node in one sweep (the derivatives are var's, var.hpp: sqrt' = 0 at 0, abs' = 1 at
// 0, max and min pass their gradient to a on ties; a lane whose adjoint at a node is 0 passes
// nothing back through it).
#include "../kernel/aligned.hpp"
#include "../simd/compat.hpp"
#include "program.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#pragma GCC diagnostic push  // GCC PR 105593, see simd/compat.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xattn::record {

template <class T>
class machine {
  using B = simd::batch<T>;
  using M = typename B::batch_bool_type;
  static constexpr std::size_t w = simd::width<T>;

 public:
  /// Where an input slot's lanes are: `lanes` consecutive values, or one value for every lane.
  struct input {
    const T* data = nullptr;
    bool uniform = false;
  };

  /// Lanes rounded up to what run() takes.
  static constexpr std::size_t padded(std::size_t lanes) noexcept { return (lanes + w - 1) / w * w; }

  /// Every node of p on `lanes` lanes (a multiple of the SIMD width), input slot s read from in[s]
  /// (lanes of it read where they are, not copied). The constants are filled once for a program and
  /// a number of lanes: p must stay the same program while this machine runs it. The outputs are
  /// then whole lanes even where they are the same in every lane.
  void run(const program& p, std::size_t lanes, const input* in) {
    const bool fresh = &p != last_ || lanes != ld_;
    ld_ = lanes;
    sd_ = lanes + w;  // nodes a batch more apart than their lanes: never a multiple of 4 KiB (4K aliasing)
    last_ = &p;
    if (values_.size() < p.size() * sd_) values_.resize(p.size() * sd_);
    at_.resize(p.size());
    uni_.resize(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      const node& x = p.code[i];
      T* out = values_.data() + i * sd_;
      at_[i] = out;
      const int n = arity(x.o);
      const bool uniform =
          n == 0 ? x.o != op::input || in[x.a].uniform : uni_[x.a] && (n < 2 || uni_[x.b]) && (n < 3 || uni_[x.c]);
      uni_[i] = uniform;
      const std::size_t end = uniform ? w : ld_;
      const auto each = [&](auto f) {
        for (std::size_t v = 0; v < end; v += w) f(v).store_unaligned(out + v);
      };
      const operand oa = at(x.a), ob = at(x.b), oc = at(x.c);
      const auto a = [&](std::size_t v) { return oa(v); };
      const auto b = [&](std::size_t v) { return ob(v); };
      const auto c = [&](std::size_t v) { return oc(v); };
      switch (x.o) {
        case op::input:
          if (in[x.a].uniform)
            B(in[x.a].data[0]).store_unaligned(out);
          else
            at_[i] = in[x.a].data;
          break;
        case op::constant:
        case op::param:
          if (fresh) B(T(x.value)).store_unaligned(out);
          break;
        case op::add:
          each([&](std::size_t v) { return a(v) + b(v); });
          break;
        case op::sub:
          each([&](std::size_t v) { return a(v) - b(v); });
          break;
        case op::mul:
          each([&](std::size_t v) { return a(v) * b(v); });
          break;
        case op::div:
          each([&](std::size_t v) { return a(v) / b(v); });
          break;
        case op::neg:
          each([&](std::size_t v) { return -a(v); });
          break;
        case op::exp:
          each([&](std::size_t v) { return xsimd::exp(a(v)); });
          break;
        case op::log:
          each([&](std::size_t v) { return xsimd::log(a(v)); });
          break;
        case op::sqrt:
          each([&](std::size_t v) { return xsimd::sqrt(a(v)); });
          break;
        case op::tanh:
          each([&](std::size_t v) { return xsimd::tanh(a(v)); });
          break;
        case op::abs:
          each([&](std::size_t v) { return xsimd::abs(a(v)); });
          break;
        case op::pow:
          each([&](std::size_t v) { return xsimd::pow(a(v), B(T(x.value))); });
          break;
        case op::max:
          each([&](std::size_t v) { return xsimd::select(a(v) >= b(v), a(v), b(v)); });
          break;
        case op::min:
          each([&](std::size_t v) { return xsimd::select(a(v) <= b(v), a(v), b(v)); });
          break;
        case op::lt:
          each([&](std::size_t v) { return truth(a(v) < b(v)); });
          break;
        case op::le:
          each([&](std::size_t v) { return truth(a(v) <= b(v)); });
          break;
        case op::gt:
          each([&](std::size_t v) { return truth(a(v) > b(v)); });
          break;
        case op::ge:
          each([&](std::size_t v) { return truth(a(v) >= b(v)); });
          break;
        case op::eq:
          each([&](std::size_t v) { return truth(a(v) == b(v)); });
          break;
        case op::ne:
          each([&](std::size_t v) { return truth(a(v) != b(v)); });
          break;
        case op::land:
          each([&](std::size_t v) { return truth(holds(a(v)) && holds(b(v))); });
          break;
        case op::lor:
          each([&](std::size_t v) { return truth(holds(a(v)) || holds(b(v))); });
          break;
        case op::lnot:
          each([&](std::size_t v) { return truth(!holds(a(v))); });
          break;
        case op::select:
          each([&](std::size_t v) { return xsimd::select(holds(a(v)), b(v), c(v)); });
          break;
      }
    }
    for (std::uint32_t o : p.outputs)  // whole lanes for the caller
      if (uni_[o]) {
        T* out = values_.data() + o * sd_;
        const B x = B::load_unaligned(at_[o]);
        for (std::size_t v = 0; v < ld_; v += w) x.store_unaligned(out + v);
        at_[o] = out;
        uni_[o] = false;
      }
  }

  std::size_t lanes() const noexcept { return ld_; }
  /// Node n's lanes after run() (an output's: every lane; another node the same in every lane:
  /// one batch).
  const T* value(std::uint32_t n) const noexcept { return at_[n]; }

  /// Adjoints of every node of p (just run) from the seeds: (node, its adjoint's lanes). A node's
  /// adjoint is written by its first contribution, not zeroed and added to, and a node that
  /// receives none passes nothing on.
  void reverse(const program& p, std::span<const std::pair<std::uint32_t, const T*>> seeds) {
    if (adj_.size() < p.size() * sd_) adj_.resize(p.size() * sd_);
    zeros_.assign(ld_, T(0));
    written_.assign(p.size(), 0);
    const B zero(T(0));
    for (const auto& [n, s] : seeds) {
      T* to = grad(n);
      for (std::size_t v = 0; v < ld_; v += w)
        (written_[n] ? load(to + v) + load(s + v) : load(s + v)).store_aligned(to + v);
      written_[n] = 1;
    }
    for (std::size_t i = p.size(); i-- > 0;) {
      const node& x = p.code[i];
      if (arity(x.o) == 0 || is_logical(x.o) || !written_[i]) continue;
      const T* g = grad(std::uint32_t(i));
      const operand oa = at(x.a), ob = at(x.b), oy = at(std::uint32_t(i));
      const auto a = [&](std::size_t v) { return oa(v); };
      const auto b = [&](std::size_t v) { return ob(v); };
      const auto y = [&](std::size_t v) { return oy(v); };
      // d(v) · g into node n's adjoint where g is not 0: written by the first contribution
      const auto flow = [&](std::uint32_t n, auto d) {
        T* to = grad(n);
        const bool first = !written_[n];
        written_[n] = 1;
        for (std::size_t v = 0; v < ld_; v += w) {
          const B gv = load(g + v), c = xsimd::select(gv != zero, d(v, gv), zero);
          (first ? c : load(to + v) + c).store_aligned(to + v);
        }
      };
      switch (x.o) {
        case op::add:
          flow(x.a, [](std::size_t, B gv) { return gv; });
          flow(x.b, [](std::size_t, B gv) { return gv; });
          break;
        case op::sub:
          flow(x.a, [](std::size_t, B gv) { return gv; });
          flow(x.b, [](std::size_t, B gv) { return -gv; });
          break;
        case op::mul:
          flow(x.a, [&](std::size_t v, B gv) { return gv * b(v); });
          flow(x.b, [&](std::size_t v, B gv) { return gv * a(v); });
          break;
        case op::div:
          flow(x.a, [&](std::size_t v, B gv) { return gv / b(v); });
          flow(x.b, [&](std::size_t v, B gv) { return -gv * y(v) / b(v); });
          break;
        case op::neg:
          flow(x.a, [](std::size_t, B gv) { return -gv; });
          break;
        case op::exp:
          flow(x.a, [&](std::size_t v, B gv) { return gv * y(v); });
          break;
        case op::log:
          flow(x.a, [&](std::size_t v, B gv) { return gv / a(v); });
          break;
        case op::sqrt:
          flow(x.a, [&](std::size_t v, B gv) {
            const B r = y(v);
            return xsimd::select(r == zero, zero, gv / (B(T(2)) * r));
          });
          break;
        case op::tanh:
          flow(x.a, [&](std::size_t v, B gv) {
            const B t = y(v);
            return gv * (B(T(1)) - t * t);
          });
          break;
        case op::abs:
          flow(x.a, [&](std::size_t v, B gv) { return xsimd::select(a(v) < zero, -gv, gv); });
          break;
        case op::pow:
          flow(x.a, [&](std::size_t v, B gv) { return gv * B(T(x.value)) * xsimd::pow(a(v), B(T(x.value - 1))); });
          break;
        case op::max:
        case op::min: {
          const auto first = [&](std::size_t v) { return x.o == op::max ? a(v) >= b(v) : a(v) <= b(v); };
          flow(x.a, [&](std::size_t v, B gv) { return xsimd::select(first(v), gv, zero); });
          flow(x.b, [&](std::size_t v, B gv) { return xsimd::select(first(v), zero, gv); });
          break;
        }
        case op::select:
          flow(x.b, [&](std::size_t v, B gv) { return xsimd::select(holds(a(v)), gv, zero); });
          flow(x.c, [&](std::size_t v, B gv) { return xsimd::select(holds(a(v)), zero, gv); });
          break;
        default:
          break;
      }
    }
  }

  /// Node n's adjoint's lanes after reverse() (every lane, whatever its value).
  const T* adjoint(std::uint32_t n) const noexcept { return written_[n] ? adj_.data() + n * sd_ : zeros_.data(); }

 private:
  T* grad(std::uint32_t n) noexcept { return adj_.data() + n * sd_; }
  /// A node's lanes as an operation reads them: lanes [v, v + w), or its one batch for every v.
  struct operand {
    const T* p;
    std::size_t step;  // 1, or 0 when the node is the same in every lane
    B operator()(std::size_t v) const { return B::load_unaligned(p + v * step); }
  };
  operand at(std::uint32_t n) const { return {at_[n], uni_[n] ? 0u : 1u}; }
  static B load(const T* p) { return B::load_unaligned(p); }
  static B truth(const M& m) { return xsimd::select(m, B(T(1)), B(T(0))); }
  static M holds(const B& x) { return x != B(T(0)); }

  std::size_t ld_ = 0, sd_ = 0;  // lanes, and the distance between two nodes' lanes
  const program* last_ = nullptr;
  kernel::aligned_vector<T> values_, adj_;
  std::vector<const T*> at_;         // node n's lanes: in values_, or an input's where it lies
  std::vector<char> uni_;            // node n is the same in every lane: one batch at at_[n]
  std::vector<char> written_;        // node n's adjoint has a contribution
  kernel::aligned_vector<T> zeros_;  // the adjoint of a node without one
};

}  // namespace xattn::record

#pragma GCC diagnostic pop
