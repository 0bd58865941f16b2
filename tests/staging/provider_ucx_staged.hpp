// The conformance suite (tests/conformance) on staged<ucx::provider> with
// host memory only: every operation passes through the adapter to UCX, so
// this checks that the adapter keeps the provider contract for host traffic
// (batches, flush, notifications, atomics, errors, peer death), statically
// and as fabrix::open("ucx+staged").
#pragma once

#include "harness.hpp"
#include "test_engine.hpp"

#include <fabrix/ucx.hpp>
// (after the provider header: "ucx" must be registered first)
#include <fabrix/cuda/staged_open.hpp>

namespace fxt {

using static_provider = fabrix::cuda::staged<fabrix::ucx::provider, test_engine>;
inline constexpr const char* provider_name = "ucx+staged";

inline std::string unavailable_reason() { return {}; }

inline fabrix::domain<static_provider> open_static(const fabrix::domain_options& options = test_options()) {
  return must(fabrix::domain<static_provider>::create(options), "ucx+staged domain");
}

// Inline variables of one header are initialised in order after those of
// headers included before it in every translation unit, so "ucx" exists here.
inline const bool staged_registered = (fabrix::cuda::enable_staged_providers<test_engine>(), true);

}  // namespace fxt
