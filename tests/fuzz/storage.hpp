#pragma once
// Operands in every storage the terminals accept. Memory that belongs to no logical element
// (padding, skipped steps) holds NaN, so a kernel that reads outside a view poisons its output.
#include "fuzz_case.hpp"
#include "support/float8_reference.hpp"
#include "support/q4_reference.hpp"
#include "support/q4c_reference.hpp"

#include <xattn/cache.hpp>

#include <xtensor/xmanipulation.hpp>
#include <xtensor/xview.hpp>

#include <algorithm>
#include <array>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace xattn::fuzz {

/// Q, K and V terminals plus the storage they view.
template <class Q, class K, class V>
struct operand_set {
  Q q;
  K k;
  V v;
  std::vector<std::shared_ptr<const void>> keep;
};

template <class T>
const T poison = T(std::numeric_limits<float>::quiet_NaN());

/// The user-facing shape of one operand: (B, S, D) for rank-3 cases, else (B, H, S, D).
inline std::vector<std::size_t> logical_shape(const testing::case_sizes& z, std::size_t h, std::size_t s,
                                              std::size_t d) {
  return z.three_d ? std::vector<std::size_t>{z.B, s, d} : std::vector<std::size_t>{z.B, h, s, d};
}

/// Rank-0 terminals (xarray-typed): contiguous, strided view, or transposed storage.
template <class T>
tensor_ref<T, 0> rank0_operand(storage kind, const std::vector<std::size_t>& shape, double amp, testing::rng& r,
                               std::vector<std::shared_ptr<const void>>& keep) {
  const std::size_t n = shape.size(), s_axis = n - 2, d_axis = n - 1;
  auto fill = [&](auto&& view) {
    for (auto& x : view) x = T(r.uniform(-1, 1) * amp);
  };
  auto check_in_place = [](const auto& t) {
    if (t.owned) throw std::logic_error("fuzzer: a view was copied, not viewed in place");
    return t;
  };
  if (kind == storage::contiguous) {
    auto base = std::make_shared<xt::xarray<T>>(xt::xarray<T>::from_shape(shape));
    fill(*base);
    keep.push_back(base);
    return check_in_place(ref(*base));
  }
  if (kind == storage::strided) {
    const std::size_t step_s = r.size(1, 3), step_d = r.size(1, 2), off_s = r.size(0, 2), off_d = r.size(0, 3);
    auto big = shape;
    big[s_axis] = off_s + shape[s_axis] * step_s;
    big[d_axis] = off_d + shape[d_axis] * step_d + r.size(0, 2);
    auto base = std::make_shared<xt::xarray<T>>(xt::xarray<T>::from_shape(big));
    base->fill(poison<T>);
    keep.push_back(base);
    auto rs = xt::range(off_s, off_s + shape[s_axis] * step_s, step_s);
    auto rd = xt::range(off_d, off_d + shape[d_axis] * step_d, step_d);
    if (n == 3) {
      auto v = xt::view(*base, xt::all(), rs, rd);
      fill(v);
      return check_in_place(ref(v));
    }
    auto v = xt::view(*base, xt::all(), xt::all(), rs, rd);
    fill(v);
    return check_in_place(ref(v));
  }
  // transposed: (B, S, D) kept as (B, D, S); (B, H, S, D) kept as (B, S, H, D)
  const std::vector<std::size_t> perm =
      n == 3 ? std::vector<std::size_t>{0, 2, 1} : std::vector<std::size_t>{0, 2, 1, 3};
  std::vector<std::size_t> stored(n);
  for (std::size_t a = 0; a < n; ++a) stored[a] = shape[perm[a]];
  auto base = std::make_shared<xt::xarray<T>>(xt::xarray<T>::from_shape(stored));
  keep.push_back(base);
  auto v = xt::transpose(*base, perm);
  fill(v);
  return check_in_place(ref(v));
}

/// ref(ptr, shape, strides) over a buffer whose axes are stored in a random order, padded, and
/// possibly reversed (negative strides).
template <class T>
tensor_ref<T, 4> raw_operand(std::array<std::size_t, 4> shape, double amp, testing::rng& r,
                             std::vector<std::shared_ptr<const void>>& keep) {
  std::array<std::size_t, 4> order{0, 1, 2, 3};  // storage order, outermost first
  std::shuffle(order.begin(), order.end(), r.gen);
  std::array<std::ptrdiff_t, 4> strides{};
  std::ptrdiff_t span = 1;
  for (std::size_t k = 4; k-- > 0;) {
    const std::size_t a = order[k];
    strides[a] = span;
    span *= std::ptrdiff_t(shape[a] + (r.coin(0.3) ? r.size(1, 3) : 0));
  }
  auto buf = std::make_shared<std::vector<T>>(std::size_t(span), poison<T>);
  keep.push_back(buf);
  std::ptrdiff_t origin = 0;
  for (std::size_t a = 0; a < 4; ++a)
    if (shape[a] > 1 && r.coin(0.2)) {  // reversed axis: start at its last element, walk backwards
      origin += std::ptrdiff_t(shape[a] - 1) * strides[a];
      strides[a] = -strides[a];
    }
  const strided_view<T> fill{buf->data() + origin, {shape, strides}};
  for (std::size_t b = 0; b < shape[0]; ++b)
    for (std::size_t h = 0; h < shape[1]; ++h)
      for (std::size_t s = 0; s < shape[2]; ++s)
        for (std::size_t d = 0; d < shape[3]; ++d) fill(b, h, s, d) = T(r.uniform(-1, 1) * amp);
  return ref(static_cast<const T*>(fill.data), shape, strides);
}

