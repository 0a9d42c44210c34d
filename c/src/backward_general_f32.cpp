// xattn_backward in float for the rarer options, in a translation unit of its own.
#include <xattn/c_api/backward.hpp>

namespace xattn::c_api {
template void backward_general<float>(const backward_args&);
}  // namespace xattn::c_api
