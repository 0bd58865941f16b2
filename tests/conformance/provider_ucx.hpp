// The UCX provider under the conformance suite. FABRIX_TEST_TRANSPORT is a
// UCX_TLS list ("tcp", "sysv,posix,cma", or empty for UCX's own choice).
#pragma once

#include "harness.hpp"

#include <fabrix/ucx.hpp>

namespace fxt {

using static_provider = fabrix::ucx::provider;
inline constexpr const char* provider_name = "ucx";

// Empty when the provider can run here; otherwise why not (the run is skipped).
inline std::string unavailable_reason() { return {}; }

inline fabrix::domain<static_provider> open_static(const fabrix::domain_options& options = test_options()) {
  return must(fabrix::ucx::domain::create(options), "ucx domain");
}

}  // namespace fxt
