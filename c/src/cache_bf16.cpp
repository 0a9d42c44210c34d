// The caches with bfloat16 keys, for every value type (a file per key type: they compile in parallel).
#include <xattn/c_api/cache.hpp>

namespace xattn::c_api {
template std::unique_ptr<any_cache> make_cache<bfloat16>(xattn_dtype, const kv_cache_options&);
}  // namespace xattn::c_api
