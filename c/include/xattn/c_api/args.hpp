#pragma once
// The C interface's arguments checked and turned into the C++ library's terms, before any kernel
// runs: every error is raised here or by the library's own checks, which also precede writing.
// Header-only, for libxattn_c and for the policies the Python package compiles.
#include <xattn.h>
#include <xattn/xattn.hpp>

#include "overlaps.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace xattn::c_api {

/// A rank-4 tensor of caller memory.
struct view4 {
  void* data = nullptr;
  std::array<std::size_t, 4> shape{};
  std::array<std::ptrdiff_t, 4> strides{};
};

/// A tensor of caller memory of rank 1 to 4 (a mask, a bias), in its own dtype.
struct view_nd {
  bool given = false;
  void* data = nullptr;
  xattn_dtype dtype = XATTN_F32;
  std::vector<std::size_t> shape;
  std::vector<std::ptrdiff_t> strides;
};

struct forward_args {
  xattn_dtype dtype = XATTN_F32;      // of q (and of k, v but for F32 queries over 16-bit keys)
  xattn_dtype kv_dtype = XATTN_F32;   // of k and v
  xattn_dtype out_dtype = XATTN_F32;  // of out: dtype, or F32 for 16-bit inputs
  view4 q, k, v, out;
  void* lse = nullptr;  // null: not wanted (a scratch buffer takes it)
  std::array<std::size_t, 3> lse_shape{};
  std::array<std::ptrdiff_t, 3> lse_strides{};
  double scale = 1;
  bool band = false;      // a causal bound or a window
  bool windowed = false;  // a window bound (else causal alone, when band)
  std::int64_t left = unbounded, right = unbounded;
  align where = align::top_left;
  std::optional<lengths_mask> lengths;
  double softcap = 0;         // 0: off
  std::vector<double> sinks;  // empty: none
  schedule sch;
  // the rarer parts, composed at run time (general.hpp)
  std::optional<documents_mask> documents;
  view_nd flags;                // desc.mask of XATTN_BOOL
  view_nd additive_mask, bias;  // desc.mask of F32/F64, desc.bias
  std::vector<double> alibi;    // empty: none
  double dropout_p = 0;
  std::uint64_t seed = 0;
  // rotary embeddings (copies of q and k turned before the pass)
  std::optional<rotary> rope_q, rope_k;
  std::optional<additive> scorer;  // the additive scorer in place of the dot product

  bool general() const noexcept {
    return documents || flags.given || additive_mask.given || bias.given || !alibi.empty() || dropout_p > 0 || scorer;
  }
};

/// A gradient the caller wants (data not null) or not, in its dtype.
struct gradient_target {
  xattn_dtype dtype = XATTN_F32;
  view4 at;  // data null: not wanted
};

struct backward_args {
  forward_args f;  // q, k, v, desc, out and lse as the forward took them (lse required)
  xattn_dtype d_out_dtype = XATTN_F32;
  view4 d_out;
  gradient_target dq, dk, dv;
  void* dsinks = nullptr;  // (Hq), F32 or F64, or null
  xattn_dtype dsinks_dtype = XATTN_F32;
  std::ptrdiff_t dsinks_stride = 1;
  view_nd dbias;                // desc.bias's shape, F32 or F64; given: wanted
  view_nd d_w_q, d_w_k, d_w_v;  // the additive scorer's weights' gradients; given: wanted
};

/// A valid combination this build does not run (XATTN_UNSUPPORTED).
struct unsupported : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// Runs the fused forward for inputs of element type T (defined per type in forward_*.cpp).
template <class T>
void forward_as(const forward_args& a);

/// Runs it for float queries over keys and values of element type KV (bfloat16 or float16).
template <class KV>
void forward_mixed(const forward_args& a);

/// Runs the fused forward on q, k, v in Acc (float or double): copies of 16-bit inputs, or turned
/// copies under rotary embeddings; every runtime choice (defined in forward_general_*.cpp).
template <class Acc>
void forward_in_acc(const forward_args& a);

/// Runs the fused backward in Acc (float or double; 16-bit inputs are widened to float first),
/// defined per type in backward_*.cpp.
template <class Acc>
void backward_as(const backward_args& a);

