// The routed domain under the conformance suite, over the network providers
// built here. FABRIX_TEST_TRANSPORT is its route (routed/config.hpp), e.g.
// "node=ofi:shm net=ucx:tcp"; every process of a run uses the same one.
#pragma once

#include "harness.hpp"

#include <fabrix/ofi.hpp>
#include <fabrix/routed.hpp>
#include <fabrix/ucx.hpp>

namespace fxt {

using static_provider = fabrix::routed<fabrix::ucx::provider, fabrix::ofi::provider>;
inline constexpr const char* provider_name = "routed";

inline std::string unavailable_reason() { return {}; }

inline fabrix::domain<static_provider> open_static(const fabrix::domain_options& options = test_options()) {
  return must(fabrix::domain<static_provider>::create(options), "routed domain");
}

}  // namespace fxt
