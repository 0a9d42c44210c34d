// The caches of q4 keys, whose values are q4 too (paired_format_v).
#include <xattn/c_api/cache.hpp>

namespace xattn::c_api {
template std::unique_ptr<any_cache> make_cache<q4>(xattn_dtype, const kv_cache_options&);
}  // namespace xattn::c_api
