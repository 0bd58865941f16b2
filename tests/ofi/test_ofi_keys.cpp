// The libfabric provider below fabrix's own checks: writes with a forged key
// or to an address outside the registration are posted straight to libfabric
// (endpoint_impl::post_unchecked_write, bypassing the seal, range and rights
// checks that normally refuse them before posting). The target's provider
// must reject them: not one byte of the target's buffer — inside the region
// or in the guard bytes around it — changes, and the initiator gets an error
// completion within a bounded time.
//   tcp;ofi_rxm: the target drops the connection; the initiator's operation
//        completes peer_unreachable (the provider's FI_ECANCELED for a
//        flushed connection) and the peer is failed.
//   shm: libfabric 1.17 drops such a write at the target and never completes
//        it; fabrix's operation timeout (FABRIX_OFI_OP_TIMEOUT_MS, set short
//        by meson.build) turns it into timed_out and fails the peer, so a
//        later post to it is refused too.
// Further below: a forged but sealed remote_buffer read past the end (a
// malicious member of the job), domain_options::device, and many queue
// pairs over a domain's lifetime.
// FABRIX_TEST_TRANSPORT names the libfabric provider ("tcp;ofi_rxm", "shm").
#include "forge.hpp"
#include "harness.hpp"

#include <fabrix/ofi.hpp>

#include <cstdlib>
#include <cstring>
#include <string>

using fabrix::access;
using fabrix::status;

namespace {

constexpr std::size_t region_size = 4096, guard = 4096;

enum class bad_target { forged_key, past_the_end, before_the_start };

// Rank 0 writes 64 bytes at `what`; rank 1 owns a region of 4096 bytes in the
// middle of a 12 KiB zeroed buffer and checks that all of it stays zero.
void run_case(bad_target what) {
  fxt::run_ranks(2, [what](int rank, fabrix::bootstrap& boot) {
    auto dom = fxt::must(fabrix::ofi::domain::create(fxt::test_options()), "ofi domain");
    if (rank == 0) std::printf("ofi domain: %s\n", dom.describe().c_str());
    auto qps = fxt::must(fabrix::connect_all(dom, boot), "connect_all");
    std::vector<std::byte> buf(guard + region_size + guard), src(64);
    auto mt = fxt::must(dom.register_memory(buf.data() + guard, region_size, {}, access::all_remote), "register");
    auto ms = fxt::must(dom.register_memory(src, access::local), "register src");
    auto peers = fxt::must(fabrix::exchange(boot, mt.remote()), "exchange");
    if (rank == 0) {
      fxt::fill(src.data(), src.size(), 42);
      const fabrix::remote_buffer& rb = peers[1];
      const auto key = fabrix::ofi::detail::decode_key(rb.key_bytes());
      FX_CHECK(key.has_value());
      std::uint64_t target = key->target(rb.address, 0), k = key->key;
      switch (what) {
        case bad_target::forged_key: k = key->key ^ 0x5a5a5a5a5a5a5a5aull; break;
        case bad_target::past_the_end: target = key->target(rb.address, region_size); break;
        case bad_target::before_the_start: target = key->target(rb.address, 0) - 64; break;
      }
      FX_CHECK_STATUS(fabrix::detail::provider_impl(qps[1]).post_unchecked_write(ms.slice(0, 64), target, k, 7),
                      status::ok);
      const bool shm = fabrix::detail::provider_impl(dom).provider_name() == "shm";
      // The provider's own answer comes at once; the timeout within one sweep of it.
      const auto c = fxt::await_token(dom, 7, fabrix::detail::provider_impl(dom).op_timeout() + fxt::answer_margin);
      FX_CHECK(c.has_value());  // never silence: an error completion within the bound
      if (c) {
        std::printf("rejected with %s (native %d): %s\n", std::string(fabrix::to_string(c->status)).c_str(),
                    c->native_code, fabrix::detail::provider_impl(dom).last_error().c_str());
        FX_CHECK(fabrix::is_error(c->status));
        FX_CHECK(c->native_code != 0);
        FX_CHECK(c->bytes == 0);
        if (shm) FX_CHECK_STATUS(c->status, status::timed_out);
      }
      if (shm) {
        FX_CHECK(fabrix::detail::provider_impl(dom).expired_operations() == 1);
        FX_CHECK(
            fabrix::detail::provider_impl(qps[1]).failed());  // shm cannot carry anything ordered behind the lost write
        FX_CHECK_STATUS(qps[1].write(ms.slice(0, 64), peers[1].slice(0, 64), 8), status::peer_unreachable);
      } else {
        FX_CHECK(fabrix::detail::provider_impl(dom).expired_operations() == 0);
      }
    } else {
      fxt::serve_for(dom, fabrix::detail::provider_impl(dom).op_timeout() + std::chrono::seconds(3));
    }
    FX_CHECK(boot.barrier().has_value());
    if (rank == 1)
      for (std::byte b : buf) FX_CHECK(b == std::byte{0});
    FX_CHECK(boot.barrier().has_value());
  });
}

}  // namespace

