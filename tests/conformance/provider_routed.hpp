// The routed domain under the conformance suite, over the network providers
// built here, best first (verbs where built, ucx, ofi: the order of
// routed<>'s default net route, so that both instantiations pick the same
// routes). FABRIX_TEST_TRANSPORT is its route (routed/config.hpp), e.g.
// "node=ofi:shm net=ucx:tcp"; every process of a run uses the same one.
#pragma once

#include "harness.hpp"

#include <fabrix/ofi.hpp>
#include <fabrix/routed.hpp>
#include <fabrix/ucx.hpp>
#if defined(FX_ROUTED_VERBS)
#include <fabrix/verbs.hpp>
#endif

namespace fxt {

#if defined(FX_ROUTED_VERBS)
using static_provider = fabrix::routed<fabrix::verbs::provider, fabrix::ucx::provider, fabrix::ofi::provider>;
#else
using static_provider = fabrix::routed<fabrix::ucx::provider, fabrix::ofi::provider>;
#endif
inline constexpr const char* provider_name = "routed";

inline std::string unavailable_reason() { return {}; }

inline fabrix::domain<static_provider> open_static(const fabrix::domain_options& options = test_options()) {
  return must(fabrix::domain<static_provider>::create(options), "routed domain");
}

}  // namespace fxt
