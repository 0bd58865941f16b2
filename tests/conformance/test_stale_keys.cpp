// Keys of deregistered regions (issue: hardening, item 1): an operation
// through the remote_buffer of a region its owner has deregistered completes
// with an error (stale_key, or access_denied where the transport cannot tell
// the two apart), changes no byte of the target, and never crashes it —
// also when the target has unmapped the memory.
#include "providers.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

using fabrix::access;
using fabrix::completion;
using fabrix::opcode;
using fabrix::status;

namespace {

bool stale(status s) { return s == status::stale_key || s == status::access_denied; }

#define FX_CHECK_STALE(completion_)                                                \
  do {                                                                             \
    const status fx_got_ = (completion_).status;                                   \
    if (!stale(fx_got_))                                                           \
      ::fxt::rank_fail("stale(" #completion_ ".status)", __FILE__, __LINE__,       \
                       "(got " + std::string(::fabrix::to_string(fx_got_)) + ")"); \
  } while (0)

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

    // Whether rank 0's queue pair to rank 1 still works after the refusal:
    // not on an RC queue pair (verbs: the NIC's refusal puts it in the error
    // state), nor where a write completes locally and the refusal surfaces
    // as the connection's failure (UCX over RDMA transports: the NIC refuses
    // a key that ucp_mem_unmap deregistered, UCX fails the endpoint).
    std::byte qp_usable{1};
    if (env.rank == 0) {
      fxt::fill(local.data(), 64, 9);
      FX_CHECK_STATUS(env.qps[1].write(ml.slice(0, 64), kept_peers[1].slice(0, 64), 1), status::ok);
      const completion w = env.next_token(1);
      if (w.status == status::ok) {
        // Completed locally (UCX's meaning of a completion): the NIC's
        // refusal must show by the next flush at the latest, when it is
        // posted (the connection has failed already) or when it completes.
        const status posted = env.qps[1].flush(6);
        if (posted == status::ok) {
          if (env.next_token(6).status == status::ok)
            ::fxt::rank_fail("the write or a flush after it failed", __FILE__, __LINE__);
        } else {
          FX_CHECK(posted == status::peer_unreachable);
        }
        qp_usable = std::byte{0};
      } else {
        FX_CHECK_STALE(w);
        if (env.dom.provider() == fabrix::provider_id::verbs) qp_usable = std::byte{0};
      }
      if (qp_usable == std::byte{1}) {
        FX_CHECK_STATUS(env.qps[1].write(ml.slice(0, 64), mapped_peers[1].slice(0, 64), 2), status::ok);
        FX_CHECK_STALE(env.next_token(2));
        FX_CHECK_STATUS(env.qps[1].read(ml.slice(64, 64), kept_peers[1].slice(0, 64), 3), status::ok);
        FX_CHECK_STALE(env.next_token(3));
        if (env.dom.caps().atomics) {
          FX_CHECK_STATUS(env.qps[1].fetch_add(ml.slice(128, 8), kept_peers[1].slice(0, 8), 1, 4), status::ok);
          FX_CHECK_STALE(env.next_token(4));
        }
        // The queue pair still works for live regions.
        env.complete_ok(env.qps[1].write_with_imm(ml.slice(0, 64), live_peers[1].slice(0, 64), 77, 5), 5);
      }
    }
    // Polls while it waits: UCX finishes wiring an endpoint only while both sides progress.
    std::vector<completion> polled;
    const auto verdict =
        env.boot.allgather(std::span<const std::byte>(&qp_usable, 1), fabrix::bootstrap_progress(env.dom, polled))
            .value();
    env.backlog.insert(env.backlog.end(), polled.begin(), polled.end());
    if (env.rank == 1) {
      if (verdict[0][0] == std::byte{1}) {
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

// Deregistration under fire: rank 0 writes to rank 1's region without pause;
// rank 1 deregisters it while the writes come, then reuses the memory. Once
// the region's release has returned, no write may land there (the bytes are
// the owner's again: freed, or reused), whatever path the writes take —
// checked requests, a NIC, or a system call of the initiator (UCX's CMA to a
// node-mate: access_board.hpp). Rank 0's writes end with an error.
TEST_CASE_TEMPLATE("conformance: nothing lands in a region after its release returned, under a stream of writes", P,
                   FX_PROVIDERS) {
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    constexpr std::size_t n = 64 * 1024;
    constexpr std::byte written{0x5a}, poison{0xee};
    std::vector<std::byte> local(n, written), memory(n);
    auto ml = env.reg(local);
    std::optional<fabrix::memory_region<P>> region(env.reg(memory));
    const auto peers = env.share(*region);
    if (env.rank == 0) {
      std::uint64_t token = 1, landed = 0;
      status end = status::ok;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
      while (end == status::ok) {
        FX_CHECK(std::chrono::steady_clock::now() < until);  // rank 1 deregisters after the first write lands
        const status posted = env.qps[1].write(ml.slice(0, n), peers[1].slice(0, n), token);
        if (posted == status::again) {
          env.serve_for(std::chrono::milliseconds(1));
          continue;
        }
        if (posted != status::ok) {
          end = posted;
          break;
        }
        const completion c = env.next_token(token++);
        if (c.status == status::ok)
          ++landed;
        else
          end = c.status;
      }
      FX_CHECK(landed > 0);
      FX_CHECK(fabrix::is_error(end));
    } else {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
      while (std::atomic_ref<std::byte>(memory.back()).load(std::memory_order_acquire) != written) {
        FX_CHECK(std::chrono::steady_clock::now() < until);
        env.serve_for(std::chrono::milliseconds(1));
      }
      region.reset();  // returns while writes keep coming
      std::memset(memory.data(), static_cast<int>(poison), n);
    }
    // Rank 1 keeps serving (refusing) until rank 0 has seen its writes end.
    std::vector<completion> polled;
    const std::byte none{0};
    (void)env.boot.allgather(std::span<const std::byte>(&none, 1), fabrix::bootstrap_progress(env.dom, polled)).value();
    env.backlog.insert(env.backlog.end(), polled.begin(), polled.end());
    if (env.rank == 1) {
      std::size_t changed = 0;
      for (std::byte b : memory) changed += b != poison ? 1 : 0;
      FX_CHECK(changed == 0);
    }
    env.boot.barrier().value();
  });
}
