// Peers that close their domain while another rank is still busy with them:
// a normal end of a job, not a failure. Nobody may crash or lose anything
// that completed before the departure.
#include "providers.hpp"

#include <cstring>

using fabrix::access;
using fabrix::opcode;
using fabrix::status;

TEST_CASE_TEMPLATE("conformance: peers that close while rank 0 still polls and writes to them", P, FX_PROVIDERS) {
  // verbs;ofi_rxm crashed here twice over (SIGSEGV in the leaver's fi_close
  // and in rank 0's fi_cq_read): rxm 1.17 reposting receive buffers to a
  // closed connection, and the ofi domain closing its notification MR
  // before its endpoint. See providers/ofi/README.md.
  constexpr int ranks = 4;
  constexpr std::uint64_t per_peer = 100;
  fxt::with_ranks<P>(ranks, [](fxt::rank_env<P>& env) {
    std::vector<std::byte> target(64), result(8);
    auto mt = env.reg(target);
    auto mr = env.reg(result, access::local);
    auto peers = env.share(mt);
    if (env.rank != 0) {
      // A burst at rank 0, every operation complete, then leave at once
      // while rank 0 is still writing to us.
      for (std::uint64_t i = 0; i < per_peer; ++i) {
        env.complete_ok(env.qps[0].fetch_add(mr.slice(0, 8), peers[0].slice(8, 8), 1, i), i);
        FX_CHECK_STATUS(env.qps[0].write_with_imm(mt.slice(0, 0), peers[0].slice(0, 0), 7, 1000 + i), status::ok);
      }
      for (std::uint64_t i = 0; i < per_peer; ++i) env.next_token(1000 + i);
      return;
    }
    // Rank 0 writes to every peer and polls until it has seen every peer's
    // notifications and then for one more second, while the peers close.
    // Its own writes may fail once a peer is gone, but only with a peer
    // error; they may also still be in flight when its domain closes.
    std::uint64_t notified = 0, token = 1u << 20;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    auto stop = deadline;
    fabrix::completion cs[32];
    while (std::chrono::steady_clock::now() < stop) {
      for (int r = 1; r < env.size; ++r) {
        const status s = env.qps[r].write_with_imm(mt.slice(0, 0), peers[r].slice(0, 0), 9, token++);
        FX_CHECK(s == status::ok || s == status::again || s == status::peer_unreachable);
      }
      for (int k = 0; k < 20; ++k) {
        const std::size_t n = env.dom.poll(cs);
        for (std::size_t i = 0; i < n; ++i) {
          if (cs[i].op == opcode::remote_write_imm) {
            FX_CHECK(cs[i].imm == 7);
            ++notified;
          } else if (const status s = cs[i].status; s != status::ok && s != status::peer_unreachable &&
                                                    s != status::canceled && s != status::timed_out &&
                                                    s != status::stale_key) {  // a departing peer deregisters first
            fxt::rank_fail("a write to a departing peer failed with a peer error", __FILE__, __LINE__,
                           std::string(fabrix::to_string(s)));
          }
        }
      }
      if (notified == (ranks - 1) * per_peer && stop == deadline)
        stop = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    }
    FX_CHECK(notified == (ranks - 1) * per_peer);
    std::uint64_t adds;
    std::memcpy(&adds, target.data() + 8, 8);
    FX_CHECK(adds == (ranks - 1) * per_peer);
  });
}
