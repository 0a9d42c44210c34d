#pragma once
// V read where it lies: rows of the accumulator type, 16-bit rows widened in registers (a 16-bit
// KV cache is read once, at half the bytes), a cache's pages where they are, quantized pages
// dequantized as loaded. Decoding's way, and a short head's rows of Acc, which stay in L2 for its
// few query blocks.
#include "../../cache/format.hpp"
#include "../../kernel/pv.hpp"
#include "../../kernel/qk.hpp"
#include "../../policy/problem.hpp"
#include "../../simd/compat.hpp"
#include "../plan/schedule.hpp"

#include <cstdint>
#include <type_traits>

namespace xattn {

template <class Acc>
struct values_in_place {
  /// Whether values of type V in the view vv can be read in place: whole batches of contiguous
  /// features, rows apart by at least a row.
  template <class V, class View>
  static bool takes(const View& vv, const problem& pr) {
    constexpr bool loads = std::is_same_v<V, Acc> || simd::widens16_v<Acc, V> || is_quantized_v<V>;
    return loads && vv.inner_stride() == 1 && pr.v_dim % simd::width<Acc> == 0 &&
           vv.at.stride[2] >= std::ptrdiff_t(pr.v_dim);
  }

  /// The V rows of head (b, hk) from key j0 on, as an accessor for kernel::pv_tile_at.
  template <class View>
  static auto rows_at(const View& vv, std::size_t b, std::size_t hk, std::size_t j0) {
    if constexpr (requires { vv.rows(b, hk); })  // pages
      return vv.rows(b, hk).at(j0, 0);
    else
      return kernel::strided_rows<std::remove_cv_t<std::remove_pointer_t<decltype(vv.data)>>>{vv.row(b, hk, j0),
                                                                                              vv.at.stride[2]};
  }

  template <class View>
  static void accumulate(const View& vv, std::size_t b, std::size_t hk, std::size_t j0, std::size_t cols, const Acc* p,
                         std::size_t lds, std::size_t rows, Acc* o, std::size_t ldo, std::size_t dvp) {
    kernel::pv_tile_at(p, lds, rows, rows_at(vv, b, hk, j0), cols, o, ldo, dvp);
  }

  /// From a cache's pages, f(handle) with the block's value rows (`bytes` of each) prefetched as
  /// the keys are read, both streams in flight while the scores are computed: the hardware
  /// prefetcher does not cross pages, and the values would otherwise wait for the softmax. Only
  /// where a step's keys and values (about twice its values) do not fit the last-level cache, so
  /// that they come from memory: from the cache, the prefetches cost more than they gain (a Sapphire
  /// Rapids' 260 MiB L3 holds every step of the benchmarks, whose float and bfloat16 steps ran 6 %
  /// slower with them). Contiguous values stream well without it. Otherwise false, f not called.
  template <class View, class F>
  static bool with_prefetch(const View& vv, std::size_t b, std::size_t hk, std::size_t j0, std::size_t bytes, F&& f) {
    if constexpr (requires { vv.rows(b, hk); }) {
      if (2 * vv.at.shape[0] * vv.at.shape[1] * vv.at.shape[2] * bytes <= machine::last_level_cache()) return false;
      const auto at = rows_at(vv, b, hk, j0);
      const kernel::rows_prefetch<decltype(at)> also{at, bytes};
      f(also.handle());
      return true;
    } else {
      return false;
    }
  }
};

}  // namespace xattn
