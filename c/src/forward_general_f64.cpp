// xattn_forward in double for the rarer options and rotary embeddings (16-bit inputs among them run
// in float), in a translation unit of its own: the common kernels' code stays as it was.
#include <xattn/c_api/forward.hpp>

namespace xattn::c_api {
template void forward_in_acc<double>(const forward_args&);
}  // namespace xattn::c_api
