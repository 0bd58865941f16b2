// The verbs provider under the conformance suite. Needs an RDMA device with
// an active port (tests/vm runs it on soft-RoCE rxe0); without one the whole
// run is skipped. FABRIX_TEST_TRANSPORT is unused; FABRIX_VERBS_DEVICE /
// FABRIX_VERBS_GID_INDEX pick the device and GID, FABRIX_VERBS_TIMEOUT and
// FABRIX_VERBS_RETRY_CNT bound how long a dead peer goes unnoticed, and
// FABRIX_VERBS_CONNECT=rdma_cm runs the whole suite over rdma_cm-connected
// queue pairs (tests/vm runs it both ways).
#pragma once

#include "harness.hpp"

#include <fabrix/verbs.hpp>

namespace fxt {

using static_provider = fabrix::verbs::provider;
inline constexpr const char* provider_name = "verbs";

// Empty when the provider can run here; otherwise why not (the run is skipped).
inline std::string unavailable_reason() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list) ibv_free_device_list(list);
  if (n == 0) return "no RDMA device (ibv_get_device_list found none)";
  return {};
}

inline fabrix::domain<static_provider> open_static(const fabrix::domain_options& options = test_options()) {
  return must(fabrix::verbs::domain::create(options), "verbs domain");
}

}  // namespace fxt
