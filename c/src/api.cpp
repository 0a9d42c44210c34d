// The C entry points: arguments checked, the typed forward or backward run, every exception turned into a
// status and the calling thread's message.
#include <xattn/c_api/status.hpp>

using xattn::c_api::guarded;

extern "C" {

xattn_attention_desc xattn_attention_defaults(void) {
  xattn_attention_desc d{};
  d.scale = 0.0;
  d.causal = XATTN_CAUSAL_NONE;
  d.window_left = -1;
  d.window_right = -1;
  d.threads = 0;
  d.rope = XATTN_ROPE_NONE;
  d.rope_base = 10000.0;
  d.rope_dims = 0;
  return d;
}

xattn_status xattn_forward(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v,
                           const xattn_attention_desc* desc, xattn_tensor* out, xattn_tensor* lse) {
  return guarded("xattn_forward", [&] {
    using namespace xattn;
    const c_api::forward_args a = c_api::forward_arguments(q, k, v, desc, out, lse);
    if (a.kv_dtype != a.dtype)
      return a.kv_dtype == XATTN_BF16 ? c_api::forward_mixed<bfloat16>(a) : c_api::forward_mixed<float16>(a);
    switch (a.dtype) {
      case XATTN_F32:
        return c_api::forward_as<float>(a);
      case XATTN_F64:
        return c_api::forward_as<double>(a);
      case XATTN_BF16:
        return c_api::forward_as<bfloat16>(a);
      case XATTN_F16:
        return c_api::forward_as<float16>(a);
      default:
        fail("xattn_forward: unreachable dtype");
    }
  });
}

xattn_status xattn_backward(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v,
                            const xattn_attention_desc* desc, const xattn_tensor* out, const xattn_tensor* lse,
                            const xattn_tensor* d_out, xattn_tensor* dq, xattn_tensor* dk, xattn_tensor* dv,
                            xattn_tensor* dsinks, xattn_tensor* dbias) {
  return guarded("xattn_backward", [&] {
    using namespace xattn;
    const c_api::backward_args a = c_api::backward_arguments(q, k, v, desc, out, lse, d_out, dq, dk, dv, dsinks, dbias);
    if (a.f.dtype == XATTN_F64)
      c_api::backward_as<double>(a);
    else
      c_api::backward_as<float>(a);
  });
}

const char* xattn_last_error(void) { return xattn::c_api::last_error().c_str(); }

const char* xattn_version(void) { return "0.3.0"; }

}  // extern "C"
