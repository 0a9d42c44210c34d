#pragma once
// The one overlap rule of the C interface: the bytes each tensor of a call reaches, the call's
// tensors as one table (what desc points to among them) and the check that a tensor the call
// writes shares no byte with any other.
#include <xattn.h>
#include <xattn/error.hpp>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace xattn::c_api {

inline std::size_t element_size(xattn_dtype t) {
  switch (t) {
    case XATTN_F64:
    case XATTN_I64:
      return 8;
    case XATTN_BF16:
    case XATTN_F16:
      return 2;
    case XATTN_BOOL:
      return 1;
    default:
      return 4;
  }
}

/// The bytes a tensor's elements reach, [lo, hi) (lo == hi: none).
inline std::pair<const char*, const char*> bytes_of(const xattn_tensor& t) {
  std::int64_t lo = 0, hi = 0;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] == 0) return {nullptr, nullptr};
    const std::int64_t step = (t.shape[i] - 1) * t.strides[i];
    (step < 0 ? lo : hi) += step;
  }
  const char* base = static_cast<const char*>(t.data);
  const auto size = std::int64_t(element_size(t.dtype));
  return {base + lo * size, base + (hi + 1) * size};
}

inline bool overlap(const xattn_tensor& a, const xattn_tensor& b) {
  const auto [alo, ahi] = bytes_of(a);
  const auto [blo, bhi] = bytes_of(b);
  return alo != ahi && blo != bhi && alo < bhi && blo < ahi;
}

/// One tensor of a call, as the overlap rule sees it (t NULL: not given).
struct call_tensor {
  const xattn_tensor* t;
  const char* name;
  bool written;
};

/// Every tensor desc points to: read, except the additive scorer's gradients in a backward.
inline std::vector<call_tensor> desc_tensors(const xattn_attention_desc& d, bool backward) {
  std::vector<call_tensor> r{{d.lengths, "desc.lengths", false},
                             {d.documents, "desc.documents", false},
                             {d.documents_kv, "desc.documents_kv", false},
                             {d.mask, "desc.mask", false},
                             {d.bias, "desc.bias", false},
                             {d.alibi, "desc.alibi", false},
                             {d.sinks, "desc.sinks", false},
                             {d.rope_q_positions, "desc.rope_q_positions", false},
                             {d.rope_k_positions, "desc.rope_k_positions", false}};
  if (d.additive != nullptr) {
    const xattn_additive& w = *d.additive;
    r.insert(r.end(), {{w.w_q, "desc.additive->w_q", false},
                       {w.w_k, "desc.additive->w_k", false},
                       {w.w_v, "desc.additive->w_v", false}});
    if (backward)
      r.insert(r.end(), {{w.d_w_q, "desc.additive->d_w_q", true},
                         {w.d_w_k, "desc.additive->d_w_k", true},
                         {w.d_w_v, "desc.additive->d_w_v", true}});
  }
  return r;
}

/// The one overlap rule of every call: a tensor the call writes shares no byte with any other
/// tensor of the call, read (the pass reads it while writing) or written (two writes would race).
inline void check_overlaps(const char* who, const std::vector<call_tensor>& all) {
  for (std::size_t a = 0; a < all.size(); ++a) {
    if (all[a].t == nullptr || !all[a].written) continue;
    for (std::size_t b = 0; b < all.size(); ++b) {
      if (b == a || all[b].t == nullptr || (all[b].written && b > a) || !overlap(*all[a].t, *all[b].t)) continue;
      if (all[b].written) fail(who, ": ", all[a].name, " and ", all[b].name, " overlap");
      fail(who, ": ", all[a].name, " overlaps ", all[b].name, "; the call reads ", all[b].name, " while writing ",
           all[a].name);
    }
  }
}

}  // namespace xattn::c_api
