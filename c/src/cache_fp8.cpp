// The caches of float8_e4m3 keys, whose values are float8_e4m3 too (paired_format_v).
#include <xattn/c_api/cache.hpp>

namespace xattn::c_api {
template std::unique_ptr<any_cache> make_cache<float8_e4m3>(xattn_dtype, const kv_cache_options&);
}  // namespace xattn::c_api
