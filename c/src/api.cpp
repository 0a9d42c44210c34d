// The C entry points: arguments checked, the typed forward run, every exception turned into a
// status and the calling thread's message.
#include "args.hpp"

#include <new>
#include <string>

namespace {

thread_local std::string last_error;

template <class F>
xattn_status guarded(F&& f) noexcept {
  try {
    f();
    last_error.clear();
    return XATTN_OK;
  } catch (const xattn::c_api::unsupported& e) {
    last_error = e.what();
    return XATTN_UNSUPPORTED;
  } catch (const std::invalid_argument& e) {
    last_error = e.what();
    return XATTN_INVALID_ARGUMENT;
  } catch (const std::length_error& e) {
    last_error = e.what();
    return XATTN_INVALID_ARGUMENT;
  } catch (const std::bad_alloc&) {
    last_error = "out of memory";
    return XATTN_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    last_error = std::string("internal error: ") + e.what();
    return XATTN_INTERNAL;
  } catch (...) {
    last_error = "internal error: an unknown exception";
    return XATTN_INTERNAL;
  }
}

}  // namespace

extern "C" {

xattn_attention_desc xattn_attention_defaults(void) {
  xattn_attention_desc d{};
  d.scale = 0.0f;
  d.causal = XATTN_CAUSAL_NONE;
  d.window_left = -1;
  d.window_right = -1;
  d.threads = 0;
  return d;
}

xattn_status xattn_forward(const xattn_tensor* q, const xattn_tensor* k, const xattn_tensor* v,
                           const xattn_attention_desc* desc, xattn_tensor* out, xattn_tensor* lse) {
  return guarded([&] {
    using namespace xattn;
    const c_api::forward_args a = c_api::forward_arguments(q, k, v, desc, out, lse);
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

const char* xattn_last_error(void) { return last_error.c_str(); }

const char* xattn_version(void) { return "0.1.0"; }

}  // extern "C"
