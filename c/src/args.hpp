#pragma once
// The C interface's arguments checked and turned into the C++ library's terms, before any kernel
// runs: every error is raised here or by the library's own checks, which also precede writing.
#include <xattn.h>
#include <xattn/xattn.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
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

/// Everything xattn_forward was given, checked (std::invalid_argument naming the argument and the
/// shapes, or c_api::unsupported).
forward_args forward_arguments(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v,
                               const xattn_attention_desc* desc, const xattn_tensor* out, const xattn_tensor* lse);

/// A valid combination this build does not run (XATTN_UNSUPPORTED).
struct unsupported : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// Runs the fused forward for inputs of element type T (defined per type in forward_*.cpp).
template <class T>
void forward_as(const forward_args& a);

}  // namespace xattn::c_api
