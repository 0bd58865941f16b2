// The libfabric provider below fabrix's own checks: writes with a forged key
// or to an address outside the registration are posted straight to libfabric
// (endpoint_impl::post_unchecked_write, bypassing the seal, range and rights
// checks that normally refuse them before posting). The target's provider
// must reject them: not one byte of the target's buffer — inside the region
// or in the guard bytes around it — changes, and the initiator gets an error
// completion within a bounded time.
//   tcp;ofi_rxm: the provider answers with an error (canceled / ENOENT).
//   shm: libfabric 1.17 drops such a write at the target and never completes
//        it; fabrix's operation timeout (FABRIX_OFI_OP_TIMEOUT_MS, set short
//        by meson.build) turns it into timed_out and fails the peer, so a
//        later post to it is refused too.
// FABRIX_TEST_TRANSPORT names the libfabric provider ("tcp;ofi_rxm", "shm").
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
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
      FX_CHECK_STATUS(qps[1].native().post_unchecked_write(ms.slice(0, 64), target, k, 7), status::ok);
      const bool shm = dom.native().provider_name() == "shm";
      // The provider's own answer comes at once; the timeout within one sweep of it.
      const auto deadline = std::chrono::steady_clock::now() + dom.native().op_timeout() + std::chrono::seconds(2);
      fabrix::completion c[8];
      bool done = false;
      while (!done && std::chrono::steady_clock::now() < deadline) {
        const std::size_t n = dom.poll(c);
        for (std::size_t i = 0; i < n; ++i) {
          if (c[i].token != 7) continue;
          std::printf("rejected with %s (native %d): %s\n", std::string(fabrix::to_string(c[i].status)).c_str(),
                      c[i].native_code, dom.native().last_error().c_str());
          FX_CHECK(fabrix::is_error(c[i].status));
          FX_CHECK(c[i].native_code != 0);
          FX_CHECK(c[i].bytes == 0);
          if (shm) FX_CHECK_STATUS(c[i].status, status::timed_out);
          done = true;
        }
      }
      FX_CHECK(done);  // never silence: an error completion within the bound
      if (shm) {
        FX_CHECK(dom.native().expired_operations() == 1);
        FX_CHECK(qps[1].native().failed());  // shm cannot carry anything ordered behind the lost write
        FX_CHECK_STATUS(qps[1].write(ms.slice(0, 64), peers[1].slice(0, 64), 8), status::peer_unreachable);
      } else {
        FX_CHECK(dom.native().expired_operations() == 0);
      }
    } else {
      // Serve the transfer (libfabric progresses the target only while it
      // polls) for as long as the initiator may wait.
      fabrix::completion c[8];
      const auto until = std::chrono::steady_clock::now() + dom.native().op_timeout() + std::chrono::seconds(3);
      while (std::chrono::steady_clock::now() < until) (void)dom.poll(c);
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
  const char* old = std::getenv("FABRIX_OFI_OP_TIMEOUT_MS");
  const std::string saved = old ? old : "";
  for (const char* bad : {"-1", "10ms", "99999999999"}) {
    ::setenv("FABRIX_OFI_OP_TIMEOUT_MS", bad, 1);
    auto dom = fabrix::ofi::domain::create(fxt::test_options());
    CHECK(!dom);
    if (!dom) CHECK(dom.code() == status::invalid_argument);
  }
  ::setenv("FABRIX_OFI_OP_TIMEOUT_MS", "250", 1);
  {
    auto dom = fabrix::ofi::domain::create(fxt::test_options());
    REQUIRE(dom);
    CHECK(dom->native().op_timeout() == std::chrono::milliseconds(250));
  }
  if (old)
    ::setenv("FABRIX_OFI_OP_TIMEOUT_MS", saved.c_str(), 1);
  else
    ::unsetenv("FABRIX_OFI_OP_TIMEOUT_MS");
}
