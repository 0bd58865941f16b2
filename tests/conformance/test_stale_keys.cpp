// Keys of deregistered regions (issue: hardening, item 1): an operation
// through the remote_buffer of a region its owner has deregistered completes
// with an error (stale_key, or access_denied where the transport cannot tell
// the two apart), changes no byte of the target, and never crashes it —
// also when the target has unmapped the memory.
#include "providers.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <optional>

using fabrix::access;
using fabrix::completion;
using fabrix::opcode;
using fabrix::status;

namespace {

bool stale(status s) { return s == status::stale_key || s == status::access_denied; }

}  // namespace

TEST_CASE_TEMPLATE("conformance: operations through a deregistered region's key fail and change nothing", P,
                   FX_PROVIDERS) {
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<std::byte> kept(4096), live(4096), local(4096);
    auto ml = env.reg(local);
    auto mlive = env.reg(live);
    auto live_peers = env.share(mlive);
    // Rank 1's regions that go away before rank 0 uses them: one whose
    // memory stays (its bytes are checked), one whose memory is unmapped.
    void* mapped = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FX_CHECK(mapped != MAP_FAILED);
    std::optional<fabrix::memory_region<P>> mk(env.reg(kept));
    std::optional<fabrix::memory_region<P>> mm(
        fxt::must(env.dom.register_memory(mapped, page, {}, access::all_remote), "register mapped"));
    auto kept_peers = env.share(*mk);
    auto mapped_peers = env.share(*mm);
    if (env.rank == 1) {
      mk.reset();
      mm.reset();
      FX_CHECK(::munmap(mapped, page) == 0);
    }
    env.boot.barrier().value();  // rank 1 has deregistered both

    if (env.rank == 0) {
      const bool rc_queue_pair = env.dom.provider() == fabrix::provider_id::verbs;
      fxt::fill(local.data(), 64, 9);
      FX_CHECK_STATUS(env.qps[1].write(ml.slice(0, 64), kept_peers[1].slice(0, 64), 1), status::ok);
      const completion w = env.next_token(1);
      FX_CHECK(stale(w.status));
      if (!rc_queue_pair) {  // an RC queue pair is in the error state after its first error completion
        FX_CHECK_STATUS(env.qps[1].write(ml.slice(0, 64), mapped_peers[1].slice(0, 64), 2), status::ok);
        FX_CHECK(stale(env.next_token(2).status));
        FX_CHECK_STATUS(env.qps[1].read(ml.slice(64, 64), kept_peers[1].slice(0, 64), 3), status::ok);
        FX_CHECK(stale(env.next_token(3).status));
        if (env.dom.caps().atomics) {
          FX_CHECK_STATUS(env.qps[1].fetch_add(ml.slice(128, 8), kept_peers[1].slice(0, 8), 1, 4), status::ok);
          FX_CHECK(stale(env.next_token(4).status));
        }
        // The queue pair still works for live regions.
        env.complete_ok(env.qps[1].write_with_imm(ml.slice(0, 64), live_peers[1].slice(0, 64), 77, 5), 5);
      }
    } else {
      if (env.dom.provider() != fabrix::provider_id::verbs) {
        FX_CHECK(env.next_notify().imm == 77);
        FX_CHECK(fxt::first_mismatch(live.data(), 64, 9) == 64);
      } else {
        env.serve_for(std::chrono::milliseconds(500));
      }
      for (std::byte b : kept) FX_CHECK(b == std::byte{0});  // not one byte changed
    }
    env.boot.barrier().value();
  });
}
