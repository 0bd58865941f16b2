// The libfabric provider under the conformance suite. FABRIX_TEST_TRANSPORT
// is a libfabric provider name ("tcp;ofi_rxm", "shm").
#pragma once

#include "harness.hpp"

#include <fabrix/ofi.hpp>

namespace fxt {

using static_provider = fabrix::ofi::provider;
inline constexpr const char* provider_name = "ofi";

// Empty when the provider can run here; otherwise why not (the run is skipped).
inline std::string unavailable_reason() { return {}; }

inline fabrix::domain<static_provider> open_static() {
  return must(fabrix::ofi::domain::create(test_options()), "ofi domain");
}

}  // namespace fxt
