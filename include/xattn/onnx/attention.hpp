#pragma once
// ONNX Attention (opset 23/24) as an expression of the DSL: one fused pass for Y; the
// qk_matmul_output tap comes from the reference evaluator of the same expression, and only when
// asked for. Semantics follow tests/data/onnx/ONNX_ATTENTION_SPEC_NOTES.md: 3-D inputs are
// read as heads in place, masks broadcast to (B, Hq, Sq, T) with short masks padded as excluded,
// causal offsets 0 / past length / nonpad_kv_seqlen[b] - Sq, softcap before the mask, GQA by
// repeat-interleave, fully masked rows give zeros. Softmax always runs in float32 or wider.
// T is the operands' type: float, or xattn::float16 for float16 models, whose Q, K, V and caches
// are read as they are stored and whose outputs are rounded once from the float accumulation.
#include "../xattn.hpp"
#include "attention_mask.hpp"

#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace xattn::onnx {

template <class T = float>
struct attention_inputs {  // row-major; a float mask is an additive bias, held in float
  xt::xarray<T> q, k, v;
  std::optional<xt::xarray<float>> attn_mask_float;
  std::optional<xt::xarray<bool>> attn_mask_bool;
  std::optional<xt::xarray<T>> past_key, past_value;
  std::optional<xt::xarray<std::int64_t>> nonpad_kv_seqlen;
  // With attention_attrs::share_past_present_buffer (ONNX Runtime's GroupQueryAttention option):
  // past_key / past_value are (B, kv_heads, capacity, head_size) buffers holding past_seqlens[b]
  // valid tokens of each batch row; the new keys and values are written into them in place.
  std::optional<xt::xarray<std::int64_t>> past_seqlens;
};

struct attention_attrs {
  int is_causal = 0;
  std::optional<int> q_num_heads, kv_num_heads;
  int qk_matmul_output_mode = 0;
  std::optional<float> scale;
  float softcap = 0;
  std::optional<int> softmax_precision;
  // An xattn extension (ONNX Runtime's GroupQueryAttention has it as past_present_share_buffer):
  // the present key and value are the past buffers themselves, each new token written once; call
  // attention(inputs&, ...) with past_seqlens set, and advance past_seqlens yourself.
  bool share_past_present_buffer = false;
};

template <class T = float>
struct attention_outputs {
  xt::xarray<T> y, present_key, present_value, qk_matmul_output;
};

