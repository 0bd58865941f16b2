// Checks only the verbs provider can make: what the device itself does with
// a remote key that fabrix's seal check would have refused.
#include "providers.hpp"

#include <fabrix/verbs/testing.hpp>

#include <signal.h>
#include <unistd.h>

#include <cstring>

using fabrix::access;
using fabrix::completion;
using fabrix::status;

TEST_CASE("verbs: a write with a forged rkey completes with access_denied and leaves the target untouched") {
  using P = fabrix::verbs::provider;
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    std::vector<std::byte> target(4096), src(4096);
    auto mt = env.reg(target);
    auto ms = env.reg(src, access::local);
    auto peers = env.share(mt);
    if (env.rank == 0) {
      fxt::fill(src.data(), src.size(), 11);
      const std::uint32_t real = fabrix::detail::load_le<std::uint32_t>(peers[1].key.data());
      const std::uint32_t forged = real ^ 0x00ff0000u;
      auto& ep = env.qps[1].native();
      FX_CHECK_STATUS(fabrix::verbs::testing::post_write_with_rkey(ep, ms.slice(0, 64), peers[1].address, forged, 1),
                      status::ok);
      const completion c = env.next_token(1);
      if (c.status != status::access_denied)
        fxt::rank_fail("access_denied", __FILE__, __LINE__, fabrix::verbs::describe(c));
      FX_CHECK(fabrix::verbs::describe(c).find("remote access error") != std::string::npos);
      // The queue pair is in error now: reported, and never used again.
      FX_CHECK(ep.failed());
      FX_CHECK(!ep.failure().empty());
      FX_CHECK_STATUS(env.qps[1].write(ms.slice(0, 8), peers[1].slice(0, 8), 2), status::peer_unreachable);
    }
    FX_CHECK(env.boot.barrier().has_value());
    if (env.rank == 1)
      for (std::byte b : target) FX_CHECK(b == std::byte{0});
    FX_CHECK(env.boot.barrier().has_value());
  });
}

TEST_CASE("verbs: describe() names the device, port and GID it chose") {
  using P = fabrix::verbs::provider;
  auto dom = fxt::must(fabrix::verbs::domain::create(fxt::test_options()), "verbs domain");
  const std::string d = dom.describe();
  MESSAGE(d);
  CHECK(d.find("port ") != std::string::npos);
  CHECK(d.find("GID[") != std::string::npos);
  CHECK(fabrix::registered_providers().front() == "verbs");
  (void)sizeof(P);
}

TEST_CASE("verbs: a dead peer shows as peer_unreachable within the configured RC timeout") {
  using P = fabrix::verbs::provider;
  // The suite runs with FABRIX_VERBS_TIMEOUT=14 (67 ms a try) and
  // FABRIX_VERBS_RETRY_CNT=3: the error is due after about 4 tries, 0.27 s.
  fxt::with_ranks<P>(
      2,
      [](fxt::rank_env<P>& env) {
        std::vector<std::byte> buf(4096);
        auto mr = env.reg(buf);
        auto peers = env.share(mr);
        FX_CHECK(env.boot.barrier().has_value());
        if (env.rank == 1) ::kill(::getpid(), SIGKILL);
        ::usleep(300 * 1000);  // the kernel has torn down rank 1's queue pairs by now
        const auto t0 = std::chrono::steady_clock::now();
        FX_CHECK_STATUS(env.qps[1].write(mr.slice(0, 64), peers[1].slice(0, 64), 1), status::ok);
        const completion c = env.next_token(1);
        const auto took = std::chrono::steady_clock::now() - t0;
        FX_CHECK(c.status == status::peer_unreachable);
        FX_CHECK(fabrix::verbs::describe(c).find("retry") != std::string::npos);
        std::fprintf(stderr, "dead peer noticed after %.0f ms\n",
                     std::chrono::duration<double, std::milli>(took).count());
        FX_CHECK(took < std::chrono::seconds(3));
        FX_CHECK_STATUS(env.qps[1].write(mr.slice(0, 8), peers[1].slice(0, 8), 2), status::peer_unreachable);
      },
      std::chrono::seconds(60), [](int rank) { return rank == 1 ? fxt::ending::killed : fxt::ending::exit_ok; });
}

TEST_CASE("verbs: two queue pairs between the same two domains pair up in order and keep messages apart") {
  using P = fabrix::verbs::provider;
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    const int peer = 1 - env.rank;
    auto addrs = fxt::must(env.boot.allgather(fxt::must(env.dom.address(), "address")), "allgather");
    // The k-th connect() on one side pairs with the k-th on the other.
    auto qa = fxt::must(env.dom.connect(addrs[peer]), "connect a");
    auto qb = fxt::must(env.dom.connect(addrs[peer]), "connect b");
    std::vector<std::byte> target(8192), src(8192), in(256);
    auto mt = env.reg(target);
    auto ms = env.reg(src, access::local);
    auto mi = env.reg(in, access::local);
    auto peers = env.share(mt);
    fxt::fill(src.data(), src.size(), 21);  // on both ranks: rank 1 compares with it
    std::memcpy(src.data(), "on-a", 4);
    std::memcpy(src.data() + 4, "on-b", 4);
    if (env.rank == 0) {
      // Sent before the peer posts its recv()s: kept until they come.
      env.complete_ok(qa.send(ms.slice(0, 4), 1), 1);
      env.complete_ok(qb.send(ms.slice(4, 4), 2), 2);
      env.complete_ok(qb.write_with_imm(ms.slice(4096, 4096), peers[1].slice(4096, 4096), 8, 3), 3);
      env.complete_ok(qa.write_with_imm(ms.slice(0, 4096), peers[1].slice(0, 4096), 7, 4), 4);
      FX_CHECK(env.boot.barrier().has_value());
    } else {
      std::uint32_t seen = 0;
      for (int k = 0; k < 2; ++k) seen |= 1u << env.next_notify().imm;
      FX_CHECK(seen == ((1u << 7) | (1u << 8)));
      FX_CHECK(std::memcmp(target.data(), src.data(), target.size()) == 0);
      FX_CHECK_STATUS(qb.recv(mi.slice(0, 64), 10), status::ok);
      FX_CHECK_STATUS(qa.recv(mi.slice(64, 64), 11), status::ok);
      const completion b = env.next_token(10), a = env.next_token(11);
      FX_CHECK(b.status == status::ok && b.bytes == 4 && std::memcmp(in.data(), "on-b", 4) == 0);
      FX_CHECK(a.status == status::ok && a.bytes == 4 && std::memcmp(in.data() + 64, "on-a", 4) == 0);
      FX_CHECK(env.boot.barrier().has_value());
    }
  });
}
