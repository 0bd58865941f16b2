// The libfabric provider under the conformance suite. FABRIX_TEST_TRANSPORT
// is a libfabric provider name ("tcp;ofi_rxm", "shm").
#pragma once

#include "harness.hpp"

#include <fabrix/ofi.hpp>

#include <cstdlib>
#include <string>

namespace fxt {

using static_provider = fabrix::ofi::provider;
inline constexpr const char* provider_name = "ofi";

// Empty when the provider can run here; otherwise why not (the run is skipped).
inline std::string unavailable_reason() { return {}; }

// FABRIX_TEST_OFI_MR_MODE ("FI_MR_LOCAL|FI_MR_VIRT_ADDR|...", as describe()
// prints them) makes every domain check that exactly these mode bits are in
// force, so that a run meant to exercise a registration path (the VM's
// verbs;ofi_rxm: FI_MR_LOCAL and FI_MR_PROV_KEY) fails instead of silently
// testing another one.
inline fabrix::domain<static_provider> open_static(const fabrix::domain_options& options = test_options()) {
  auto dom = must(fabrix::ofi::domain::create(options), "ofi domain");
  if (const char* want = std::getenv("FABRIX_TEST_OFI_MR_MODE"); want && *want) {
    const std::string got = fabrix::ofi::detail::mr_mode_names(fabrix::detail::provider_impl(dom).mr_mode());
    if (got != want)
      rank_fail("FABRIX_TEST_OFI_MR_MODE", __FILE__, __LINE__, "in force: " + got + ", expected " + want);
  }
  return dom;
}

}  // namespace fxt