/// heads(view, H) over (B, S, H*D) rows padded on the right, sometimes every other row.
template <class T>
auto packed_operand(std::size_t batch, std::size_t heads_n, std::size_t seq, std::size_t dim, double amp,
                    testing::rng& r, std::vector<std::shared_ptr<const void>>& keep) {
  const std::size_t step = r.size(1, 2), width = heads_n * dim;
  auto base = std::make_shared<xt::xarray<T>>(xt::xarray<T>::from_shape({batch, seq * step, width + r.size(0, 5)}));
  base->fill(poison<T>);
  keep.push_back(base);
  auto v = xt::view(*base, xt::all(), xt::range(0, seq * step, step), xt::range(0, width));
  for (auto& x : v) x = T(r.uniform(-1, 1) * amp);
  auto t = heads(v, heads_n);
  if (t.owned) throw std::logic_error("fuzzer: a packed view was copied, not viewed in place");
  return t;
}

/// K and V as a kv_cache's pages: each sequence of z.B gets a length in [1, Skv] (one of them
/// Skv), appended in chunks of drawn sizes into pages of a drawn size; a later sequence may start
/// as a fork of the first (sharing its pages, the partial one copied on its first append). Every
/// element the terminals show is checked against what was appended, rounded to the page type:
/// the reference reads the same pages, so a wrong page index would otherwise go unseen.
/// float8_e4m3 pages hold what the specification's nearest codes give (support/float8_reference.hpp),
/// q4 pages q4_0's values (support/q4_reference.hpp), q4c keys KIVI's over each page's tokens
/// (support/q4c_reference.hpp). Every sequence holds at least min_len tokens.
template <class TK, class TV>
auto cache_operands(const testing::case_sizes& z, testing::rng& r, std::vector<std::shared_ptr<const void>>& keep,
                    std::size_t min_len) {
  const std::size_t page_size = std::array<std::size_t, 5>{1, 3, 4, 16, 64}[r.size(0, 4)], dim = z.Dk;
  std::vector<std::size_t> lens(z.B);
  for (auto& l : lens) l = r.size(std::max<std::size_t>(1, min_len), z.Skv);
  lens[r.size(0, z.B - 1)] = z.Skv;
  std::size_t tokens = 0;
  for (auto l : lens) tokens += l + 2 * page_size;  // a fork's copied page, and partial last pages
  auto cache = std::make_shared<kv_cache<TK, TV>>(
      kv_cache_options{.kv_heads = z.Hkv, .head_dim = dim, .page_size = page_size, .max_tokens = tokens});
  keep.push_back(cache);
  // what each sequence holds, as appended: (Hkv, S, D) keys and values
  std::vector<xt::xtensor<float, 3>> ks, vs;
  std::vector<sequence_id> ids;
  for (std::size_t b = 0; b < z.B; ++b) {
    xt::xtensor<float, 3> k = xt::xtensor<float, 3>::from_shape({z.Hkv, lens[b], dim}), v = k;
    for (auto& x : k) x = float(r.uniform(-1, 1));
    for (auto& x : v) x = float(r.uniform(-1, 1));
    std::size_t t = 0;
    if (b > 0 && lens[b] >= lens[0] && r.coin(0.5)) {  // the first lens[0] rows are the first sequence's
      ids.push_back(cache->fork(ids[0]));
      xt::view(k, xt::all(), xt::range(0, lens[0]), xt::all()) = ks[0];
      xt::view(v, xt::all(), xt::range(0, lens[0]), xt::all()) = vs[0];
      t = lens[0];
    } else {
      ids.push_back(cache->add_sequence());
    }
    while (t < lens[b]) {
      const std::size_t n = std::min(lens[b] - t, r.coin(0.5) ? r.size(1, 5) : r.size(1, lens[b]));
      const xt::xtensor<float, 3> kc = xt::view(k, xt::all(), xt::range(t, t + n), xt::all());
      const xt::xtensor<float, 3> vc = xt::view(v, xt::all(), xt::range(t, t + n), xt::all());
      cache->append(ids[b], kc, vc);
      t += n;
    }
    ks.push_back(std::move(k));
    vs.push_back(std::move(v));
  }
  auto kt = cache->keys(ids);
  auto vt = cache->values(ids);
  const auto stored = [page_size](auto type, const xt::xtensor<float, 3>& x) {
    using T = decltype(type);
    if constexpr (std::is_same_v<T, float8_e4m3>) {
      return testing::e4m3_rows(x);
    } else if constexpr (std::is_same_v<T, q4>) {
      return testing::q4_0_rows(x);
    } else if constexpr (std::is_same_v<T, q4c>) {
      return testing::q4c_rows(x, page_size);
    } else {
      xt::xtensor<float, 3> y = x;
      for (auto& e : y) e = float(T(e));
      return y;
    }
  };
  for (std::size_t b = 0; b < z.B; ++b) {
    const auto kb = stored(TK{}, ks[b]), vb = stored(TV{}, vs[b]);
    for (std::size_t h = 0; h < z.Hkv; ++h)
      for (std::size_t j = 0; j < lens[b]; ++j)
        for (std::size_t d = 0; d < dim; ++d)
          if (float(kt.view(b, h, j, d)) != kb(h, j, d) || float(vt.view(b, h, j, d)) != vb(h, j, d))
            throw std::logic_error("fuzzer: cache terminal element (" + std::to_string(b) + ", " + std::to_string(h) +
                                   ", " + std::to_string(j) + ", " + std::to_string(d) +
                                   ") is not the one appended (page_size " + std::to_string(page_size) + ")");
  }
  return std::pair{kt, vt};
}

