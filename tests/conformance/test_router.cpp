// completion_router (<fabrix/completion_router.hpp>) on every provider: each
// lane gets exactly the completions its filter claims — local operations by
// token, a peer's write_with_imm by immediate — whichever lane's poll drove
// the domain; the default lane gets the rest; a lane's queue grows past its
// reserve without losing anything; a closed lane's completions are counted
// and dropped, never shown to another lane; bad or overlapping filters are
// refused.
#include "providers.hpp"

#include <fabrix/completion_router.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <set>

using fabrix::completion_filter;
using fabrix::status;

namespace {
constexpr std::uint64_t router_top_byte = std::uint64_t{0xff} << 56;
constexpr std::uint64_t a_tokens = std::uint64_t{0xa1} << 56, b_tokens = std::uint64_t{0xb2} << 56;
constexpr std::uint32_t a_imms = 0xau << 28;
constexpr std::uint32_t router_done_imm = 0x0d0e;
constexpr int a_writes = 40, b_writes = 8, plain_writes = 8, a_notes = 8, plain_notes = 8;
constexpr std::size_t router_piece = 64;
}  // namespace

TEST_CASE_TEMPLATE("conformance: completion_router gives each lane its own completions", P, FX_PROVIDERS) {
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    std::vector<std::byte> buf(router_piece * 64), src(router_piece * 64);
    auto mr = env.reg(buf);
    auto ms = env.reg(src, fabrix::access::local);
    auto peers = env.share(mr);
    const int other = 1 - env.rank;
    auto& qp = env.qps[static_cast<std::size_t>(other)];

    if (env.rank == 1) {
      // Notifications for rank 0's lane A and for its default lane, then
      // serve rank 0's writes until it says it is done.
      for (int i = 0; i < a_notes + plain_notes; ++i) {
        const bool to_a = i % 2 == 0;
        const auto imm = to_a ? (a_imms | static_cast<std::uint32_t>(i / 2)) : static_cast<std::uint32_t>(100 + i / 2);
        env.complete_ok(qp.write_with_imm(ms.slice(0, router_piece), peers[0].slice(0, router_piece), imm, 1000 + i),
                        1000 + i);
      }
      const auto done = env.next_notify();
      FX_CHECK(done.imm == router_done_imm);
      FX_CHECK(fxt::first_mismatch(buf.data(), a_writes * router_piece, 5) == a_writes * router_piece);
      env.boot.barrier().value();
      return;
    }

    fabrix::completion_router<P> router(env.dom);
    using lane_t = typename fabrix::completion_router<P>::lane;
    auto refused = [&router](const completion_filter& f) {
      auto l = router.open(f);
      return !l && l.error().code == status::invalid_argument;
    };
    FX_CHECK(refused(completion_filter{}));                    // claims nothing
    FX_CHECK(refused(completion_filter{router_top_byte, 1}));  // value outside the mask
    const lane_t a =
        fxt::must(router.open(completion_filter{router_top_byte, a_tokens, 0xfu << 28, a_imms}, 4), "lane A");
    const lane_t b = fxt::must(router.open(completion_filter{router_top_byte, b_tokens}), "lane B");
    // Meets A's tokens (0xa0..0xaf) / A's immediates: refused.
    FX_CHECK(refused(completion_filter{std::uint64_t{0xf0} << 56, std::uint64_t{0xa0} << 56}));
    FX_CHECK(refused(completion_filter{0, 0, 0x8u << 28, 0x8u << 28}));

    fxt::fill(src.data(), src.size(), 5);
    auto write = [&](std::uint64_t token, int i) {
      FX_CHECK_STATUS(qp.write(ms.slice(static_cast<std::size_t>(i % 64) * router_piece, router_piece),
                               peers[1].slice(static_cast<std::size_t>(i % 64) * router_piece, router_piece), token),
                      status::ok);
    };
    for (int i = 0; i < a_writes; ++i) write(a_tokens | static_cast<std::uint64_t>(i), i);
    for (int i = 0; i < b_writes; ++i) write(b_tokens | static_cast<std::uint64_t>(i), i);
    for (int i = 0; i < plain_writes; ++i) write(static_cast<std::uint64_t>(i) + 1, i);

    // Only the default lane polls; A and B fill up meanwhile (A past its
    // reserve of 4).
    std::set<std::uint64_t> plain_tokens;
    std::set<std::uint32_t> plain_imms;
    std::array<fabrix::completion, 7> out;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((plain_tokens.size() < plain_writes || plain_imms.size() < plain_notes ||
            router.pending(a) < a_writes + a_notes || router.pending(b) < b_writes) &&
           std::chrono::steady_clock::now() < until) {
      const std::size_t n = router.poll(out);
      for (std::size_t i = 0; i < n; ++i) {
        FX_CHECK(out[i].status == status::ok);
        if (out[i].op == fabrix::opcode::remote_write_imm) {
          FX_CHECK(out[i].imm >= 100 && out[i].imm < 100 + plain_notes);
          FX_CHECK(plain_imms.insert(out[i].imm).second);
        } else {
          FX_CHECK(out[i].token >= 1 && out[i].token <= plain_writes);
          FX_CHECK(plain_tokens.insert(out[i].token).second);
        }
      }
    }
    FX_CHECK(plain_tokens.size() == plain_writes);
    FX_CHECK(plain_imms.size() == plain_notes);
    FX_CHECK(router.pending(a) == a_writes + a_notes);
    FX_CHECK(router.pending(b) == b_writes);
    FX_CHECK(router.wait(a, std::chrono::milliseconds(0)) == status::ok);  // it holds some: at once

    // Lane A: its 40 writes and 8 notifications, nothing else.
    std::set<std::uint64_t> a_seen;
    std::set<std::uint32_t> a_imm_seen;
    for (std::size_t n; (n = router.poll(a, out)) > 0;)
      for (std::size_t i = 0; i < n; ++i) {
        FX_CHECK(out[i].status == status::ok);
        if (out[i].op == fabrix::opcode::remote_write_imm)
          FX_CHECK(a_imm_seen.insert(out[i].imm).second && (out[i].imm & (0xfu << 28)) == a_imms);
        else
          FX_CHECK(a_seen.insert(out[i].token).second && (out[i].token & router_top_byte) == a_tokens);
      }
    FX_CHECK(a_seen.size() == a_writes);
    FX_CHECK(a_imm_seen.size() == a_notes);

    // Closing B drops what it holds and what comes for it later, counted;
    // the default lane never sees it.
    router.close(b);
    FX_CHECK(router.discarded() == b_writes);
    FX_CHECK(router.poll(b, out) == 0);
    for (int i = 0; i < 4; ++i) write(b_tokens | static_cast<std::uint64_t>(100 + i), i);
    const auto later = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (router.discarded() < b_writes + 4 && std::chrono::steady_clock::now() < later) {
      FX_CHECK(router.poll(out) == 0);
    }
    FX_CHECK(router.discarded() == b_writes + 4);
    // A lane meeting the closed one's filter may be opened now.
    FX_CHECK(router.open(completion_filter{router_top_byte, b_tokens}).has_value());

    // Everything visible at rank 1 (flush), then tell it to check its bytes.
    auto await_plain = [&](std::uint64_t token) {
      const auto stop = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (std::chrono::steady_clock::now() < stop) {
        const std::size_t n = router.poll(out);
        for (std::size_t i = 0; i < n; ++i)
          if (out[i].token == token) return out[i].status == status::ok;
      }
      return false;
    };
    FX_CHECK_STATUS(qp.flush(98), status::ok);
    FX_CHECK(await_plain(98));
    FX_CHECK_STATUS(qp.write_with_imm(ms.slice(0, 0), peers[1].slice(0, 0), router_done_imm, 99), status::ok);
    FX_CHECK(await_plain(99));
    env.boot.barrier().value();
  });
}