namespace detail {

using xattn::fail;
using xattn::shape_str;

/// (B, S, H*d) -> (B, H, S, d), copied (the cache outputs are 4-D).
template <class T>
xt::xarray<T> to_4d(const xt::xarray<T>& x, std::size_t h, const char* what) {
  if (h == 0 || x.shape()[2] % h != 0)
    fail("Attention: ", what, " of shape ", shape_str(x.shape()), " cannot be split into ", h, " heads");
  auto r = xt::reshape_view(x, {x.shape()[0], x.shape()[1], h, x.shape()[2] / h});
  return xt::transpose(r, {0, 2, 1, 3});
}

/// [past ; new] along the sequence axis: present_key / present_value, each written once, a block
/// of rows per (batch, head) (xarrays are row-major: both parts are runs of whole rows).
template <class T>
xt::xarray<T> concat_cache(const std::optional<xt::xarray<T>>& past, xt::xarray<T> now, const char* what) {
  if (!past) return now;
  const auto& p = past->shape();
  const auto& n = now.shape();
  if (p.size() != 4 || p[0] != n[0] || p[1] != n[1] || p[3] != n[3])
    fail("Attention: ", what, " has shape ", shape_str(p), " but the new entries are ", shape_str(n),
         " (need (B, kv_heads, past, head_size) matching them)");
  xt::xarray<T> out = xt::xarray<T>::from_shape({n[0], n[1], p[2] + n[2], n[3]});
  const std::size_t old_rows = p[2] * p[3], new_rows = n[2] * n[3];
  T* to = out.data();
  for (std::size_t bh = 0; bh < n[0] * n[1]; ++bh) {
    to = std::copy_n(past->data() + bh * old_rows, old_rows, to);
    to = std::copy_n(now.data() + bh * new_rows, new_rows, to);
  }
  return out;
}

/// A mask whose last axis is shorter than T gets the missing keys excluded (opset 24 rule).
template <class T>
xt::xarray<T> pad_keys(const xt::xarray<T>& m, std::size_t total, T excluded) {
  const std::size_t have = m.shape().back();
  if (have == total) return m;
  if (have > total)
    fail("Attention: attn_mask of shape ", shape_str(m.shape()), " has more columns than the ", total, " keys");
  auto shape = m.shape();
  shape.back() = total;
  xt::xarray<T> out(shape, excluded);
  const xt::xarray<T> src = m;  // row-major copy, so rows are contiguous
  for (std::size_t r = 0; r < src.size() / std::max<std::size_t>(have, 1); ++r)
    std::copy_n(src.data() + r * have, have, out.data() + r * total);
  return out;
}

template <class T, class QT, class KT, class VT, class M>
attention_outputs<T> run(QT Q, KT K, VT V, double scale, const optional_softcap& cap, const optional_bias& bias,
                         const M& m, int mode, bool want_qk) {
  const auto base = Q * trans(K) * scale;
  const auto capped = modify(base, cap);
  const auto masked = mask(modify(capped, bias), m);
  attention_outputs<T> out;
  out.y = eval<T>(softmax(masked) * V);
  if (want_qk) {
    switch (mode) {
      case 0:
        out.qk_matmul_output = eval<T>(base);
        break;
      case 1:
        out.qk_matmul_output = eval<T>(capped);
        break;
      case 2:
        out.qk_matmul_output = eval<T>(masked);
        break;
      case 3:
        out.qk_matmul_output = eval<T>(softmax(masked));
        break;
      default:
        fail("Attention: qk_matmul_output_mode must be 0, 1, 2 or 3, got ", mode);
    }
  }
  return out;
}

}  // namespace detail

namespace detail {

/// The new rows of batch row b written into the past buffer after its past_seqlens[b] tokens.
template <class T>
void write_into_past(xt::xarray<T>& past, const xt::xarray<T>& now, const xt::xarray<std::int64_t>& seqlens,
                     const char* what) {
  const auto& p = past.shape();
  const auto& n = now.shape();
  if (p.size() != 4 || p[0] != n[0] || p[1] != n[1] || p[3] != n[3])
    fail("Attention: ", what, " has shape ", shape_str(p), " but the new entries are ", shape_str(n),
         " (need (B, kv_heads, capacity, head_size) matching them)");
  if (seqlens.dimension() != 1 || seqlens.shape()[0] != n[0])
    fail("Attention: past_seqlens has shape ", shape_str(seqlens.shape()), " but must be (", n[0], ")");
  for (std::size_t b = 0; b < n[0]; ++b)
    if (seqlens(b) < 0 || std::size_t(seqlens(b)) + n[2] > p[2])
      fail("Attention: past_seqlens[", b, "] = ", seqlens(b), " plus ", n[2], " new tokens do not fit the ", what,
           " buffer of capacity ", p[2]);
  for (std::size_t b = 0; b < n[0]; ++b)
    for (std::size_t h = 0; h < n[1]; ++h)
      std::copy_n(now.data() + (b * n[1] + h) * n[2] * n[3], n[2] * n[3],
                  past.data() + ((b * p[1] + h) * p[2] + std::size_t(seqlens(b))) * p[3]);
}

}  // namespace detail

template <class T>
attention_outputs<T> attention(const attention_inputs<T>& in, const attention_attrs& at, bool want_present,
                               bool want_qk);

