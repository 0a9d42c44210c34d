// xattn_forward for double inputs (one file per type: they compile in parallel).
#include <xattn/c_api/forward.hpp>

namespace xattn::c_api {
template void forward_as<double>(const forward_args&);
}  // namespace xattn::c_api
