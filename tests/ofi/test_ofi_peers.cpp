// completion::peer on the libfabric provider, whose endpoints are
// connectionless (FI_EP_RDM): any domain that knows this one's address can
// write into its registered memory without this domain ever connecting back.
// A notification from such a domain must name completion::unknown_peer, not
// a peer id of some queue pair here (0 was one: rank 0's), while one from a
// queue pair's peer names that peer. Rank 1 writes from a second domain of
// its own that rank 0 never connects to, and from its ordinary queue pair.
// FABRIX_TEST_TRANSPORT names the libfabric provider ("tcp;ofi_rxm",
// "shm"); FABRIX_OFI_NOTIFY_BY_MESSAGE=1 takes the message path, which names
// the sender by its domain's nonce. shm's default path (CQ data, the sender
// named by FI_SOURCE) is not run: libfabric 1.17's shm reports address 0 for
// a sender that is not in the receiver's address vector, which is the
// address of this domain's first queue pair (see providers/ofi/README.md).
#include "harness.hpp"

#include <fabrix/ofi.hpp>

#include <array>
#include <chrono>

using fabrix::access;
using fabrix::status;

namespace {
constexpr std::uint32_t from_stranger = 55, from_peer = 56;
constexpr std::size_t piece = 64;
}  // namespace

TEST_CASE("ofi: a notification from a domain with no queue pair here names unknown_peer") {
  fxt::run_ranks(2, [](int rank, fabrix::bootstrap& boot) {
    auto dom = fxt::must(fabrix::ofi::domain::create(fxt::test_options()), "ofi domain");
    auto qps = fxt::must(fabrix::connect_all(dom, boot), "connect_all");
    std::vector<std::byte> buf(2 * piece), src(2 * piece);
    auto mt = fxt::must(dom.register_memory(buf, access::all_remote), "register");
    auto peers = fxt::must(fabrix::exchange(boot, mt.remote()), "exchange");
    const auto addresses = fxt::must(boot.allgather(fxt::must(dom.address(), "address")), "allgather addresses");
    std::array<fabrix::completion, 8> out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);

    if (rank == 1) {
      // A stranger: a second domain, connected one way only.
      auto stranger = fxt::must(fabrix::ofi::domain::create(fxt::test_options()), "second ofi domain");
      auto qp = fxt::must(stranger.connect(addresses[0], 7), "connect the stranger");
      fxt::fill(src.data(), src.size(), 9);
      auto ms = fxt::must(stranger.register_memory(src, access::local), "register src");
      FX_CHECK_STATUS(qp.write_with_imm(ms.slice(0, piece), peers[0].slice(0, piece), from_stranger, 1), status::ok);
      bool done = false;
      while (!done && std::chrono::steady_clock::now() < deadline) {
        const std::size_t n = stranger.poll(out);
        for (std::size_t i = 0; i < n; ++i) {
          FX_CHECK(out[i].token == 1 && out[i].status == status::ok);
          done = true;
        }
      }
      FX_CHECK(done);
      auto mp = fxt::must(dom.register_memory(src, access::local), "register src");
      FX_CHECK_STATUS(qps[0].write_with_imm(mp.slice(piece, piece), peers[0].slice(piece, piece), from_peer, 2),
                      status::ok);
      // Polled until it completes: on the message path its notification goes
      // out only after the data's delivery, from this rank's progress (300 ms
      // of polling were not always enough under TSan over tcp).
      const auto c = fxt::await_token(dom, 2, std::chrono::seconds(20));
      FX_CHECK(c.has_value());
      FX_CHECK(c->status == status::ok);
      boot.barrier().value();
      return;
    }

    int seen = 0;
    while (seen < 2 && std::chrono::steady_clock::now() < deadline) {
      const std::size_t n = dom.poll(out);
      for (std::size_t i = 0; i < n; ++i) {
        FX_CHECK(out[i].op == fabrix::opcode::remote_write_imm);
        FX_CHECK(out[i].status == status::ok);
        if (out[i].imm == from_stranger) FX_CHECK(out[i].peer == fabrix::completion::unknown_peer);
        if (out[i].imm == from_peer) FX_CHECK(out[i].peer == 1u);
        ++seen;
      }
    }
    FX_CHECK(seen == 2);
    // Both writes' bytes are in place: the stranger's first half, the peer's second.
    FX_CHECK(fxt::first_mismatch(buf.data(), 2 * piece, 9) == 2 * piece);
    boot.barrier().value();
  });
}
