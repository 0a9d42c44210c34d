// xattn_backward in float (one file per type: they compile in parallel).
#include <xattn/c_api/backward.hpp>

namespace xattn::c_api {
template void backward_as<float>(const backward_args&);
}  // namespace xattn::c_api
