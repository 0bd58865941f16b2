// The staged adapter with the real CUDA engine: UCX (which cannot touch
// device memory in Debian's build) moving cudaMalloc memory between two
// processes through pinned bounce slots, every byte checked on the host.
// Needs a GPU (gpu_main.cpp exits 77 without one). FABRIX_STAGING_CHUNK etc.
// come from tests/gpu/meson.build; FABRIX_TEST_TRANSPORT is the UCX_TLS list.
#include "../conformance/harness.hpp"

#include <fabrix/cuda/device_buffer.hpp>
#include <fabrix/cuda/staged_cuda.hpp>
#include <fabrix/ucx.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using fabrix::status;
using fabrix::cuda::device_buffer;
using fxt::must;
using S = fabrix::cuda::staged_cuda<fabrix::ucx::provider>;

template <class P>
fabrix::domain<P> open_staged();
template <>
fabrix::domain<S> open_staged<S>() {
  return must(fabrix::domain<S>::create(fxt::test_options()), "staged ucx domain");
}
template <>
fabrix::domain<fabrix::any_provider> open_staged<fabrix::any_provider>() {
  fabrix::cuda::enable_staged_providers();
  return must(fabrix::open("ucx+staged", fxt::test_options()), "open ucx+staged");
}

std::vector<std::byte> pattern(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> v(n);
  fxt::fill(v.data(), n, seed);
  return v;
}

// The staged path's bandwidth for the GPU run's note: one operation, from
// post to completion (a figure, never asserted).
void report(const char* what, std::size_t bytes, std::chrono::steady_clock::time_point started) {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const char* tls = std::getenv("FABRIX_TEST_TRANSPORT");
  std::printf("staged %s over UCX_TLS=%s: %zu B in %.1f us, %.2f GB/s\n", what, tls ? tls : "default", bytes,
              secs * 1e6, static_cast<double>(bytes) / secs / 1e9);
  std::fflush(stdout);
}

template <class P>
void await_signal(fxt::rank_env<P>& env, std::uint32_t tag) {
  env.next([tag](const fabrix::completion& c) { return c.op == fabrix::opcode::remote_write_imm && c.imm == tag; });
}

}  // namespace

TEST_CASE_TEMPLATE("staged ucx moves cudaMalloc memory: write, write_with_imm, read, send/recv", P, S,
                   fabrix::any_provider) {
  fxt::run_ranks(2, [](int rank, fabrix::bootstrap& boot) {
    fxt::rank_env<P> env(rank, boot, open_staged<P>());
    FX_CHECK(env.dom.caps().gpu == fabrix::gpu_path::staged);
    const std::size_t chunk = 256 << 10;  // FABRIX_STAGING_CHUNK in meson.build
    const std::size_t max = 64 * chunk + 5;
    auto dev = must(device_buffer::create(max), "device_buffer");
    auto dev2 = must(device_buffer::create(max), "device_buffer");
    auto dev_mr = must(env.dom.register_memory(dev.data(), max, dev.location(), fabrix::access::local), "register");
    auto dev2_mr = must(env.dom.register_memory(dev2.data(), max, dev2.location(), fabrix::access::local), "register");
    FX_CHECK(!env.dom.register_memory(dev.data(), max, dev.location(), fabrix::access::remote_write));
    // Device memory passed as host memory: refused with a message saying what it is.
    auto as_host = env.dom.register_memory(dev.data(), max, {}, fabrix::access::local);
    FX_CHECK_STATUS(as_host.code(), status::invalid_argument);
    if (!as_host) FX_CHECK(as_host.error().message.find("CUDA device memory") != std::string::npos);
    std::vector<std::byte> target(max), scratch(8);
    auto target_mr = env.reg(target);
    auto scratch_mr = env.reg(scratch);
    const auto peers = env.share(target_mr);
    const auto peer_scratch = env.share(scratch_mr);
    const int peer = 1 - rank;
    auto& qp = env.qps[peer];
    const std::size_t sizes[] = {1, 4097, chunk, chunk + 3, 4 * chunk, max};
    std::uint32_t round = 0;
    for (std::size_t s : sizes) {
      ++round;
      if (rank == 0) {
        const auto src = pattern(s, s);
        FX_CHECK_STATUS(dev.copy_from_host(0, src), status::ok);
        if (s <= 4 * chunk) {  // depth x chunk: one notification for the whole write
          env.complete_ok(qp.write_with_imm(dev_mr.slice(0, s), peers[peer].slice(0, s), round, 1), 1);
        } else {
          const auto started = std::chrono::steady_clock::now();
          env.complete_ok(qp.write(dev_mr.slice(0, s), peers[peer].slice(0, s), 1), 1);
          report("write", s, started);
          for (;;) {
            const status f = qp.flush(2);
            if (f == status::ok) break;
            FX_CHECK_STATUS(f, status::again);
            fabrix::completion c[8];
            const std::size_t n = env.dom.poll(c);
            env.backlog.insert(env.backlog.end(), c, c + n);
          }
          env.complete_ok(status::ok, 2);
          env.complete_ok(qp.write_with_imm(scratch_mr.slice(0, 0), peer_scratch[peer].slice(0, 0), round, 3), 3);
        }
        await_signal(env, 1000 + round);  // the peer checked and refilled
        FX_CHECK_STATUS(dev2.fill(0), status::ok);
        const auto read_started = std::chrono::steady_clock::now();
        env.complete_ok(qp.read(dev2_mr.slice(0, s), peers[peer].slice(0, s), 4), 4);
        if (s == max) report("read", s, read_started);
        std::vector<std::byte> back(s);
        FX_CHECK_STATUS(dev2.copy_to_host(0, back), status::ok);
        FX_CHECK(back == pattern(s, s + 9));
        if (s <= chunk) {
          const auto msg = pattern(s, s + 11);
          FX_CHECK_STATUS(dev.copy_from_host(0, msg), status::ok);
          env.complete_ok(qp.send(dev_mr.slice(0, s), 5), 5);
        }
      } else {
        await_signal(env, round);
        FX_CHECK(fxt::first_mismatch(target.data(), s, s) == s);
        fxt::fill(target.data(), s, s + 9);
        env.complete_ok(qp.write_with_imm(scratch_mr.slice(0, 0), peer_scratch[peer].slice(0, 0), 1000 + round, 6), 6);
        if (s <= chunk) {
          FX_CHECK_STATUS(dev2.fill(0), status::ok);
          env.complete_ok(qp.recv(dev2_mr.slice(0, s), 7), 7);
          std::vector<std::byte> got(s);
          FX_CHECK_STATUS(dev2.copy_to_host(0, got), status::ok);
          FX_CHECK(got == pattern(s, s + 11));
        }
      }
    }
    // Done: rank 1 serves (its target memory stays registered, its domain
    // answers) until rank 0's last read has completed and been checked.
    if (rank == 0) {
      env.complete_ok(qp.write_with_imm(scratch_mr.slice(0, 0), peer_scratch[peer].slice(0, 0), 77, 8), 8);
    } else {
      await_signal(env, 77);
    }
  });
}