/// attention() whose inputs may be written: with at.share_past_present_buffer the new keys and
/// values go into in.past_key / in.past_value in place (their present outputs stay empty: the
/// present is the past buffer); otherwise as attention(const inputs&).
template <class T>
attention_outputs<T> attention(attention_inputs<T>& in, const attention_attrs& at, bool want_present, bool want_qk) {
  if (!at.share_past_present_buffer) return attention(std::as_const(in), at, want_present, want_qk);
  using namespace detail;
  if (!in.past_key || !in.past_value || !in.past_seqlens)
    fail("Attention: share_past_present_buffer needs past_key, past_value and past_seqlens");
  if (in.nonpad_kv_seqlen) fail("Attention: nonpad_kv_seqlen cannot be combined with past_key/past_value");
  if (in.q.dimension() != 4 || in.k.dimension() != 4 || in.v.dimension() != 4)
    fail("Attention: share_past_present_buffer takes 4-D Q, K and V, got Q ", shape_str(in.q.shape()));
  // checked before anything is written: a failed call leaves the buffers as they were
  const auto& n = in.k.shape();
  for (const auto* x : {&*in.past_key, &*in.past_value}) {
    const auto& p = x->shape();
    if (p.size() != 4 || p[0] != n[0] || p[1] != n[1] || p[3] != n[3] || in.v.shape() != n)
      fail("Attention: past buffer of shape ", shape_str(p), " and new keys ", shape_str(n), ", values ",
           shape_str(in.v.shape()), " do not match (need (B, kv_heads, capacity, head_size))");
  }
  if (in.past_key->shape()[2] != in.past_value->shape()[2])
    fail("Attention: past_key ", shape_str(in.past_key->shape()), " and past_value ", shape_str(in.past_value->shape()),
         " have different capacities");
  write_into_past(*in.past_key, in.k, *in.past_seqlens, "past_key");
  write_into_past(*in.past_value, in.v, *in.past_seqlens, "past_value");
  const std::size_t batch = in.q.shape()[0], sq = in.q.shape()[2], total = in.past_key->shape()[2];
  const double scale = at.scale ? double(*at.scale) : 1.0 / std::sqrt(double(in.q.shape()[3]));
  optional_bias bias;
  attention_mask m;
  if (in.attn_mask_float)
    bias.bias = xattn::bias(pad_keys(*in.attn_mask_float, total, -std::numeric_limits<float>::infinity()));
  if (in.attn_mask_bool) m.keep = bool_mask(pad_keys(*in.attn_mask_bool, total, false));
  xt::xtensor<std::int64_t, 1> lens = xt::xtensor<std::int64_t, 1>::from_shape({batch});
  std::vector<std::int64_t> off(batch);
  for (std::size_t b = 0; b < batch; ++b) {
    lens(b) = (*in.past_seqlens)(b) + std::int64_t(n[2]);
    off[b] = lens(b) - std::int64_t(sq);
  }
  const optional_softcap cap{double(at.softcap)};
  const auto go = [&](const auto& keys) {
    return run<T>(ref(in.q), ref(*in.past_key), ref(*in.past_value), scale, cap, bias, keys, at.qk_matmul_output_mode,
                  want_qk);
  };
  // Without a bool mask, the keys each row has are one of the DSL's own masks (row spans, skipped
  // blocks): causal alone when is_causal (a row's last visible key is its sequence's last).
  if (!in.attn_mask_bool) return at.is_causal ? go(causal_offsets(off)) : go(lengths(lens, masked_rows::zero));
  m.nonpad = lengths(lens, masked_rows::zero);
  if (at.is_causal) m.causal = causal_offsets(off);
  return go(m);
}

