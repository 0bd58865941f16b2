// The staged adapter with the real CUDA engine, in one process, on any
// machine: without a usable GPU the domain still opens for host memory,
// reports gpu_path::none and refuses device memory with the CUDA reason
// (never a silent wrong answer); with one it reports staged.
#include <doctest/doctest.h>
#include <fabrix/cuda/available.hpp>
#include <fabrix/cuda/staged_cuda.hpp>
#include <fabrix/routed.hpp>
#include <fabrix/ucx.hpp>

#include <algorithm>
#include <string>
#include <vector>

using S = fabrix::cuda::staged_cuda<fabrix::ucx::provider>;

static fabrix::domain_options tcp() {
  fabrix::domain_options o;
  o.transport = "tcp";
  return o;
}

TEST_CASE("staged_cuda reports what it can do with device memory") {
  const std::string why = fabrix::cuda::unavailable_reason();  // probed in a child process
  auto dom = fabrix::domain<S>::create(tcp());
  REQUIRE_MESSAGE(dom.has_value(), (dom ? "" : dom.error().describe()));
  std::vector<std::byte> host(4096);
  CHECK(dom->register_memory(host, fabrix::access::all_remote).has_value());
  static std::byte fake_device[256];
  auto dev = dom->register_memory(fake_device, sizeof fake_device, {fabrix::memory_kind::cuda_device, 0},
                                  fabrix::access::local);
  if (!why.empty()) {
    CHECK(dom->caps().gpu == fabrix::gpu_path::none);
    REQUIRE_FALSE(dev.has_value());
    CHECK(dev.error().code == fabrix::status::unsupported);
    CHECK(dev.error().message.find("cannot register cuda_device memory") != std::string::npos);
    CHECK(dom->describe().find("gpu none") != std::string::npos);
  } else {
    CHECK(dom->caps().gpu == fabrix::gpu_path::staged);
    CHECK(dev.has_value());
  }
}

TEST_CASE("ucx+staged is registered, opens by name only") {
  fabrix::cuda::enable_staged_providers();
  const auto names = fabrix::registered_providers();
  CHECK(std::find(names.begin(), names.end(), "ucx+staged") != names.end());
  auto any = fabrix::open("ucx+staged", tcp());
  REQUIRE_MESSAGE(any.has_value(), (any ? "" : any.error().describe()));
  CHECK(any->provider() == fabrix::provider_id::ucx);
  auto plain = fabrix::open("auto", tcp());
  REQUIRE(plain.has_value());
  CHECK(plain->describe().find("+staged") == std::string::npos);
  CHECK(plain->describe().find("gpu ") == std::string::npos);  // the plain provider, not the adapter
}

TEST_CASE("the routed domain's default routes stage only where there is device memory to stage") {
  fabrix::cuda::enable_staged_providers();
  auto dom = fabrix::domain<fabrix::routed<>>::create({});
  REQUIRE_MESSAGE(dom.has_value(), (dom ? "" : dom.error().describe()));
  const bool stages = dom->describe().find("[staged=") != std::string::npos;
  if (!fabrix::cuda::unavailable_reason().empty()) {
    CHECK_MESSAGE(!stages, dom->describe());  // the CUDA engine without a GPU: gpu none, no staged route
    CHECK(dom->caps().gpu == fabrix::gpu_path::none);
  } else {
    CHECK(dom->caps().gpu != fabrix::gpu_path::none);  // staged, or direct where UCX reaches device memory
  }
}
