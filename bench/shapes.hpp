// The benchmark shape table, shared by every attention variant so their rows line up in the report.
#pragma once

#include <array>
#include <cstddef>

namespace xattn_bench {

struct attention_shape {
  int batch;
  int heads;
  int seq_q;
  int seq_kv;
  int head_dim;
  bool causal;
};

inline constexpr std::array<attention_shape, 7> attention_shapes{{
    {1, 8, 512, 512, 64, false},
    {1, 8, 2048, 2048, 64, false},
    {1, 8, 4096, 4096, 64, false},
    {1, 8, 2048, 2048, 128, false},
    {4, 16, 256, 256, 64, false},
    {1, 8, 2048, 2048, 64, true},
    {1, 32, 1, 4096, 128, false},  // decode: one new query against a long KV cache
}};

// Shapes only the xattn variants run (fp32, bf16, float16): batched decoding and encoder-sized
// batches; the baselines' columns stay empty there, but for OpenBLAS's (unfused, and its products
// alone) and ONNX Runtime's (bench/ort.sh) on the encoder batch.
inline constexpr std::array<attention_shape, 2> xattn_only_shapes{{
    {16, 32, 1, 2048, 128, false},  // batched decode
    {32, 12, 128, 128, 64, false},  // encoder-sized batch
}};

// The rows of today's attention words (xattn_sinks, ...): the long dense and causal shapes their
// costs are stated at, beside the plain rows of the same shapes.
inline constexpr std::array<attention_shape, 3> modern_shapes{{
    {1, 8, 2048, 2048, 64, false},
    {1, 8, 2048, 2048, 128, false},
    {1, 8, 2048, 2048, 64, true},
}};

inline constexpr std::array<int, 2> thread_counts{1, 2};

// Work per call: QKᵀ and PV are 2·Sq·Skv·D FLOP each per head. Causal counts half, whatever the
// kernel actually computes, so a kernel that skips masked blocks is credited and one that does not is not.
inline double attention_flop(const attention_shape& s) {
  double const full = 4.0 * s.batch * s.heads * double(s.seq_q) * s.seq_kv * s.head_dim;
  return s.causal ? full / 2 : full;
}

// Causal mask convention (bottom-right aligned, as in FlashAttention): query row i sees keys
// j < i + 1 + (Skv - Sq). Every variant and the reference check use this one definition.
inline std::ptrdiff_t causal_visible_keys(const attention_shape& s, std::ptrdiff_t row) {
  if (!s.causal) return s.seq_kv;
  std::ptrdiff_t const n = row + 1 + (s.seq_kv - s.seq_q);
  return n < 0 ? 0 : (n > s.seq_kv ? s.seq_kv : n);
}

inline std::size_t elements_q(const attention_shape& s) {
  return std::size_t(s.batch) * s.heads * s.seq_q * s.head_dim;
}
inline std::size_t elements_kv(const attention_shape& s) {
  return std::size_t(s.batch) * s.heads * s.seq_kv * s.head_dim;
}

}  // namespace xattn_bench
