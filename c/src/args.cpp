#include "args.hpp"

#include <cmath>
#include <limits>
#include <string>

namespace xattn::c_api {

namespace {

const char* dtype_name(xattn_dtype t) {
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

std::string shape_of(const xattn_tensor& t) {
  std::string s = "(";
  for (int i = 0; i < t.rank && i < XATTN_MAX_RANK; ++i) {
    if (i > 0) s += ',';
    s += std::to_string(t.shape[i]);
  }
  return s + ")";
}

/// The tensor's rank, shape and strides checked: rank `rank`, no negative extent, data not null
/// unless it holds no element.
void check_tensor(const xattn_tensor* t, const char* name, int rank) {
  if (t == nullptr) fail("xattn_forward: ", name, " is NULL");
  if (t->rank != rank)
    fail("xattn_forward: ", name, " has rank ", t->rank, " but must have rank ", rank,
         rank == 4 ? " (B, H, S, D)" : "");
  bool empty = false;
  for (int i = 0; i < rank; ++i) {
    if (t->shape[i] < 0) fail("xattn_forward: ", name, " has a negative extent: shape ", shape_of(*t));
    empty = empty || t->shape[i] == 0;
  }
  if (t->data == nullptr && !empty) fail("xattn_forward: ", name, " ", shape_of(*t), " has NULL data");
}

view4 view_of(const xattn_tensor& t) {
  view4 v;
  v.data = t.data;
  for (int i = 0; i < 4; ++i) {
    v.shape[std::size_t(i)] = std::size_t(t.shape[i]);
    v.strides[std::size_t(i)] = std::ptrdiff_t(t.strides[i]);
  }
  return v;
}

/// Element (b, i) of an integer tensor of rank 1 (b) or 2 (b, i).
std::int64_t int_at(const xattn_tensor& t, std::int64_t b, std::int64_t i) {
  const std::int64_t off = b * t.strides[0] + (t.rank == 2 ? i * t.strides[1] : 0);
  return t.dtype == XATTN_I32 ? std::int64_t(static_cast<const std::int32_t*>(t.data)[off])
                              : static_cast<const std::int64_t*>(t.data)[off];
}

}  // namespace

forward_args forward_arguments(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v,
                               const xattn_attention_desc* desc, const xattn_tensor* out, const xattn_tensor* lse) {
  check_tensor(q, "q", 4);
  check_tensor(k, "k", 4);
  check_tensor(v, "v", 4);
  check_tensor(out, "out", 4);
  if (desc == nullptr) fail("xattn_forward: desc is NULL (start from xattn_attention_defaults())");
  forward_args a;
  a.dtype = q->dtype;
  if (a.dtype != XATTN_F32 && a.dtype != XATTN_F64 && a.dtype != XATTN_BF16 && a.dtype != XATTN_F16)
    fail("xattn_forward: q has dtype ", dtype_name(q->dtype),
         "; q, k and v must be XATTN_F32, XATTN_F64, XATTN_BF16 or "
         "XATTN_F16");
  if (k->dtype != a.dtype || v->dtype != a.dtype)
    fail("xattn_forward: q, k and v must share one dtype, got ", dtype_name(q->dtype), ", ", dtype_name(k->dtype), ", ",
         dtype_name(v->dtype));
  a.out_dtype = out->dtype;
  const bool sixteen = a.dtype == XATTN_BF16 || a.dtype == XATTN_F16;
  if (a.out_dtype != a.dtype && !(sixteen && a.out_dtype == XATTN_F32))
    fail("xattn_forward: out has dtype ", dtype_name(out->dtype), " but must be ", dtype_name(a.dtype),
         sixteen ? " or XATTN_F32" : "", " for ", dtype_name(a.dtype), " inputs");
  // Shapes, named as the C caller knows them (the library checks them again in its own terms).
  const std::int64_t B = q->shape[0], Hq = q->shape[1], Sq = q->shape[2], D = q->shape[3];
  const std::int64_t Hkv = k->shape[1], Skv = k->shape[2];
  if (k->shape[0] != B || v->shape[0] != B)
    fail("xattn_forward: batch sizes differ: q ", shape_of(*q), ", k ", shape_of(*k), ", v ", shape_of(*v));
  if (k->shape[3] != D) fail("xattn_forward: q ", shape_of(*q), " and k ", shape_of(*k), " differ in head size D");
  if (Hkv == 0 || Hq % Hkv != 0)
    fail("xattn_forward: q ", shape_of(*q), " has ", Hq, " heads, not a multiple of k's ", Hkv, " (k ", shape_of(*k),
         ")");
  if (v->shape[1] != Hkv || v->shape[2] != Skv)
    fail("xattn_forward: v ", shape_of(*v), " must have k's heads and keys: k ", shape_of(*k));
  const std::int64_t want[4] = {B, Hq, Sq, v->shape[3]};
  for (int i = 0; i < 4; ++i)
    if (out->shape[i] != want[i])
      fail("xattn_forward: out has shape ", shape_of(*out), " but the result is (B, Hq, Sq, Dv) (", B, ",", Hq, ",", Sq,
           ",", want[3], ")");
  a.q = view_of(*q);
  a.k = view_of(*k);
  a.v = view_of(*v);
  a.out = view_of(*out);

  if (lse != nullptr) {
    check_tensor(lse, "lse", 3);
    const xattn_dtype acc = a.dtype == XATTN_F64 ? XATTN_F64 : XATTN_F32;
    if (lse->dtype != acc)
      fail("xattn_forward: lse has dtype ", dtype_name(lse->dtype), " but must be ", dtype_name(acc), " for ",
           dtype_name(a.dtype), " inputs");
    if (lse->shape[0] != B || lse->shape[1] != Hq || lse->shape[2] != Sq)
      fail("xattn_forward: lse has shape ", shape_of(*lse), " but must be (B, Hq, Sq) (", B, ",", Hq, ",", Sq, ")");
    a.lse = lse->data;
    for (std::size_t i = 0; i < 3; ++i) {
      a.lse_shape[i] = std::size_t(lse->shape[i]);
      a.lse_strides[i] = std::ptrdiff_t(lse->strides[i]);
    }
  }

  const xattn_attention_desc& d = *desc;
  if (d.documents != nullptr || d.mask != nullptr || d.bias != nullptr || d.alibi != nullptr)
    throw unsupported(
        "xattn_forward: desc.documents, desc.mask, desc.bias and desc.alibi are not supported by this "
        "version of the C interface; leave them NULL");
  if (d.dropout_p != 0.0f)
    throw unsupported(
        "xattn_forward: desc.dropout_p must be 0: dropout is not supported by this version of the C "
        "interface");
  if (!std::isfinite(d.scale)) fail("xattn_forward: desc.scale is ", d.scale, "; it must be finite (0: 1/sqrt(D))");
  a.scale = d.scale != 0.0f ? double(d.scale) : 1.0 / std::sqrt(double(D));
  if (d.causal != XATTN_CAUSAL_NONE && d.causal != XATTN_CAUSAL_TOP_LEFT && d.causal != XATTN_CAUSAL_BOTTOM_RIGHT)
    fail("xattn_forward: desc.causal is ", int(d.causal),
         "; it must be XATTN_CAUSAL_NONE, XATTN_CAUSAL_TOP_LEFT or XATTN_CAUSAL_BOTTOM_RIGHT");
  if (d.window_left < -1 || d.window_right < -1)
    fail("xattn_forward: desc.window_left and desc.window_right must be >= 0, or -1 (unbounded); got (", d.window_left,
         ", ", d.window_right, ")");
  a.left = d.window_left < 0 ? unbounded : d.window_left;
  a.right = d.window_right < 0 ? unbounded : d.window_right;
  if (d.causal != XATTN_CAUSAL_NONE) a.right = std::min<std::int64_t>(a.right, 0);
  a.where = d.causal == XATTN_CAUSAL_BOTTOM_RIGHT ? align::bottom_right : align::top_left;
  a.windowed = d.window_left >= 0 || d.window_right >= 0;
  a.band = d.causal != XATTN_CAUSAL_NONE || a.windowed;

  if (d.lengths != nullptr) {
    const xattn_tensor& l = *d.lengths;
    if (l.rank != 1 && l.rank != 2)
      fail("xattn_forward: desc.lengths has rank ", l.rank, " but must be (B) or (B, Sq) = (", B, ") or (", B, ",", Sq,
           ")");
    check_tensor(&l, "desc.lengths", l.rank);
    if (l.dtype != XATTN_I32 && l.dtype != XATTN_I64)
      fail("xattn_forward: desc.lengths has dtype ", dtype_name(l.dtype), " but must be XATTN_I32 or XATTN_I64");
    if (l.shape[0] != B || (l.rank == 2 && l.shape[1] != Sq))
      fail("xattn_forward: desc.lengths has shape ", shape_of(l), " but must be (B) or (B, Sq) = (", B, ") or (", B,
           ",", Sq, ")");
    lengths_mask m;
    m.fill_value = -std::numeric_limits<double>::infinity();  // a row of length 0 sees nothing: output 0
    for (int i = 0; i < l.rank; ++i) m.shape.push_back(std::size_t(l.shape[i]));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < (l.rank == 2 ? Sq : 1); ++i) m.lens.push_back(int_at(l, b, i));
    a.lengths = std::move(m);
  }
  if (!(d.softcap >= 0.0f) || !std::isfinite(d.softcap))
    fail("xattn_forward: desc.softcap is ", d.softcap, "; it must be > 0, or 0 (off)");
  a.softcap = d.softcap;
  if (d.sinks != nullptr) {
    const xattn_tensor& s = *d.sinks;
    check_tensor(&s, "desc.sinks", 1);
    if (s.dtype != XATTN_F32 && s.dtype != XATTN_F64)
      fail("xattn_forward: desc.sinks has dtype ", dtype_name(s.dtype), " but must be XATTN_F32 or XATTN_F64");
    if (s.shape[0] != Hq) fail("xattn_forward: desc.sinks has shape ", shape_of(s), " but must be (Hq) = (", Hq, ")");
    for (std::int64_t h = 0; h < Hq; ++h)
      a.sinks.push_back(s.dtype == XATTN_F32 ? double(static_cast<const float*>(s.data)[h * s.strides[0]])
                                             : static_cast<const double*>(s.data)[h * s.strides[0]]);
  }
  if (d.threads < 0) fail("xattn_forward: desc.threads is ", d.threads, "; it must be >= 0 (0: OpenMP's default)");
  a.sch.threads = d.threads;
  return a;
}

}  // namespace xattn::c_api