/// The dtype's name in messages, or its code when it is none of xattn_dtype's.
inline std::string dtype_name(xattn_dtype t) {
  switch (t) {
    case XATTN_F32:
      return "XATTN_F32";
    case XATTN_F64:
      return "XATTN_F64";
    case XATTN_BF16:
      return "XATTN_BF16";
    case XATTN_F16:
      return "XATTN_F16";
    case XATTN_I32:
      return "XATTN_I32";
    case XATTN_I64:
      return "XATTN_I64";
    case XATTN_Q8_0:
      return "XATTN_Q8_0";
    case XATTN_FP8_E4M3:
      return "XATTN_FP8_E4M3";
    case XATTN_Q4_0:
      return "XATTN_Q4_0";
    case XATTN_Q4C:
      return "XATTN_Q4C";
    case XATTN_BOOL:
      return "XATTN_BOOL";
  }
  return "code " + std::to_string(int(t)) + " (not an xattn_dtype)";
}

inline std::string shape_of(const xattn_tensor& t) {
  std::string s = "(";
  for (int i = 0; i < t.rank && i < XATTN_MAX_RANK; ++i) {
    if (i > 0) s += ',';
    s += std::to_string(t.shape[i]);
  }
  return s + ")";
}

/// The tensor's rank, shape and strides checked: rank `rank`, no negative extent, data not null
/// unless it holds no element.
inline void check_tensor(const char* who, const xattn_tensor* t, const char* name, int rank) {
  if (t == nullptr) fail(who, ": ", name, " is NULL");
  if (t->rank != rank)
    fail(who, ": ", name, " has rank ", t->rank, " but must have rank ", rank, rank == 4 ? " (B, H, S, D)" : "");
  bool empty = false;
  for (int i = 0; i < rank; ++i) {
    if (t->shape[i] < 0) fail(who, ": ", name, " has a negative extent: shape ", shape_of(*t));
    empty = empty || t->shape[i] == 0;
  }
  if (t->data == nullptr && !empty) fail(who, ": ", name, " ", shape_of(*t), " has NULL data");
}

inline view4 view_of(const xattn_tensor& t) {
  view4 v;
  v.data = t.data;
  for (int i = 0; i < 4; ++i) {
    v.shape[std::size_t(i)] = std::size_t(t.shape[i]);
    v.strides[std::size_t(i)] = std::ptrdiff_t(t.strides[i]);
  }
  return v;
}

/// Element (b, i) of an integer tensor of rank 1 (b) or 2 (b, i).
inline std::int64_t int_at(const xattn_tensor& t, std::int64_t b, std::int64_t i) {
  const std::int64_t off = b * t.strides[0] + (t.rank == 2 ? i * t.strides[1] : 0);
  return t.dtype == XATTN_I32 ? std::int64_t(static_cast<const std::int32_t*>(t.data)[off])
                              : static_cast<const std::int64_t*>(t.data)[off];
}

/// An integer tensor of rank 1 or 2 named `name`, checked and copied: its values and shape.
inline std::pair<std::vector<std::int64_t>, std::vector<std::size_t>> ints_of(const char* who, const xattn_tensor& t,
                                                                              const char* name) {
  if (t.rank != 1 && t.rank != 2) fail(who, ": ", name, " has rank ", t.rank, " but must have rank 1 or 2");
  check_tensor(who, &t, name, t.rank);
  if (t.dtype != XATTN_I32 && t.dtype != XATTN_I64)
    fail(who, ": ", name, " has dtype ", dtype_name(t.dtype), " but must be XATTN_I32 or XATTN_I64");
  std::vector<std::int64_t> v;
  std::vector<std::size_t> shape(std::size_t(t.rank));
  for (int i = 0; i < t.rank; ++i) shape[std::size_t(i)] = std::size_t(t.shape[i]);
  for (std::int64_t b = 0; b < (t.rank == 2 ? t.shape[0] : 1); ++b)
    for (std::int64_t i = 0; i < t.shape[t.rank - 1]; ++i) {
      const std::int64_t off = t.rank == 2 ? b * t.strides[0] + i * t.strides[1] : i * t.strides[0];
      v.push_back(t.dtype == XATTN_I32 ? std::int64_t(static_cast<const std::int32_t*>(t.data)[off])
                                       : static_cast<const std::int64_t*>(t.data)[off]);
    }
  return {std::move(v), std::move(shape)};
}

