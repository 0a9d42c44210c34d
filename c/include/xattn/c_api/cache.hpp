#pragma once
// The C interface's paged key/value cache: xattn_kv_cache owns a kv_cache<K, V> of the element
// types its options name, behind one interface (the types are a run-time choice in C), and
// xattn_cache_attention runs the C++ DSL's expression over the cache's terminals.
#include "buffers.hpp"
#include "general.hpp"

#include <xattn/cache.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace xattn::c_api {

/// A sequence id as C sees it: the slot in the low 32 bits, the generation in the high ones.
inline std::uint64_t to_c(sequence_id s) noexcept { return std::uint64_t(s.generation) << 32 | s.slot; }
inline sequence_id from_c(std::uint64_t s) noexcept { return {std::uint32_t(s & 0xffffffffu), std::uint32_t(s >> 32)}; }

/// What xattn_cache_attention was given besides the cache, checked: the options as xattn_forward
/// takes them, and the batch.
struct cache_call {
  forward_args a;
  std::vector<sequence_id> batch;
};

/// A kv_cache of some element types.
class any_cache {
 public:
  virtual ~any_cache() = default;
  virtual const kv_cache_options& options() const noexcept = 0;
  virtual sequence_id add_sequence() = 0;
  virtual sequence_id fork(sequence_id a) = 0;
  virtual void release(sequence_id a) = 0;
  virtual void truncate(sequence_id a, std::size_t length) = 0;
  virtual void keep(sequence_id a, const std::vector<std::size_t>& positions) = 0;
  virtual std::size_t length(sequence_id a) const = 0;
  virtual void reserve(std::size_t tokens) = 0;
  virtual std::size_t free_pages() const noexcept = 0;
  /// Appends (kv_heads, n, head_dim) rows of float.
  virtual void append(sequence_id a, const raw_tensor<const float, 4>& k, const raw_tensor<const float, 4>& v) = 0;
  /// The attention of q (a float copy) over the batch, into out (float, scratch or the caller's).
  virtual void attention(const cache_call& c, const raw_tensor<const float, 4>& q, raw_tensor<float, 4>& out,
                         float* lse) const = 0;
};

/// f(softmax(masks([modify(]scores[, terms)]), sinks) * V): one expression for every option a cache
/// call takes (general_parts: the band, lengths, documents and a bool mask given or not, softcap,
/// a float mask or bias and ALiBi as terms; no sinks is a sink of -inf).
template <class Q, class K, class V, class F>
void with_cache_attention(const forward_args& a, const Q& q, const K& k, const V& v, F&& f) {
  const general_parts<float> parts(a);
  const auto scores = q * trans(k) * a.scale;
  with_flag(parts.has_terms(), [&](auto terms) {
    const auto modified = [&] {
      if constexpr (decltype(terms)::value)
        return modify(scores, parts.terms);
      else
        return scores;
    }();
    f(softmax(parts.masks.on(modified), sinks(parts.sink_values)) * v);
  });
}

template <class KT, class VT>
class typed_cache final : public any_cache {
 public:
  explicit typed_cache(const kv_cache_options& o) : c_(o) {}
  const kv_cache_options& options() const noexcept override { return c_.options(); }
  sequence_id add_sequence() override { return c_.add_sequence(); }
  sequence_id fork(sequence_id a) override { return c_.fork(a); }
  void release(sequence_id a) override { c_.release(a); }
  void truncate(sequence_id a, std::size_t length) override { c_.truncate(a, length); }
  void keep(sequence_id a, const std::vector<std::size_t>& positions) override { c_.keep(a, positions); }
  std::size_t length(sequence_id a) const override { return c_.length(a); }
  void reserve(std::size_t tokens) override { c_.reserve(tokens); }
  std::size_t free_pages() const noexcept override { return c_.free_pages(); }
  void append(sequence_id a, const raw_tensor<const float, 4>& k, const raw_tensor<const float, 4>& v) override {
    c_.append(a, ref(k.data, k.shape, k.strides), ref(v.data, v.shape, v.strides));
  }
  void attention(const cache_call& c, const raw_tensor<const float, 4>& q, raw_tensor<float, 4>& out,
                 float* lse) const override {
    const auto K = c_.keys(c.batch);
    const auto V = c_.values(c.batch);
    with_cache_attention(c.a, ref(q.data, q.shape, q.strides), K, V, [&](const auto& e) {
      eval_with_lse_into(e, out.data, out.shape, out.strides, lse, c.a.lse_shape, c.a.lse_strides, c.a.sch);
    });
  }

 private:
  kv_cache<KT, VT> c_;
};

/// A cache of keys KT and values of the element type `values` names (cache_*.cpp, one per KT).
template <class KT>
std::unique_ptr<any_cache> make_cache(xattn_dtype values, const kv_cache_options& o);

extern template std::unique_ptr<any_cache> make_cache<float>(xattn_dtype, const kv_cache_options&);
extern template std::unique_ptr<any_cache> make_cache<bfloat16>(xattn_dtype, const kv_cache_options&);
extern template std::unique_ptr<any_cache> make_cache<float16>(xattn_dtype, const kv_cache_options&);
extern template std::unique_ptr<any_cache> make_cache<std::int8_t>(xattn_dtype, const kv_cache_options&);
extern template std::unique_ptr<any_cache> make_cache<float8_e4m3>(xattn_dtype, const kv_cache_options&);
extern template std::unique_ptr<any_cache> make_cache<q4>(xattn_dtype, const kv_cache_options&);
extern template std::unique_ptr<any_cache> make_cache<q4c>(xattn_dtype, const kv_cache_options&);

/// The element type a cache dtype names, as f(T{}).
template <class F>
decltype(auto) with_cache_element(xattn_dtype t, F&& f) {
  switch (t) {
    case XATTN_BF16:
      return f(bfloat16{});
    case XATTN_F16:
      return f(float16{});
    case XATTN_Q8_0:
      return f(std::int8_t{});
    case XATTN_FP8_E4M3:
      return f(float8_e4m3{});
    case XATTN_Q4_0:
      return f(q4{});
    case XATTN_Q4C:
      return f(q4c{});
    default:
      return f(float{});
  }
}

/// Formats whose keys and values go together: each pairing is a whole attention compiled, and
/// these are stored alike (llama.cpp and vLLM do not mix them either); keys quantized per channel
/// (q4c) take q4 values, as KIVI's 4-bit caches.
template <class T>
inline constexpr bool paired_format_v =
    std::is_same_v<T, float8_e4m3> || std::is_same_v<T, q4> || std::is_same_v<T, q4c>;
template <class KT>
using paired_values_t = std::conditional_t<std::is_same_v<KT, q4c>, q4, KT>;

template <class KT>
std::unique_ptr<any_cache> make_cache(xattn_dtype values, const kv_cache_options& o) {
  if constexpr (paired_format_v<KT>)
    return std::make_unique<typed_cache<KT, paired_values_t<KT>>>(o);
  else
    return with_cache_element(values, [&](auto v) -> std::unique_ptr<any_cache> {
      if constexpr (paired_format_v<decltype(v)>)
        return nullptr;  // refused before (xattn_cache_create)
      else
        return std::make_unique<typed_cache<KT, decltype(v)>>(o);
    });
}

}  // namespace xattn::c_api
