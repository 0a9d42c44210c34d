// xattn_backward in double for the rarer options, in a translation unit of its own.
#include <xattn/c_api/backward.hpp>

namespace xattn::c_api {
template void backward_general<double>(const backward_args&);
}  // namespace xattn::c_api
