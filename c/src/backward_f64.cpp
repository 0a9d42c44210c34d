// xattn_backward in double (one file per type: they compile in parallel).
#include <xattn/c_api/backward.hpp>

namespace xattn::c_api {
template void backward_as<double>(const backward_args&);
}  // namespace xattn::c_api