TEST_CASE("ofi: a write with a forged key gets an error completion and writes nothing") {
  run_case(bad_target::forged_key);
}
TEST_CASE("ofi: a write past the end of a region gets an error completion and writes nothing") {
  run_case(bad_target::past_the_end);
}
TEST_CASE("ofi: a write before the start of a region gets an error completion and writes nothing") {
  run_case(bad_target::before_the_start);
}

TEST_CASE("ofi: FABRIX_OFI_OP_TIMEOUT_MS is read strictly") {
  const auto open = [] { return fabrix::ofi::domain::create(fxt::test_options()); };
  fxt::check_env_refused("FABRIX_OFI_OP_TIMEOUT_MS", {"-1", "10ms", "99999999999"}, open);
  const fxt::scoped_env set("FABRIX_OFI_OP_TIMEOUT_MS", "250");
  auto dom = open();
  REQUIRE(dom);
  CHECK(fabrix::detail::provider_impl(*dom).op_timeout() == std::chrono::milliseconds(250));
}

// Item 7 of the hardening issue: a malicious member of the job knows every
// peer's seal secret (it travels in the address blobs of the allgather), so
// it can seal a remote_buffer that claims more than the region. fabrix's
// own checks then pass; the target's provider must refuse. shm 1.17 used to
// read the target's memory itself for such a read (its "fast RMA", no key
// or range check) and returned the bytes next to the region.
TEST_CASE("ofi: a read past the end through a forged, correctly sealed remote_buffer returns no byte of the target") {
  fxt::run_ranks(2, [](int rank, fabrix::bootstrap& boot) {
    auto dom = fxt::must(fabrix::ofi::domain::create(fxt::test_options()), "ofi domain");
    auto qps = fxt::must(fabrix::connect_all(dom, boot), "connect_all");
    auto blobs = fxt::must(boot.allgather(fxt::must(dom.address(), "address")), "allgather");
    std::vector<std::byte> buf(guard + region_size + guard), dst(64);
    std::memset(buf.data(), 0xab, buf.size());  // the target's neighbouring bytes
    auto mt = fxt::must(dom.register_memory(buf.data() + guard, region_size, {}, access::all_remote), "register");
    auto md = fxt::must(dom.register_memory(dst, access::local), "register dst");
    auto peers = fxt::must(fabrix::exchange(boot, mt.remote()), "exchange");
    if (rank == 0) {
      const fabrix::remote_buffer forged = fxt::reseal_longer(peers[1], blobs[1], region_size + guard);
      FX_CHECK_STATUS(qps[1].read(md.slice(0, 64), forged.slice(region_size, 64), 7), status::ok);
      const auto c = fxt::await_token(dom, 7, fabrix::detail::provider_impl(dom).op_timeout() + fxt::answer_margin);
      FX_CHECK(c.has_value());
      if (c) {
        std::printf("forged read: %s (native %d): %s\n", std::string(fabrix::to_string(c->status)).c_str(),
                    c->native_code, fabrix::detail::provider_impl(dom).last_error().c_str());
        FX_CHECK(fabrix::is_error(c->status));
        FX_CHECK(c->bytes == 0);
      }
      for (std::byte b : dst) FX_CHECK(b == std::byte{0});  // not one neighbouring byte came back
    } else {
      fxt::serve_for(dom, fabrix::detail::provider_impl(dom).op_timeout() + std::chrono::seconds(3));
    }
    FX_CHECK(boot.barrier().has_value());
  });
}

