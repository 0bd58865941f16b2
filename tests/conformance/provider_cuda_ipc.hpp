// The cuda_ipc provider under the conformance suite. The suite compiles and
// links against cuda_ipc (static and any_provider), but its buffers are
// pageable host std::vectors that the ranks read and write with the CPU,
// and CUDA IPC shares only device memory between processes. So the run is
// skipped (exit 77): "no CUDA device" here and in CI, and on a GPU machine
// with the reason below. The same checks on device memory — two processes,
// every byte compared — are tests/gpu/gpu_ipc.cpp (suite 'gpu').
#pragma once

#include "harness.hpp"

#include <fabrix/cuda/available.hpp>
#include <fabrix/cuda_ipc.hpp>

namespace fxt {

using static_provider = fabrix::cuda_ipc::provider;
inline constexpr const char* provider_name = "cuda_ipc";

// Empty when the provider can run here; otherwise why not (the run is skipped).
inline std::string unavailable_reason() {
  if (std::string why = fabrix::cuda::unavailable_reason(); !why.empty()) return why;
  return "the suite's buffers are host std::vectors, which CUDA IPC cannot share between processes; "
         "cuda_ipc runs the same checks on device memory in tests/gpu (meson test --suite gpu)";
}

inline fabrix::domain<static_provider> open_static(const fabrix::domain_options& options = test_options()) {
  return must(fabrix::cuda_ipc::domain::create(options), "cuda_ipc domain");
}

}  // namespace fxt