/// A tensor of rank 1 to 4 named `name` of one of the dtypes `allowed`, checked.
inline view_nd nd_of(const char* who, const xattn_tensor& t, const char* name,
                     std::initializer_list<xattn_dtype> allowed) {
  if (t.rank < 1 || t.rank > 4) fail(who, ": ", name, " has rank ", t.rank, " but must have rank 1 to 4");
  check_tensor(who, &t, name, t.rank);
  bool ok = false;
  std::string names;
  for (xattn_dtype d : allowed) {
    ok = ok || t.dtype == d;
    names += std::string(names.empty() ? "" : " or ") + dtype_name(d);
  }
  if (!ok) fail(who, ": ", name, " has dtype ", dtype_name(t.dtype), " but must be ", names);
  view_nd v;
  v.given = true;
  v.data = t.data;
  v.dtype = t.dtype;
  for (int i = 0; i < t.rank; ++i) {
    v.shape.push_back(std::size_t(t.shape[i]));
    v.strides.push_back(std::ptrdiff_t(t.strides[i]));
  }
  return v;
}

/// t broadcasts to the scores (B, Hq, Sq, Skv): right-aligned, each axis equal or 1.
inline void check_broadcast(const char* who, const xattn_tensor& t, const char* name, const std::int64_t (&scores)[4]) {
  for (int a = 0; a < t.rank; ++a) {
    const std::int64_t n = t.shape[t.rank - 1 - a], want = scores[3 - a];
    if (n != want && n != 1)
      fail(who, ": ", name, " has shape ", shape_of(t), ", which does not broadcast to the scores (B, Hq, Sq, Skv) = (",
           scores[0], ",", scores[1], ",", scores[2], ",", scores[3], ") (right-aligned: each axis equal or 1)");
  }
}

/// One operand's rotary embedding: positions from the tensor (or offset + i), checked as rope() checks them.
inline rotary rotary_of(const char* who, const xattn_attention_desc& d, const xattn_tensor* positions,
                        std::int64_t offset, std::size_t batch, std::size_t seq, std::size_t features,
                        const char* name) {
  if (!(d.rope_base > 0) || !std::isfinite(d.rope_base))
    fail(who, ": desc.rope_base is ", d.rope_base, "; it must be finite and > 0");
  if (d.rope_dims < 0 || d.rope_dims % 2 != 0 || std::size_t(d.rope_dims) > features)
    fail(who, ": desc.rope_dims is ", d.rope_dims, "; it must be even and at most D = ", features, " (0: all)");
  rotary r;
  r.offset = offset;
  r.options.base = float(d.rope_base);
  r.options.dims = std::size_t(d.rope_dims);
  r.options.style = d.rope == XATTN_ROPE_INTERLEAVED ? rope_style::interleaved : rope_style::half;
  if (positions != nullptr) {
    auto [v, shape] = ints_of(who, *positions, name);
    const bool ok =
        (shape.size() == 1 && shape[0] == seq) || (shape.size() == 2 && shape[0] == batch && shape[1] == seq);
    if (!ok)
      fail(who, ": ", name, " has shape ", shape_of(*positions), " but must be (", seq, ") or (", batch, ",", seq, ")");
    for (std::int64_t p : v)
      if (p < 0) fail(who, ": ", name, " holds ", p, "; positions must be >= 0");
    auto owned = std::make_shared<std::vector<std::int64_t>>(std::move(v));
    r.positions.data = owned->data();
    r.positions.shape = shape;
    r.positions.strides =
        shape.size() == 1 ? std::vector<std::ptrdiff_t>{1} : std::vector<std::ptrdiff_t>{std::ptrdiff_t(shape[1]), 1};
    r.positions.owned = owned;
  }
  return r;
}