// Item 12: domain_options::device names a libfabric domain; one that
// libfabric does not offer is refused, naming it and what is offered.
TEST_CASE("ofi: domain_options::device selects a libfabric domain and refuses one it does not offer") {
  fxt::run_ranks(1, [](int, fabrix::bootstrap&) {
    auto any = fxt::must(fabrix::ofi::domain::create(fxt::test_options()), "ofi domain");
    const std::string offered = fabrix::detail::provider_impl(any).domain_name();
    std::printf("default domain: %s\n", offered.c_str());
    fabrix::domain_options o = fxt::test_options();
    o.device = offered;
    auto same = fxt::must(fabrix::ofi::domain::create(o), "ofi domain on the offered device");
    FX_CHECK(fabrix::detail::provider_impl(same).domain_name() == offered);

    o.device = "nonexistent0";
    auto bad = fabrix::ofi::domain::create(o);
    FX_CHECK(!bad.has_value());
    if (!bad.has_value()) {
      std::printf("nonexistent0: %s\n", bad.error().describe().c_str());
      FX_CHECK(bad.code() == status::invalid_argument);
      FX_CHECK(bad.error().message.find("nonexistent0") != std::string::npos);
      FX_CHECK(bad.error().message.find(offered) != std::string::npos);  // what exists is listed
    }
    // The loopback interface exists on every host; libfabric's tcp offers it
    // only where FI_TCP_IFACE names it (or nothing else is up). Either way,
    // never a domain on another device.
    o.device = "lo";
    auto lo = fabrix::ofi::domain::create(o);
    if (lo.has_value()) {
      FX_CHECK(fabrix::detail::provider_impl(*lo).domain_name() == "lo");
    } else {
      std::printf("lo: %s\n", lo.error().describe().c_str());
      FX_CHECK(lo.code() == status::unsupported);
      FX_CHECK(lo.error().message.find("'lo'") != std::string::npos);
    }
  });
}

// domain_options::wakeup false: the CQ opens without a wait object (what
// tcp;ofi_rxm pays for per completion); the default asks for FI_WAIT_FD.
// wait() itself is checked both ways by the conformance suite.
TEST_CASE("ofi: domain_options::wakeup false opens the completion queue without a wait object") {
  fxt::run_ranks(1, [](int, fabrix::bootstrap&) {
    auto with_fd = fxt::must(fabrix::ofi::domain::create(fxt::test_options()), "ofi domain, wakeup");
    std::printf("default: %s\n", with_fd.describe().c_str());
    const std::string transport = fxt::test_options().transport;
    if (transport.rfind("tcp", 0) == 0)
      FX_CHECK(fabrix::detail::provider_impl(with_fd).wait_fd() >= 0);  // shm 1.17 offers no fd
    fabrix::domain_options o = fxt::test_options();
    o.wakeup = false;
    auto without = fxt::must(fabrix::ofi::domain::create(o), "ofi domain, no wakeup");
    std::printf("wakeup false: %s\n", without.describe().c_str());
    FX_CHECK(fabrix::detail::provider_impl(without).wait_fd() < 0);
    FX_CHECK(without.describe().find("no wait fd") != std::string::npos);
    FX_CHECK_STATUS(without.wait(std::chrono::milliseconds(20)), status::timed_out);
  });
}

// Item 9: queue pairs come and go in a long-lived domain. shm 1.17 holds 256
// peers in an address vector, and fabrix never removed one, so the 257th
// connect failed even with only one queue pair open.
TEST_CASE("ofi: a domain connects and closes 300 queue pairs to one peer, each usable") {
  fxt::run_ranks(1, [](int, fabrix::bootstrap&) {
    auto a = fxt::must(fabrix::ofi::domain::create(fxt::test_options()), "ofi domain a");
    auto b = fxt::must(fabrix::ofi::domain::create(fxt::test_options()), "ofi domain b");
    std::vector<std::byte> target(8), src(8);
    auto mt = fxt::must(b.register_memory(target, access::all_remote), "register target");
    auto ms = fxt::must(a.register_memory(src, access::local), "register src");
    const auto where = fxt::must(b.address(), "address");
    fabrix::completion c[8];
    for (std::uint64_t i = 1; i <= 300; ++i) {
      auto qp = a.connect(where);
      if (!qp) fxt::rank_fail("connect", __FILE__, __LINE__, "#" + std::to_string(i) + ": " + qp.error().describe());
      std::memcpy(src.data(), &i, 8);
      FX_CHECK_STATUS(qp->write(ms.whole(), mt.remote().slice(0, 8), i), status::ok);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      bool done = false;
      while (!done) {
        FX_CHECK(std::chrono::steady_clock::now() < deadline);
        (void)b.poll(c);  // the target progresses the write
        const std::size_t n = a.poll(c);
        for (std::size_t k = 0; k < n; ++k) {
          FX_CHECK(c[k].token == i);
          FX_CHECK_STATUS(c[k].status, status::ok);
          done = true;
        }
      }
      std::uint64_t got = 0;
      std::memcpy(&got, target.data(), 8);
      FX_CHECK(got == i);
    }
  });
}

