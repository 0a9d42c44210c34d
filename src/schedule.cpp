// libxattn_kernels: resolve_schedule's rules (eval/plan/schedule_rules.hpp), compiled once; the
// headers of a program linking the library only declare it.
#undef XATTN_PRECOMPILED_KERNELS
#define XATTN_SCHEDULE_RULES_LINKAGE  // an ordinary, external definition
#include <xattn/eval/plan/schedule_rules.hpp>