/// Everything xattn_forward was given, checked (std::invalid_argument naming the argument and the
/// shapes, or c_api::unsupported); writes: out and lse are written (a forward), not read.
inline forward_args forward_arguments(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v,
                                      const xattn_attention_desc* desc, const xattn_tensor* out,
                                      const xattn_tensor* lse, const char* who = "xattn_forward", bool writes = true) {
  check_tensor(who, q, "q", 4);
  check_tensor(who, k, "k", 4);
  check_tensor(who, v, "v", 4);
  check_tensor(who, out, "out", 4);
  if (desc == nullptr) fail(who, ": desc is NULL (start from xattn_attention_defaults())");
  forward_args a;
  a.dtype = q->dtype;
  if (a.dtype != XATTN_F32 && a.dtype != XATTN_F64 && a.dtype != XATTN_BF16 && a.dtype != XATTN_F16)
    fail(who, ": q has dtype ", dtype_name(q->dtype),
         "; q, k and v must be XATTN_F32, XATTN_F64, XATTN_BF16 or "
         "XATTN_F16");
  a.kv_dtype = k->dtype;
  // float queries over 16-bit keys and values: decoding from a 16-bit cache, as the C++ DSL takes it
  const bool mixed = a.dtype == XATTN_F32 && v->dtype == k->dtype && (k->dtype == XATTN_BF16 || k->dtype == XATTN_F16);
  if ((k->dtype != a.dtype || v->dtype != a.dtype) && !mixed)
    fail(who,
         ": q, k and v must share one dtype (or be XATTN_F32 queries over XATTN_BF16 or XATTN_F16 keys and "
         "values), got ",
         dtype_name(q->dtype), ", ", dtype_name(k->dtype), ", ", dtype_name(v->dtype));
  a.out_dtype = out->dtype;
  const bool sixteen = a.dtype == XATTN_BF16 || a.dtype == XATTN_F16;
  if (a.out_dtype != a.dtype && !(sixteen && a.out_dtype == XATTN_F32))
    fail(who, ": out has dtype ", dtype_name(out->dtype), " but must be ", dtype_name(a.dtype),
         sixteen ? " or XATTN_F32" : "", " for ", dtype_name(a.dtype), " inputs");
  // Shapes, named as the C caller knows them (the library checks them again in its own terms).
  const std::int64_t B = q->shape[0], Hq = q->shape[1], Sq = q->shape[2], D = q->shape[3];
  const std::int64_t Hkv = k->shape[1], Skv = k->shape[2];
  if (k->shape[0] != B || v->shape[0] != B)
    fail(who, ": batch sizes differ: q ", shape_of(*q), ", k ", shape_of(*k), ", v ", shape_of(*v));
  if (k->shape[3] != D && desc != nullptr && desc->additive == nullptr)
    fail(who, ": q ", shape_of(*q), " and k ", shape_of(*k), " differ in head size D");
  if (Hkv == 0 || Hq % Hkv != 0)
    fail(who, ": q ", shape_of(*q), " has ", Hq, " heads, not a multiple of k's ", Hkv, " (k ", shape_of(*k), ")");
  if (Skv == 0) fail(who, ": k ", shape_of(*k), " has no keys (Skv = 0): softmax over an empty set is undefined");
  if (v->shape[1] != Hkv || v->shape[2] != Skv)
    fail(who, ": v ", shape_of(*v), " must have k's heads and keys: k ", shape_of(*k));
  const std::int64_t want[4] = {B, Hq, Sq, v->shape[3]};
  for (int i = 0; i < 4; ++i)
    if (out->shape[i] != want[i])
      fail(who, ": out has shape ", shape_of(*out), " but the result is (B, Hq, Sq, Dv) (", B, ",", Hq, ",", Sq, ",",
           want[3], ")");
  a.q = view_of(*q);
  a.k = view_of(*k);
  a.v = view_of(*v);
  a.out = view_of(*out);
  if (writes && !layout<4>{a.out.shape, a.out.strides}.unique())
    fail(who, ": out strides (", out->strides[0], ",", out->strides[1], ",", out->strides[2], ",", out->strides[3],
         ") give two elements of shape ", shape_of(*out), " the same address");

  if (lse != nullptr) {
    check_tensor(who, lse, "lse", 3);
    const xattn_dtype acc = a.dtype == XATTN_F64 ? XATTN_F64 : XATTN_F32;
    if (lse->dtype != acc)
      fail(who, ": lse has dtype ", dtype_name(lse->dtype), " but must be ", dtype_name(acc), " for ",
           dtype_name(a.dtype), " inputs");
    if (lse->shape[0] != B || lse->shape[1] != Hq || lse->shape[2] != Sq)
      fail(who, ": lse has shape ", shape_of(*lse), " but must be (B, Hq, Sq) (", B, ",", Hq, ",", Sq, ")");
    a.lse = lse->data;
    for (std::size_t i = 0; i < 3; ++i) {
      a.lse_shape[i] = std::size_t(lse->shape[i]);
      a.lse_strides[i] = std::ptrdiff_t(lse->strides[i]);
    }
    if (writes && !layout<3>{a.lse_shape, a.lse_strides}.unique())
      fail(who, ": lse strides (", lse->strides[0], ",", lse->strides[1], ",", lse->strides[2],
           ") give two elements of shape ", shape_of(*lse), " the same address");
  }

  const xattn_attention_desc& d = *desc;
  if (!std::isfinite(d.scale)) fail(who, ": desc.scale is ", d.scale, "; it must be finite (0: 1/sqrt(D))");
  a.scale = d.scale != 0.0 ? d.scale : d.additive != nullptr ? 1.0 : 1.0 / std::sqrt(double(D));
  if (d.causal != XATTN_CAUSAL_NONE && d.causal != XATTN_CAUSAL_TOP_LEFT && d.causal != XATTN_CAUSAL_BOTTOM_RIGHT)
    fail(who, ": desc.causal is ", int(d.causal),
         "; it must be XATTN_CAUSAL_NONE, XATTN_CAUSAL_TOP_LEFT or XATTN_CAUSAL_BOTTOM_RIGHT");
  if (d.window_left < -1 || d.window_right < -1)
    fail(who, ": desc.window_left and desc.window_right must be >= 0, or -1 (unbounded); got (", d.window_left, ", ",
         d.window_right, ")");
  a.left = d.window_left < 0 ? unbounded : d.window_left;
  a.right = d.window_right < 0 ? unbounded : d.window_right;
  if (d.causal != XATTN_CAUSAL_NONE) a.right = std::min<std::int64_t>(a.right, 0);
  a.where = d.causal == XATTN_CAUSAL_BOTTOM_RIGHT ? align::bottom_right : align::top_left;
  a.windowed = d.window_left >= 0 || d.window_right >= 0;
  a.band = d.causal != XATTN_CAUSAL_NONE || a.windowed;

  if (d.lengths != nullptr) {
    const xattn_tensor& l = *d.lengths;
    if (l.rank != 1 && l.rank != 2)
      fail(who, ": desc.lengths has rank ", l.rank, " but must be (B) or (B, Sq) = (", B, ") or (", B, ",", Sq, ")");
    check_tensor(who, &l, "desc.lengths", l.rank);
    if (l.dtype != XATTN_I32 && l.dtype != XATTN_I64)
      fail(who, ": desc.lengths has dtype ", dtype_name(l.dtype), " but must be XATTN_I32 or XATTN_I64");
    if (l.shape[0] != B || (l.rank == 2 && l.shape[1] != Sq))
      fail(who, ": desc.lengths has shape ", shape_of(l), " but must be (B) or (B, Sq) = (", B, ") or (", B, ",", Sq,
           ")");
    lengths_mask m;
    m.fill_value = -std::numeric_limits<double>::infinity();  // a row of length 0 sees nothing: output 0
    for (int i = 0; i < l.rank; ++i) m.shape.push_back(std::size_t(l.shape[i]));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < (l.rank == 2 ? Sq : 1); ++i) {
        const std::int64_t n = int_at(l, b, i);
        if (n < 0 || n > Skv)
          fail(who, ": desc.lengths[", b, l.rank == 2 ? "," + std::to_string(i) : std::string(), "] = ", n,
               " is outside [0, ", Skv, "] (Skv, the number of keys)");
        m.lens.push_back(n);
      }
    a.lengths = std::move(m);
  }
  if (!(d.softcap >= 0.0) || !std::isfinite(d.softcap))
    fail(who, ": desc.softcap is ", d.softcap, "; it must be > 0, or 0 (off)");
  a.softcap = d.softcap;
  if (d.sinks != nullptr) {
    const xattn_tensor& s = *d.sinks;
    check_tensor(who, &s, "desc.sinks", 1);
    if (s.dtype != XATTN_F32 && s.dtype != XATTN_F64)
      fail(who, ": desc.sinks has dtype ", dtype_name(s.dtype), " but must be XATTN_F32 or XATTN_F64");
    if (s.shape[0] != Hq) fail(who, ": desc.sinks has shape ", shape_of(s), " but must be (Hq) = (", Hq, ")");
    for (std::int64_t h = 0; h < Hq; ++h)
      a.sinks.push_back(s.dtype == XATTN_F32 ? double(static_cast<const float*>(s.data)[h * s.strides[0]])
                                             : static_cast<const double*>(s.data)[h * s.strides[0]]);
  }
  if (d.threads < 0) fail(who, ": desc.threads is ", d.threads, "; it must be >= 0 (0: OpenMP's default)");
  a.sch.threads = d.threads;

  const std::int64_t scores[4] = {B, Hq, Sq, Skv};
  if (d.documents != nullptr) {
    const auto ids = [&](const xattn_tensor& t, const char* name) {
      auto [v, shape] = ints_of(who, t, name);
      return documents_mask::ids_t{std::move(v), std::move(shape), name};
    };
    documents_mask m;
    m.q = ids(*d.documents, "desc.documents");
    m.kv = d.documents_kv != nullptr ? ids(*d.documents_kv, "desc.documents_kv") : m.q;
    a.documents = std::move(m);
  } else if (d.documents_kv != nullptr) {
    fail(who, ": desc.documents_kv is given but desc.documents is NULL");
  }
  if (d.mask != nullptr) {
    view_nd m = nd_of(who, *d.mask, "desc.mask", {XATTN_BOOL, XATTN_F32, XATTN_F64});
    check_broadcast(who, *d.mask, "desc.mask", scores);
    (m.dtype == XATTN_BOOL ? a.flags : a.additive_mask) = std::move(m);
  }
  if (d.bias != nullptr) {
    a.bias = nd_of(who, *d.bias, "desc.bias", {XATTN_F32, XATTN_F64});
    check_broadcast(who, *d.bias, "desc.bias", scores);
  }
  if (d.alibi != nullptr) {
    const view_nd s = nd_of(who, *d.alibi, "desc.alibi", {XATTN_F32, XATTN_F64});
    if (s.shape.size() != 1 || std::int64_t(s.shape[0]) != Hq)
      fail(who, ": desc.alibi has shape ", shape_of(*d.alibi), " but must be (Hq) = (", Hq, ")");
    for (std::int64_t h = 0; h < Hq; ++h)
      a.alibi.push_back(s.dtype == XATTN_F32 ? double(static_cast<const float*>(s.data)[h * s.strides[0]])
                                             : static_cast<const double*>(s.data)[h * s.strides[0]]);
  }
  if (!(d.dropout_p >= 0.0 && d.dropout_p < 1.0))
    fail(who, ": desc.dropout_p is ", d.dropout_p, "; it must be in [0, 1)");
  a.dropout_p = d.dropout_p;
  a.seed = d.seed;
  if (d.rope != XATTN_ROPE_NONE) {
    if (d.rope != XATTN_ROPE_HALF && d.rope != XATTN_ROPE_INTERLEAVED)
      fail(who, ": desc.rope is ", int(d.rope),
           "; it must be XATTN_ROPE_NONE, XATTN_ROPE_HALF or XATTN_ROPE_INTERLEAVED");
    a.rope_q = rotary_of(who, d, d.rope_q_positions, std::max<std::int64_t>(0, Skv - Sq), std::size_t(B),
                         std::size_t(Sq), std::size_t(D), "desc.rope_q_positions");
    a.rope_k = rotary_of(who, d, d.rope_k_positions, 0, std::size_t(B), std::size_t(Skv), std::size_t(k->shape[3]),
                         "desc.rope_k_positions");
  } else if (d.rope_q_positions != nullptr || d.rope_k_positions != nullptr) {
    fail(who, ": desc.rope_q_positions or desc.rope_k_positions is given but desc.rope is XATTN_ROPE_NONE");
  }
  if (d.additive != nullptr) {
    const xattn_additive& w = *d.additive;
    const auto matrix = [&](const xattn_tensor* t, const char* name, int rank) {
      if (t == nullptr) fail(who, ": ", name, " is NULL");
      const view_nd m = nd_of(who, *t, name, {XATTN_F32, XATTN_F64});
      if (t->rank != rank) fail(who, ": ", name, " has shape ", shape_of(*t), " but must have rank ", rank);
      xt::xarray<double> x = xt::zeros<double>(m.shape);
      for (std::size_t r = 0; r < (rank == 2 ? m.shape[0] : 1); ++r)
        for (std::size_t c = 0; c < m.shape.back(); ++c) {
          const std::ptrdiff_t at = rank == 2 ? std::ptrdiff_t(r) * m.strides[0] + std::ptrdiff_t(c) * m.strides[1]
                                              : std::ptrdiff_t(c) * m.strides[0];
          x.data()[r * m.shape.back() + c] = m.dtype == XATTN_F64 ? static_cast<const double*>(m.data)[at]
                                                                  : double(static_cast<const float*>(m.data)[at]);
        }
      return x;
    };
    a.scorer.emplace(matrix(w.w_q, "desc.additive->w_q", 2), matrix(w.w_k, "desc.additive->w_k", 2),
                     matrix(w.w_v, "desc.additive->w_v", 1));
    a.scorer->validate(std::size_t(D), std::size_t(k->shape[3]));
  }
  if (writes) {
    std::vector<call_tensor> all{{q, "q", false}, {k, "k", false}, {v, "v", false}};
    const auto in_desc = desc_tensors(d, false);
    all.insert(all.end(), in_desc.begin(), in_desc.end());
    all.insert(all.end(), {{out, "out", true}, {lse, "lse", true}});
    check_overlaps(who, all);
  }
  return a;
}

