// The C interface's key/value cache: the cache calls, each checked in the caller's terms first,
// then run on the C++ kv_cache (whose own checks leave it unchanged on any error).
#include <xattn/c_api/cache.hpp>
#include <xattn/c_api/status.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

struct xattn_kv_cache {
  std::unique_ptr<xattn::c_api::any_cache> impl;
  xattn_cache_options options;
};

namespace {

using namespace xattn;

/// guarded, with a full pool (std::length_error from the cache) as XATTN_OUT_OF_MEMORY.
template <class F>
xattn_status cache_guarded(const char* who, F&& f) noexcept {
  std::string full;
  const xattn_status s = c_api::guarded(who, [&] {
    try {
      f();
    } catch (const std::length_error& e) {
      full = c_api::in_c_terms(e.what(), who);
    }
  });
  if (s != XATTN_OK || full.empty()) return s;
  c_api::last_error() = full;
  return XATTN_OUT_OF_MEMORY;
}

c_api::any_cache& impl_of(const xattn_kv_cache* c, const char* who) {
  if (c == nullptr) fail(who, ": cache is NULL");
  return *c->impl;
}

/// k_rows or v_rows (kv_heads, n, head_dim) as a dense float (1, kv_heads, n, head_dim) copy.
struct float_rows {
  std::vector<float> data;
  raw_tensor<const float, 4> t;

  float_rows(const xattn_tensor* x, const char* name, const xattn_cache_options& o, const char* who) {
    c_api::check_tensor(who, x, name, 3);
    if (x->dtype != XATTN_F32 && x->dtype != XATTN_F64 && x->dtype != XATTN_BF16 && x->dtype != XATTN_F16)
      fail(who, ": ", name, " has dtype ", c_api::dtype_name(x->dtype),
           " but must be XATTN_F32, XATTN_F64, XATTN_BF16 or XATTN_F16");
    if (x->shape[0] != o.kv_heads || x->shape[2] != o.head_dim)
      fail(who, ": ", name, " has shape ", c_api::shape_of(*x), " but the cache holds (kv_heads, n, head_dim) = (",
           o.kv_heads, ", n, ", o.head_dim, ")");
    const std::size_t H = std::size_t(x->shape[0]), n = std::size_t(x->shape[1]), D = std::size_t(x->shape[2]);
    data.resize(H * n * D);
    c_api::detail::with_element(x->dtype, x->data, [&](auto* p) {
      std::size_t at = 0;
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t s = 0; s < n; ++s)
          for (std::size_t d = 0; d < D; ++d)
            data[at++] = float(p[std::ptrdiff_t(h) * x->strides[0] + std::ptrdiff_t(s) * x->strides[1] +
                                 std::ptrdiff_t(d) * x->strides[2]]);
    });
    t = {data.data(), {1, H, n, D}, {std::ptrdiff_t(H * n * D), std::ptrdiff_t(n * D), std::ptrdiff_t(D), 1}};
  }
};

}  // namespace

