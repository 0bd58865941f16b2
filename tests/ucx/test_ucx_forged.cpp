// UCX's paths that reach a node-mate's memory without the node-mate checking
// anything — direct copies into UCX-allocated shared-memory segments, and
// fabrix's CMA into memory the node-mate registered itself (cma.hpp) —
// against a malicious member of the job. Every member knows every peer's
// seal secret (it travels in the address blobs), so it can seal a
// remote_buffer that claims more than the region. Such a buffer must not
// reach one byte outside the region: fabrix takes those paths only where
// the owner's key table confirms the range (key_table.hpp: key_extent), and
// otherwise sends checked requests, which the target refuses.
// Runs over UCX shared memory (meson.build: UCX_TLS sysv,posix,cma and
// FABRIX_UCX_CMA_MIN_BYTES=0, so a 64-byte copy would go by CMA).
#include "harness.hpp"

#include <fabrix/ucx.hpp>

#include <cstring>
#include <optional>

using fabrix::access;
using fabrix::status;

namespace {

constexpr std::size_t region_size = 4096, guard = 4096;
constexpr std::byte guard_byte{0xab};

// An operation through a forged buffer fails: refused at post, or an error
// completion with no bytes.
void check_refused(fabrix::domain<fabrix::ucx::provider>& dom, status posted, std::uint64_t token, const char* what) {
  if (posted != status::ok) {
    std::printf("forged %s: refused at post: %s\n", what, std::string(fabrix::to_string(posted)).c_str());
    FX_CHECK(fabrix::is_error(posted));
    return;
  }
  const auto c = fxt::await_token(dom, token);
  FX_CHECK(c.has_value());
  std::printf("forged %s: %s\n", what, std::string(fabrix::to_string(c->status)).c_str());
  FX_CHECK(fabrix::is_error(c->status));
  FX_CHECK(c->bytes == 0);
}

// Rank 1 offers a region (user memory inside guard bytes, or UCX-allocated);
// rank 0 seals a copy of its remote_buffer claiming `region_size + guard`
// bytes and writes and reads 64 bytes just past the region's end.
void run_case(bool allocated) {
  fxt::run_ranks(2, [allocated](int rank, fabrix::bootstrap& boot) {
    auto dom = fxt::must(fabrix::ucx::domain::create(fxt::test_options()), "ucx domain");
    if (rank == 0) std::printf("ucx domain: %s\n", dom.describe().c_str());
    auto qps = fxt::must(fabrix::connect_all(dom, boot), "connect_all");
    auto blobs = fxt::must(boot.allgather(fxt::must(dom.address(), "address")), "allgather");
    std::vector<std::byte> buf(guard + region_size + guard, guard_byte), local(64);
    std::optional<fabrix::memory_region<fabrix::ucx::provider>> mt;
    if (allocated) {
      mt.emplace(fxt::must(dom.allocate_memory(region_size, access::all_remote), "allocate"));
      std::memset(mt->data(), 0x11, region_size);
    } else {
      mt.emplace(fxt::must(dom.register_memory(buf.data() + guard, region_size, {}, access::all_remote), "register"));
    }
    auto ml = fxt::must(dom.register_memory(local, access::local), "register local");
    auto peers = fxt::must(fabrix::exchange(boot, mt->remote()), "exchange");
    if (rank == 0) {
      const auto victim = fabrix::ucx::detail::parse_address(blobs[1]);
      FX_CHECK(victim.has_value());
      fabrix::remote_buffer forged = peers[1];
      forged.length = region_size + guard;
      forged.seal = forged.compute_seal(victim->secret);
      std::memset(local.data(), 0x42, local.size());
      check_refused(dom, qps[1].write(ml.slice(0, 64), forged.slice(region_size, 64), 7), 7, "write past the end");
      std::memset(local.data(), 0, local.size());
      check_refused(dom, qps[1].read(ml.slice(0, 64), forged.slice(region_size, 64), 8), 8, "read past the end");
      for (std::byte b : local) FX_CHECK(b == std::byte{0});  // not one byte from past the region came back
      // The genuine buffer still works.
      FX_CHECK_STATUS(qps[1].write(ml.slice(0, 64), peers[1].slice(0, 64), 9), status::ok);
      const auto c = fxt::await_token(dom, 9);
      FX_CHECK(c.has_value());
      FX_CHECK_STATUS(c->status, status::ok);
    }
    // Rank 1 serves (checked requests need its progress) until rank 0 is done.
    std::vector<fabrix::completion> polled;
    const std::byte none{0};
    (void)boot.allgather(std::span<const std::byte>(&none, 1), fabrix::bootstrap_progress(dom, polled));
    if (rank == 1) {
      for (std::size_t i = 0; i < guard; ++i) FX_CHECK(buf[i] == guard_byte);
      for (std::size_t i = guard + region_size; i < buf.size(); ++i) FX_CHECK(buf[i] == guard_byte);
      const std::byte* region = allocated ? static_cast<const std::byte*>(mt->data()) : buf.data() + guard;
      for (std::size_t i = 64; i < region_size; ++i) FX_CHECK(region[i] == (allocated ? std::byte{0x11} : guard_byte));
    }
    FX_CHECK(boot.barrier().has_value());
  });
}

}  // namespace

TEST_CASE("ucx: a forged, correctly sealed remote_buffer reaches nothing past registered memory (CMA path)") {
  run_case(false);
}
TEST_CASE("ucx: a forged, correctly sealed remote_buffer reaches nothing past UCX-allocated memory (direct path)") {
  run_case(true);
}