/// Everything xattn_backward was given, checked: the forward's arguments, d_out in out's shape
/// and dtype, each gradient wanted in its operand's shape in the accumulator's dtype (F32; F64
/// for F64 inputs) or the inputs' 16-bit dtype, none overlapping an input or another gradient.
inline backward_args backward_arguments(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v,
                                        const xattn_attention_desc* desc, const xattn_tensor* out,
                                        const xattn_tensor* lse, const xattn_tensor* d_out, const xattn_tensor* dq,
                                        const xattn_tensor* dk, const xattn_tensor* dv, const xattn_tensor* dsinks,
                                        const xattn_tensor* dbias) {
  const char* who = "xattn_backward";
  if (lse == nullptr) fail(who, ": lse is NULL; pass the log-sum-exp xattn_forward wrote");
  backward_args a;
  a.f = forward_arguments(q, k, v, desc, out, lse, who, false);
  check_tensor(who, d_out, "d_out", 4);
  for (int i = 0; i < 4; ++i)
    if (d_out->shape[i] != out->shape[i])
      fail(who, ": d_out has shape ", shape_of(*d_out), " but must have out's ", shape_of(*out));
  const bool sixteen = a.f.dtype == XATTN_BF16 || a.f.dtype == XATTN_F16;
  const xattn_dtype acc = a.f.dtype == XATTN_F64 ? XATTN_F64 : XATTN_F32;
  if (d_out->dtype != a.f.dtype && d_out->dtype != acc)
    fail(who, ": d_out has dtype ", dtype_name(d_out->dtype), " but must be ", dtype_name(a.f.dtype),
         sixteen ? " or XATTN_F32" : "", " for ", dtype_name(a.f.dtype), " inputs");
  a.d_out_dtype = d_out->dtype;
  a.d_out = view_of(*d_out);
  const char* input_names[] = {"q", "k", "v"};
  const xattn_tensor* grads[] = {dq, dk, dv};
  const char* grad_names[] = {"dq", "dk", "dv"};
  const xattn_tensor* like[] = {q, k, v};
  gradient_target* targets[] = {&a.dq, &a.dk, &a.dv};
  for (int g = 0; g < 3; ++g) {
    const xattn_tensor* t = grads[g];
    if (t == nullptr) continue;
    check_tensor(who, t, grad_names[g], 4);
    for (int i = 0; i < 4; ++i)
      if (t->shape[i] != like[g]->shape[i])
        fail(who, ": ", grad_names[g], " has shape ", shape_of(*t), " but must have ", input_names[g], "'s ",
             shape_of(*like[g]));
    const xattn_dtype own = g == 0 ? a.f.dtype : a.f.kv_dtype;  // the input's
    if (t->dtype != acc && t->dtype != own)
      fail(who, ": ", grad_names[g], " has dtype ", dtype_name(t->dtype), " but must be ", dtype_name(acc),
           own != acc ? std::string(" or ") + dtype_name(own) : std::string(), " for ", input_names[g], " of ",
           dtype_name(own));
    const view4 at = view_of(*t);
    if (!layout<4>{at.shape, at.strides}.unique())
      fail(who, ": ", grad_names[g], " strides (", t->strides[0], ",", t->strides[1], ",", t->strides[2], ",",
           t->strides[3], ") give two elements of shape ", shape_of(*t), " the same address");
    targets[g]->dtype = t->dtype;
    targets[g]->at = at;
  }
  if (dsinks != nullptr) {
    if (desc->sinks == nullptr) fail(who, ": dsinks is given but desc.sinks is NULL");
    check_tensor(who, dsinks, "dsinks", 1);
    if (dsinks->dtype != XATTN_F32 && dsinks->dtype != XATTN_F64)
      fail(who, ": dsinks has dtype ", dtype_name(dsinks->dtype), " but must be XATTN_F32 or XATTN_F64");
    if (dsinks->shape[0] != q->shape[1])
      fail(who, ": dsinks has shape ", shape_of(*dsinks), " but must be (Hq) = (", q->shape[1], ")");
    a.dsinks = dsinks->data;
    a.dsinks_dtype = dsinks->dtype;
    a.dsinks_stride = std::ptrdiff_t(dsinks->strides[0]);
  }
  if (desc->additive != nullptr) {
    const xattn_additive& w = *desc->additive;
    const xattn_tensor* weights[] = {w.w_q, w.w_k, w.w_v};
    const xattn_tensor* targets[] = {w.d_w_q, w.d_w_k, w.d_w_v};
    const char* names[] = {"desc.additive->d_w_q", "desc.additive->d_w_k", "desc.additive->d_w_v"};
    view_nd* into[] = {&a.d_w_q, &a.d_w_k, &a.d_w_v};
    for (int n = 0; n < 3; ++n) {
      if (targets[n] == nullptr) continue;
      *into[n] = nd_of(who, *targets[n], names[n], {XATTN_F32, XATTN_F64});
      if (targets[n]->rank != weights[n]->rank ||
          !std::equal(weights[n]->shape, weights[n]->shape + weights[n]->rank, targets[n]->shape))
        fail(who, ": ", names[n], " has shape ", shape_of(*targets[n]), " but must have its weight's ",
             shape_of(*weights[n]));
    }
  }
  if (dbias != nullptr) {
    if (desc->bias == nullptr) fail(who, ": dbias is given but desc.bias is NULL");
    a.dbias = nd_of(who, *dbias, "dbias", {XATTN_F32, XATTN_F64});
    if (a.dbias.shape != a.f.bias.shape)
      fail(who, ": dbias has shape ", shape_of(*dbias), " but must have desc.bias's ", shape_of(*desc->bias));
    layout<4> at;  // dbias's axes, padded with axes of 1
    at.shape.fill(1);
    for (std::size_t i = 0; i < a.dbias.shape.size(); ++i)
      at.shape[i] = a.dbias.shape[i], at.stride[i] = a.dbias.strides[i];
    if (!at.unique()) fail(who, ": dbias strides give two elements of shape ", shape_of(*dbias), " the same address");
  }
  std::vector<call_tensor> all{{q, "q", false},          {k, "k", false},       {v, "v", false},
                               {out, "out", false},      {lse, "lse", false},   {d_out, "d_out", false},
                               {dq, "dq", true},         {dk, "dk", true},      {dv, "dv", true},
                               {dsinks, "dsinks", true}, {dbias, "dbias", true}};
  const auto in_desc = desc_tensors(*desc, true);
  all.insert(all.end(), in_desc.begin(), in_desc.end());
  check_overlaps(who, all);
  return a;
}

}  // namespace xattn::c_api