// Small sends at completion_level::local go as fi_tinject and complete at
// once, without a slot (ofi/detail/post.hpp, inject_send); at most max_outstanding
// of those wait to be polled, then sends take slots, then `again`. Every
// message still arrives, in post order, with its bytes; an unsignaled one is
// counted in finished() and gives no completion.
TEST_CASE("ofi: small sends complete at once, bounded by max_outstanding, and arrive in order") {
  fxt::run_ranks(1, [](int, fabrix::bootstrap&) {
    auto opts = fxt::test_options();
    opts.max_outstanding = 4;
    auto a = fxt::must(fabrix::ofi::domain::create(opts), "ofi domain a");
    auto b = fxt::must(fabrix::ofi::domain::create(fxt::test_options()), "ofi domain b");
    auto ab = fxt::must(a.connect(fxt::must(b.address(), "address b")), "connect a->b");
    auto ba = fxt::must(b.connect(fxt::must(a.address(), "address a")), "connect b->a");
    constexpr std::size_t most = 16, size = 8;
    std::vector<std::byte> src(most * size), dst(most * size);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i / size + 1);
    auto ms = fxt::must(a.register_memory(src, access::local), "register src");
    auto md = fxt::must(b.register_memory(dst, access::local), "register dst");

    // First one message both ways round: the connection is up (while it is
    // being made libfabric says again, and sends wait in their slots).
    fabrix::completion c[16];
    FX_CHECK_STATUS(ba.recv(md.slice(0, size), 1), status::ok);
    FX_CHECK_STATUS(ab.send(ms.slice(0, size), 1), status::ok);
    for (int got = 0; got < 2;) {
      got += static_cast<int>(a.poll(c));
      got += static_cast<int>(b.poll(c));
    }

    FX_CHECK_STATUS(ab.send(ms.slice(0, size), 100, fabrix::op_options::unsignaled), status::ok);
    std::size_t posted = 1;
    while (posted < most) {
      const status s = ab.send(ms.slice(posted * size, size), 100 + posted);
      if (s == status::again) break;
      FX_CHECK_STATUS(s, status::ok);
      ++posted;
    }
    // 4 waiting completions, then 4 slots (the unsignaled one completed at once).
    FX_CHECK(posted >= 5);
    FX_CHECK(posted <= 9);
    for (std::size_t i = 0; i < posted; ++i) FX_CHECK_STATUS(ba.recv(md.slice(i * size, size), 200 + i), status::ok);

    std::vector<std::uint64_t> sent, received;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((sent.size() < posted - 1 || received.size() < posted) && std::chrono::steady_clock::now() < deadline) {
      for (std::size_t k = 0, n = a.poll(c); k < n; ++k) {
        FX_CHECK_STATUS(c[k].status, status::ok);
        FX_CHECK(c[k].bytes == size);
        sent.push_back(c[k].token);
      }
      for (std::size_t k = 0, n = b.poll(c); k < n; ++k) {
        FX_CHECK_STATUS(c[k].status, status::ok);
        FX_CHECK(c[k].bytes == size);
        received.push_back(c[k].token);
      }
    }
    FX_CHECK(ab.finished() == 1);
    FX_CHECK(sent.size() == posted - 1);
    FX_CHECK(received.size() == posted);
    for (std::size_t i = 0; i < sent.size(); ++i) FX_CHECK(sent[i] == 101 + i);
    for (std::size_t i = 0; i < posted; ++i)
      for (std::size_t j = 0; j < size; ++j) FX_CHECK(dst[i * size + j] == static_cast<std::byte>(i + 1));
  });
}