template <class T>
attention_outputs<T> attention(const attention_inputs<T>& in, const attention_attrs& at, bool want_present,
                               bool want_qk) {
  using namespace detail;
  if (at.share_past_present_buffer)
    fail(
        "Attention: share_past_present_buffer writes into past_key / past_value: pass the inputs as a non-const "
        "lvalue");
  const std::size_t rank = in.q.dimension();
  if ((rank != 3 && rank != 4) || in.k.dimension() != rank || in.v.dimension() != rank)
    fail("Attention: Q, K and V must all be 3-D or all 4-D, got Q ", shape_str(in.q.shape()), ", K ",
         shape_str(in.k.shape()), ", V ", shape_str(in.v.shape()));
  if (bool(in.past_key) != bool(in.past_value)) fail("Attention: past_key and past_value must be given together");
  if (in.past_key && in.nonpad_kv_seqlen)
    fail("Attention: nonpad_kv_seqlen cannot be combined with past_key/past_value");
  if (in.attn_mask_bool && in.attn_mask_float) fail("Attention: give one attn_mask, bool or float");
  if (at.softmax_precision && *at.softmax_precision != 1 && *at.softmax_precision != 10 &&
      *at.softmax_precision != 11 && *at.softmax_precision != 16)
    fail("Attention: softmax_precision must be 1, 10, 11 or 16 (a float TensorProto type), got ",
         *at.softmax_precision);

  std::size_t hq, hkv;
  if (rank == 3) {
    if (!at.q_num_heads || !at.kv_num_heads || *at.q_num_heads <= 0 || *at.kv_num_heads <= 0)
      fail("Attention: 3-D inputs need q_num_heads and kv_num_heads > 0");
    hq = std::size_t(*at.q_num_heads);
    hkv = std::size_t(*at.kv_num_heads);
  } else {
    hq = in.q.shape()[1];
    hkv = in.k.shape()[1];
  }
  xt::xarray<T> k4 = rank == 3 ? to_4d(in.k, hkv, "K") : in.k;
  xt::xarray<T> v4 = rank == 3 ? to_4d(in.v, hkv, "V") : in.v;
  const std::size_t past = in.past_key ? in.past_key->shape()[2] : 0;
  xt::xarray<T> kt = concat_cache(in.past_key, std::move(k4), "past_key");
  xt::xarray<T> vt = concat_cache(in.past_value, std::move(v4), "past_value");
  const std::size_t batch = in.q.shape()[0], sq = in.q.shape()[rank == 3 ? 1 : 2], total = kt.shape()[2];
  const std::size_t head = rank == 3 ? in.q.shape()[2] / hq : in.q.shape()[3];
  if (rank == 3 && in.q.shape()[2] % hq != 0)
    fail("Attention: Q of shape ", shape_str(in.q.shape()), " cannot be split into ", hq, " heads");

  const double scale = at.scale ? double(*at.scale) : 1.0 / std::sqrt(double(head));
  optional_softcap cap{double(at.softcap)};
  optional_bias bias;
  attention_mask m;
  if (in.attn_mask_float)
    bias.bias = xattn::bias(pad_keys(*in.attn_mask_float, total, -std::numeric_limits<float>::infinity()));
  if (in.attn_mask_bool) m.keep = bool_mask(pad_keys(*in.attn_mask_bool, total, false));
  if (in.nonpad_kv_seqlen) {
    const auto& n = *in.nonpad_kv_seqlen;
    if (n.dimension() != 1 || n.shape()[0] != batch)
      fail("Attention: nonpad_kv_seqlen has shape ", shape_str(n.shape()), " but must be (", batch, ")");
    m.nonpad = lengths(n, masked_rows::zero);
  }
  if (at.is_causal) {
    std::vector<std::int64_t> off(batch, std::int64_t(past));
    if (in.nonpad_kv_seqlen)
      for (std::size_t b = 0; b < batch; ++b) off[b] = (*in.nonpad_kv_seqlen)(b)-std::int64_t(sq);
    m.causal = causal_offsets(off);
  }

  attention_outputs<T> out =
      rank == 3 ? run<T>(heads(in.q, hq), ref(kt), ref(vt), scale, cap, bias, m, at.qk_matmul_output_mode, want_qk)
                : run<T>(ref(in.q), ref(kt), ref(vt), scale, cap, bias, m, at.qk_matmul_output_mode, want_qk);
  if (want_present) {
    out.present_key = std::move(kt);
    out.present_value = std::move(vt);
  }
  return out;
}

}  // namespace xattn::onnx