/// A cache of K keys and V values, as run_on's Pages.
template <class K, class V>
struct pages_of {};

/// The key and value types of a cache's pages: Pages for both, the element kind's (void), or
/// pages_of's.
template <element E, class Pages>
struct page_types {
  using k = Pages;
  using v = Pages;
};
template <element E>
struct page_types<E, void> {
  using k = typename element_types<E>::k;
  using v = typename element_types<E>::v;
};
template <element E, class K, class V>
struct page_types<E, pages_of<K, V>> {
  using k = K;
  using v = V;
};

/// Build Q, K, V of element kind E for a terminal kind (compile time) and a storage (run time);
/// a cache's pages of type Pages unless it is void.
template <element E, terminal Kind, class Pages = void>
auto operands(const fuzz_case& c, testing::rng& r) {
  using TQ = typename element_types<E>::q;
  using TK = typename page_types<E, Pages>::k;
  using TV = typename page_types<E, Pages>::v;
  const auto& z = c.sizes;
  if constexpr (Kind == terminal::rank0) {
    operand_set<tensor_ref<TQ, 0>, tensor_ref<TK, 0>, tensor_ref<TV, 0>> o;
    o.q = rank0_operand<TQ>(c.kind, logical_shape(z, z.Hq(), z.Sq, z.Dq), c.q_amplitude, r, o.keep);
    o.k = rank0_operand<TK>(c.kind, logical_shape(z, z.Hkv, z.Skv, z.Dk), 1, r, o.keep);
    o.v = rank0_operand<TV>(c.kind, logical_shape(z, z.Hkv, z.Skv, z.Dv), 1, r, o.keep);
    return o;
  } else if constexpr (Kind == terminal::raw) {
    operand_set<tensor_ref<TQ, 4>, tensor_ref<TK, 4>, tensor_ref<TV, 4>> o;
    o.q = raw_operand<TQ>({z.B, z.Hq(), z.Sq, z.Dq}, c.q_amplitude, r, o.keep);
    o.k = raw_operand<TK>({z.B, z.Hkv, z.Skv, z.Dk}, 1, r, o.keep);
    o.v = raw_operand<TV>({z.B, z.Hkv, z.Skv, z.Dv}, 1, r, o.keep);
    return o;
  } else if constexpr (Kind == terminal::cache) {
    operand_set<tensor_ref<TQ, 0>, cache_ref<TK>, cache_ref<TV>> o;
    o.q = rank0_operand<TQ>(storage::contiguous, logical_shape(z, z.Hq(), z.Sq, z.Dq), c.q_amplitude, r, o.keep);
    std::tie(o.k, o.v) = cache_operands<TK, TV>(z, r, o.keep, c.masks == tree ? z.Sq : 1);
    return o;
  } else {
    operand_set<tensor_ref<TQ, 3, true>, tensor_ref<TK, 3, true>, tensor_ref<TV, 3, true>> o;
    o.q = packed_operand<TQ>(z.B, z.Hq(), z.Sq, z.Dq, c.q_amplitude, r, o.keep);
    o.k = packed_operand<TK>(z.B, z.Hkv, z.Skv, z.Dk, 1, r, o.keep);
    o.v = packed_operand<TV>(z.B, z.Hkv, z.Skv, z.Dv, 1, r, o.keep);
    return o;
  }
}

}  // namespace xattn::fuzz
