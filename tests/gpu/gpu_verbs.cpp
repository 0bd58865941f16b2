// The verbs provider with cuda_device memory (<fabrix/verbs/cuda.hpp>): the
// capability report tells the truth, and where it says direct, bytes move
// between GPU memory and host memory through a loopback RC queue pair and
// are checked. Needs an RDMA device (exits 77, skipped, without one). Without
// a CUDA device (tests/vm runs it so, on rxe0) it checks the refusals: the
// report says none because there is no device, and cuda_device
// registrations are refused with unsupported, naming both ways tried.
// A GPU machine without an RDMA NIC can add soft-RoCE:
//   modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <eth>
// (rxe has no dma-buf support and no peer memory: there the report must say
// none and registration must be refused with unsupported.)
#include <doctest/doctest.h>
#include <fabrix/cuda/available.hpp>
#include <fabrix/cuda/device_buffer.hpp>
#include <fabrix/verbs.hpp>
#include <fabrix/verbs/cuda.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using fabrix::access;
using fabrix::completion;
using fabrix::status;
using fabrix::cuda::device_buffer;

namespace {

std::string no_cuda_device;  // why there is none (set by main); empty: there is one

std::byte pattern(std::size_t i) { return static_cast<std::byte>((i * 131 + 7) & 0xff); }

completion wait_for(fabrix::verbs::domain& dom, std::uint64_t token) {
  completion c[8];
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until)
    for (std::size_t i = 0, n = dom.poll(c); i < n; ++i)
      if (c[i].token == token) return c[i];
  FAIL("completion " << token << " did not arrive in 20 s");
  return {};
}

}  // namespace

TEST_CASE("verbs + CUDA: caps().gpu matches what registration does; direct moves checked bytes") {
  auto dom = fabrix::verbs::domain::create();
  REQUIRE_MESSAGE(dom.has_value(), (dom ? "" : dom.error().describe()));
  MESSAGE(dom->describe());
  if (!no_cuda_device.empty()) {
    MESSAGE("no CUDA device: " << no_cuda_device);
    CHECK(dom->caps().gpu == fabrix::gpu_path::none);
    CHECK(dom->describe().find("GPU memory: none (no CUDA device") != std::string::npos);
    // A made-up device pointer: nothing can export or resolve it.
    auto mr = dom->register_memory(reinterpret_cast<void*>(std::uintptr_t{0x7f0000000000}), 4096,
                                   {fabrix::memory_kind::cuda_device, 0}, access::all_remote);
    REQUIRE(!mr.has_value());
    MESSAGE(mr.error().describe());
    CHECK(mr.error().code == status::unsupported);
    CHECK(mr.error().message.find("dma-buf: ") != std::string::npos);
    CHECK(mr.error().message.find("peer memory: ") != std::string::npos);
    return;
  }
  const std::size_t n = 1 << 20;
  auto dev = device_buffer::create(n);
  REQUIRE_MESSAGE(dev.has_value(), (dev ? "" : dev.error().describe()));
  auto mr = dom->register_memory(dev->data(), n, dev->location(), access::all_remote);
  const bool direct = dom->caps().gpu == fabrix::gpu_path::direct;
  CHECK(direct == (fabrix::detail::provider_impl(*dom).gpu_memory() != fabrix::verbs::gpu_registration::none));
  if (!direct) {
    // Refused, with the reason for each way.
    REQUIRE(!mr.has_value());
    MESSAGE(mr.error().describe());
    CHECK(mr.error().code == status::unsupported);
    CHECK(mr.error().message.find("dma-buf") != std::string::npos);
    CHECK(mr.error().message.find("peer memory") != std::string::npos);
    CHECK(dom->describe().find("GPU memory: none") != std::string::npos);
    return;
  }
  REQUIRE_MESSAGE(mr.has_value(), (mr ? "" : mr.error().describe()));
  std::vector<std::byte> host(n), out(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = pattern(i);
  REQUIRE(dev->fill(0) == status::ok);
  auto hmr = dom->register_memory(host, access::all_remote);
  auto omr = dom->register_memory(out, access::all_remote);
  REQUIRE(hmr.has_value());
  REQUIRE(omr.has_value());
  auto qp = dom->connect(dom->address().value());
  REQUIRE_MESSAGE(qp.has_value(), (qp ? "" : qp.error().describe()));
  // host -> GPU by RDMA write, GPU -> host by RDMA read, then compare.
  REQUIRE(qp->write(hmr->slice(0, n), mr->remote().slice(0, n), 1) == status::ok);
  CHECK(wait_for(*dom, 1).status == status::ok);
  REQUIRE(qp->read(omr->slice(0, n), mr->remote().slice(0, n), 2) == status::ok);
  CHECK(wait_for(*dom, 2).status == status::ok);
  CHECK(std::memcmp(out.data(), host.data(), n) == 0);
  std::vector<std::byte> check(n);
  REQUIRE(dev->copy_to_host(0, check) == status::ok);
  CHECK(std::memcmp(check.data(), host.data(), n) == 0);
}

TEST_CASE("verbs + CUDA: host memory labelled cuda_device is refused, never registered as host memory") {
  auto dom = fabrix::verbs::domain::create();
  REQUIRE(dom.has_value());
  std::vector<std::byte> host(1 << 16);
  auto mr = dom->register_memory(host.data(), host.size(), {fabrix::memory_kind::cuda_device, 0}, access::all_remote);
  REQUIRE(!mr.has_value());
  CHECK(mr.error().code == status::unsupported);
}

int main(int argc, char** argv) {
  no_cuda_device = fabrix::cuda::unavailable_reason();
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list) ibv_free_device_list(list);
  if (count == 0) {
    std::printf(
        "gpu verbs tests: skipped: no RDMA device (try: modprobe rdma_rxe; rdma link add rxe0 type rxe "
        "netdev <eth>)\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
