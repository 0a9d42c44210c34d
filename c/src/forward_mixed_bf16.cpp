// xattn_forward for float queries over bfloat16 keys and values (a file of its own: it compiles in
// parallel with the others).
#include <xattn/c_api/forward.hpp>

namespace xattn::c_api {
template void forward_mixed<bfloat16>(const forward_args&);
}  // namespace xattn::c_api
