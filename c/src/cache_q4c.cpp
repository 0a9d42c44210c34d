// The caches of q4c keys (quantized per channel over a page), whose values are q4 (paired_values_t).
#include <xattn/c_api/cache.hpp>

namespace xattn::c_api {
template std::unique_ptr<any_cache> make_cache<q4c>(xattn_dtype, const kv_cache_options&);
}  // namespace xattn::c_api