extern "C" {

xattn_cache_options xattn_cache_defaults(void) {
  xattn_cache_options o{};
  o.page_size = 16;
  o.max_tokens = 1 << 16;
  o.key_dtype = XATTN_F32;
  o.value_dtype = XATTN_F32;
  return o;
}

xattn_kv_cache* xattn_cache_create(const xattn_cache_options* options) {
  const char* who = "xattn_cache_create";
  xattn_kv_cache* made = nullptr;
  const xattn_status s = cache_guarded(who, [&] {
    if (options == nullptr) fail(who, ": options is NULL (start from xattn_cache_defaults())");
    const xattn_cache_options& o = *options;
    const std::pair<const char*, std::int64_t> sizes[] = {
        {"kv_heads", o.kv_heads}, {"head_dim", o.head_dim}, {"page_size", o.page_size}, {"max_tokens", o.max_tokens}};
    for (const auto& [name, v] : sizes)
      if (v <= 0) fail(who, ": options.", name, " is ", v, "; it must be > 0");
    for (const auto& [name, t] : {std::pair{"key_dtype", o.key_dtype}, std::pair{"value_dtype", o.value_dtype}})
      if (t != XATTN_F32 && t != XATTN_BF16 && t != XATTN_F16 && t != XATTN_Q8_0 && t != XATTN_FP8_E4M3 &&
          t != XATTN_Q4_0 && t != XATTN_Q4C)
        fail(who, ": options.", name, " is ", c_api::dtype_name(t),
             "; a cache stores XATTN_F32, XATTN_BF16, XATTN_F16, XATTN_Q8_0, XATTN_FP8_E4M3, XATTN_Q4_0 or XATTN_Q4C");
    if (o.value_dtype == XATTN_Q4C)
      fail(who, ": options.value_dtype is XATTN_Q4C, which quantizes keys per channel; values take XATTN_Q4_0");
    if (o.key_dtype == XATTN_Q4C && o.value_dtype != XATTN_Q4_0)
      fail(who, ": options.key_dtype is XATTN_Q4C and options.value_dtype ", c_api::dtype_name(o.value_dtype),
           "; XATTN_Q4C keys take XATTN_Q4_0 values");
    for (const xattn_dtype paired : {XATTN_FP8_E4M3, XATTN_Q4_0})
      if (o.key_dtype != XATTN_Q4C && (o.key_dtype == paired) != (o.value_dtype == paired))
        fail(who, ": options.key_dtype is ", c_api::dtype_name(o.key_dtype), " and options.value_dtype ",
             c_api::dtype_name(o.value_dtype), "; ", c_api::dtype_name(paired),
             " keys and values go together (other formats mix freely)");
    kv_cache_options k;
    if (o.rope != XATTN_ROPE_NONE) {
      if (o.rope != XATTN_ROPE_HALF && o.rope != XATTN_ROPE_INTERLEAVED)
        fail(who, ": options.rope is ", int(o.rope),
             "; it must be XATTN_ROPE_NONE, XATTN_ROPE_HALF or XATTN_ROPE_INTERLEAVED");
      if (!(o.rope_base > 0) || !std::isfinite(o.rope_base))
        fail(who, ": options.rope_base is ", o.rope_base, "; it must be finite and > 0");
      if (o.rope_dims < 0 || o.rope_dims % 2 != 0 || o.rope_dims > o.head_dim)
        fail(who, ": options.rope_dims is ", o.rope_dims, "; it must be even and at most head_dim = ", o.head_dim,
             " (0: all)");
      k.rope = rope_options{float(o.rope_base),
                            std::size_t(o.rope_dims),
                            o.rope == XATTN_ROPE_INTERLEAVED ? rope_style::interleaved : rope_style::half,
                            {}};
    }
    k.kv_heads = std::size_t(o.kv_heads);
    k.head_dim = std::size_t(o.head_dim);
    k.page_size = std::size_t(o.page_size);
    k.max_tokens = std::size_t(o.max_tokens);
    k.rotate = o.rotate != 0;
    auto impl = c_api::with_cache_element(o.key_dtype,
                                          [&](auto key) { return c_api::make_cache<decltype(key)>(o.value_dtype, k); });
    made = new xattn_kv_cache{std::move(impl), o};
  });
  return s == XATTN_OK ? made : nullptr;
}

void xattn_cache_destroy(xattn_kv_cache* cache) { delete cache; }

xattn_status xattn_cache_add_sequence(xattn_kv_cache* cache, xattn_sequence* id) {
  const char* who = "xattn_cache_add_sequence";
  return cache_guarded(who, [&] {
    auto& c = impl_of(cache, who);
    if (id == nullptr) fail(who, ": id is NULL");
    *id = c_api::to_c(c.add_sequence());
  });
}

xattn_status xattn_cache_append(xattn_kv_cache* cache, xattn_sequence id, const xattn_tensor* k_rows,
                                const xattn_tensor* v_rows) {
  const char* who = "xattn_cache_append";
  return cache_guarded(who, [&] {
    auto& c = impl_of(cache, who);
    const float_rows k(k_rows, "k_rows", cache->options, who), v(v_rows, "v_rows", cache->options, who);
    if (k.t.shape[2] != v.t.shape[2])
      fail(who, ": k_rows ", c_api::shape_of(*k_rows), " and v_rows ", c_api::shape_of(*v_rows),
           " hold different numbers of tokens");
    c.append(c_api::from_c(id), k.t, v.t);
  });
}

xattn_status xattn_cache_fork(xattn_kv_cache* cache, xattn_sequence id, xattn_sequence* fork) {
  const char* who = "xattn_cache_fork";
  return cache_guarded(who, [&] {
    auto& c = impl_of(cache, who);
    if (fork == nullptr) fail(who, ": fork is NULL");
    *fork = c_api::to_c(c.fork(c_api::from_c(id)));
  });
}

xattn_status xattn_cache_release(xattn_kv_cache* cache, xattn_sequence id) {
  const char* who = "xattn_cache_release";
  return cache_guarded(who, [&] { impl_of(cache, who).release(c_api::from_c(id)); });
}

xattn_status xattn_cache_truncate(xattn_kv_cache* cache, xattn_sequence id, int64_t length) {
  const char* who = "xattn_cache_truncate";
  return cache_guarded(who, [&] {
    auto& c = impl_of(cache, who);
    if (length < 0) fail(who, ": length is ", length, "; it must be >= 0");
    c.truncate(c_api::from_c(id), std::size_t(length));
  });
}

xattn_status xattn_cache_keep(xattn_kv_cache* cache, xattn_sequence id, const int64_t* positions, int64_t n) {
  const char* who = "xattn_cache_keep";
  return cache_guarded(who, [&] {
    auto& c = impl_of(cache, who);
    if (n < 0) fail(who, ": n is ", n, "; it must be >= 0");
    if (n > 0 && positions == nullptr) fail(who, ": positions is NULL but n is ", n);
    std::vector<std::size_t> kept(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      if (positions[i] < 0) fail(who, ": positions[", i, "] is ", positions[i], "; it must be >= 0");
      kept[std::size_t(i)] = std::size_t(positions[i]);
    }
    c.keep(c_api::from_c(id), kept);
  });
}

xattn_status xattn_cache_length(const xattn_kv_cache* cache, xattn_sequence id, int64_t* length) {
  const char* who = "xattn_cache_length";
  return cache_guarded(who, [&] {
    auto& c = impl_of(cache, who);
    if (length == nullptr) fail(who, ": length is NULL");
    *length = std::int64_t(c.length(c_api::from_c(id)));
  });
}

xattn_status xattn_cache_reserve(xattn_kv_cache* cache, int64_t tokens) {
  const char* who = "xattn_cache_reserve";
  return cache_guarded(who, [&] {
    auto& c = impl_of(cache, who);
    if (tokens < 0) fail(who, ": tokens is ", tokens, "; it must be >= 0");
    c.reserve(std::size_t(tokens));
  });
}

xattn_status xattn_cache_attention(const xattn_kv_cache* cache, const xattn_sequence* seq_ids, int64_t n,
                                   const xattn_tensor* q, const xattn_attention_desc* desc, xattn_tensor* out,
                                   xattn_tensor* lse) {
  const char* who = "xattn_cache_attention";
  return cache_guarded(who, [&] {
    const auto& c = impl_of(cache, who);
    const xattn_cache_options& o = cache->options;
    if (n <= 0) fail(who, ": n is ", n, "; attend at least one sequence");
    if (seq_ids == nullptr) fail(who, ": seq_ids is NULL");
    c_api::check_tensor(who, q, "q", 4);
    if (q->shape[0] != n)
      fail(who, ": q has shape ", c_api::shape_of(*q), " but ", n, " sequences: q must be (n, Hq, Sq, head_dim)");
    if (q->shape[3] != o.head_dim)
      fail(who, ": q has shape ", c_api::shape_of(*q), " but the cache's head_dim is ", o.head_dim);
    if (o.kv_heads == 0 || q->shape[1] % o.kv_heads != 0)
      fail(who, ": q has shape ", c_api::shape_of(*q), ": its ", q->shape[1],
           " heads are not a multiple of the cache's ", o.kv_heads, " kv_heads");
    if (q->dtype == XATTN_F64)
      throw c_api::unsupported(std::string("xattn: ") + who +
                               ": q is XATTN_F64; a cache attends in float (F32, BF16 or F16 queries)");
    if (desc != nullptr) {
      const bool float_mask = desc->mask != nullptr && desc->mask->dtype != XATTN_BOOL;
      const std::pair<const char*, bool> refused[] = {
          {"desc.dropout_p (a training option: a cache has no backward)", desc->dropout_p != 0},
          {"desc.rope (a cache's keys turn as they are stored: options.rope, which turns the queries too)",
           desc->rope != XATTN_ROPE_NONE},
          {"desc.additive", desc->additive != nullptr},
          {"desc.bias with a float desc.mask (add them into one)", desc->bias != nullptr && float_mask},
          {"desc.causal = XATTN_CAUSAL_TOP_LEFT (a cache's queries are its newest tokens: XATTN_CAUSAL_BOTTOM_RIGHT)",
           desc->causal == XATTN_CAUSAL_TOP_LEFT}};
      for (const auto& [name, set] : refused)
        if (set) throw c_api::unsupported(std::string("xattn: ") + who + ": " + name + " is not taken with a cache");
    }
    c_api::cache_call call;
    std::int64_t longest = 0;
    for (std::int64_t b = 0; b < n; ++b) {
      call.batch.push_back(c_api::from_c(seq_ids[b]));
      longest = std::max(longest, std::int64_t(c.length(call.batch.back())));
    }
    if (longest == 0) fail(who, ": the ", n, " sequences hold no tokens: softmax over an empty set is undefined");
    // the options and out, lse as xattn_forward checks them, against keys and values of the batch's
    // shape (B, kv_heads, longest, head_dim): stand-ins at a byte of their own, read by nothing
    static const float stand_in = 0;
    const xattn_tensor kv{const_cast<float*>(&stand_in), q->dtype, 4, {n, o.kv_heads, longest, o.head_dim}, {}};
    call.a = c_api::forward_arguments(q, &kv, &kv, desc, out, lse, who);
    call.a.where = align::bottom_right;  // causal and window bounds at each sequence's end
    if (call.a.bias.given) {             // without a backward, a bias is one more additive term
      call.a.additive_mask = call.a.bias;
      call.a.bias = {};
    }
    // under the cache's rope the queries turn at their positions: the newest Sq of each sequence
    std::vector<std::int64_t> positions;
    std::optional<rotary> turn;
    if (const auto& r = c.options().rope) {
      const std::size_t B = std::size_t(n), Sq = std::size_t(q->shape[2]);
      positions.resize(B * Sq);
      for (std::size_t b = 0; b < B; ++b) {
        const std::size_t len = c.length(call.batch[b]);
        if (len < Sq)
          fail(who, ": sequence ", b, " of the batch holds ", len, " tokens, fewer than q's ", Sq,
               " queries, which are its newest tokens under rope");
        for (std::size_t i = 0; i < Sq; ++i) positions[b * Sq + i] = std::int64_t(len - Sq + i);
      }
      turn = rotary{nd_ref<std::int64_t>{positions.data(), {B, Sq}, {std::ptrdiff_t(Sq), 1}, {}}, 0, *r};
    }
    // q in float (a copy unless it is float already), out through a float scratch unless float
    const c_api::detail::in_acc<float> qf(call.a.q, call.a.dtype, turn);
    const c_api::gradient_target target{call.a.out_dtype, call.a.out};
    c_api::detail::out_acc<float> result(target, call.a.out.shape);
    std::vector<float> lse_scratch;
    float* lse_at = static_cast<float*>(call.a.lse);
    if (lse_at == nullptr) {
      const auto& s = call.a.out.shape;
      lse_scratch.resize(s[0] * s[1] * s[2]);
      lse_at = lse_scratch.data();
      call.a.lse_shape = {s[0], s[1], s[2]};
      call.a.lse_strides = {std::ptrdiff_t(s[1] * s[2]), std::ptrdiff_t(s[2]), 1};
    }
    c.attention(call, qf.t, result.t, lse_at);
    result.finish();
  });
}

}  // extern "C"
