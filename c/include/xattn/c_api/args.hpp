#pragma once
// The C interface's arguments checked and turned into the C++ library's terms, before any kernel
// runs: every error is raised here or by the library's own checks, which also precede writing.
// Header-only, for libxattn_c and for the policies the Python package compiles.
#include <xattn.h>
#include <xattn/xattn.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
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

struct forward_args {
  xattn_dtype dtype = XATTN_F32;      // of q, k, v
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
};

/// A valid combination this build does not run (XATTN_UNSUPPORTED).
struct unsupported : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// Runs the fused forward for inputs of element type T (defined per type in forward_*.cpp).
template <class T>
void forward_as(const forward_args& a);

/// Runs the fused backward in Acc (float or double; 16-bit inputs are widened to float first),
/// defined per type in backward_*.cpp.
template <class Acc>
void backward_as(const backward_args& a);

inline const char* dtype_name(xattn_dtype t) {
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
    case XATTN_BOOL:
      return "XATTN_BOOL";
  }
  return "an unknown dtype";
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

/// Everything xattn_forward was given, checked (std::invalid_argument naming the argument and the
/// shapes, or c_api::unsupported).
inline forward_args forward_arguments(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v,
                                      const xattn_attention_desc* desc, const xattn_tensor* out,
                                      const xattn_tensor* lse, const char* who = "xattn_forward") {
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
  if (k->dtype != a.dtype || v->dtype != a.dtype)
    fail(who, ": q, k and v must share one dtype, got ", dtype_name(q->dtype), ", ", dtype_name(k->dtype), ", ",
         dtype_name(v->dtype));
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
  if (k->shape[3] != D) fail(who, ": q ", shape_of(*q), " and k ", shape_of(*k), " differ in head size D");
  if (Hkv == 0 || Hq % Hkv != 0)
    fail(who, ": q ", shape_of(*q), " has ", Hq, " heads, not a multiple of k's ", Hkv, " (k ", shape_of(*k), ")");
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
  }

  const xattn_attention_desc& d = *desc;
  if (d.documents != nullptr || d.mask != nullptr || d.bias != nullptr || d.alibi != nullptr)
    throw unsupported(
        std::string(who) +
        ": desc.documents, desc.mask, desc.bias and desc.alibi are not supported by this version of the C "
        "interface; leave them NULL");
  if (d.dropout_p != 0.0f)
    throw unsupported(std::string(who) +
                      ": desc.dropout_p must be 0: dropout is not supported by this version of the C interface");
  if (!std::isfinite(d.scale)) fail(who, ": desc.scale is ", d.scale, "; it must be finite (0: 1/sqrt(D))");
  a.scale = d.scale != 0.0 ? d.scale : 1.0 / std::sqrt(double(D));
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
      for (std::int64_t i = 0; i < (l.rank == 2 ? Sq : 1); ++i) m.lens.push_back(int_at(l, b, i));
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
  a.f = forward_arguments(q, k, v, desc, out, lse, who);
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
  if (dbias != nullptr)
    throw unsupported(std::string(who) +
                      ": dbias must be NULL: desc.bias is not supported by this version of the C interface");

  const xattn_tensor* inputs[] = {q, k, v, out, lse, d_out};
  const char* input_names[] = {"q", "k", "v", "out", "lse", "d_out"};
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
    if (t->dtype != acc && t->dtype != a.f.dtype)
      fail(who, ": ", grad_names[g], " has dtype ", dtype_name(t->dtype), " but must be ", dtype_name(acc),
           sixteen ? std::string(" or ") + dtype_name(a.f.dtype) : std::string(), " for ", dtype_name(a.f.dtype),
           " inputs");
    const view4 at = view_of(*t);
    if (!layout<4>{at.shape, at.strides}.unique())
      fail(who, ": ", grad_names[g], " strides (", t->strides[0], ",", t->strides[1], ",", t->strides[2], ",",
           t->strides[3], ") give two elements of shape ", shape_of(*t), " the same address");
    for (int i = 0; i < 6; ++i)
      if (overlap(*t, *inputs[i]))
        fail(who, ": ", grad_names[g], " overlaps ", input_names[i], "; the backward reads it while writing ",
             grad_names[g]);
    for (int h = 0; h < g; ++h)
      if (grads[h] != nullptr && overlap(*t, *grads[h]))
        fail(who, ": ", grad_names[g], " and ", grad_names[h], " overlap");
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
    for (const xattn_tensor* t : {q, k, v, out, lse, d_out, dq, dk, dv})
      if (t != nullptr && overlap(*dsinks, *t)) fail(who, ": dsinks overlaps another tensor of the call");
    a.dsinks = dsinks->data;
    a.dsinks_dtype = dsinks->dtype;
    a.dsinks_stride = std::ptrdiff_t(dsinks->strides[0]);
  }
  return a;
}

}  // namespace xattn::c_api
