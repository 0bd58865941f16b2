// Edges of the contract that outside testing found providers breaking
// (issue: hardening, items 6 and 11): operations that move no byte, and the
// status of operations in flight to a peer that dies.
#include "providers.hpp"

#include <signal.h>
#include <unistd.h>

#include <string>
#include <thread>

using fabrix::completion;
using fabrix::opcode;
using fabrix::status;

TEST_CASE_TEMPLATE("conformance: zero-length writes and reads complete ok with no bytes", P, FX_PROVIDERS) {
  fxt::with_ranks<P>(
      2,
      [](fxt::rank_env<P>& env) {
        std::vector<std::byte> buf(4096);
        auto mr = env.reg(buf);
        auto peers = env.share(mr);
        if (env.rank == 0) {
          fxt::fill(buf.data(), 64, 3);
          const auto none = mr.slice(0, 0);
          for (const std::uint64_t at : {std::uint64_t{0}, std::uint64_t{100}}) {
            FX_CHECK_STATUS(env.qps[1].write(none, peers[1].slice(at, 0), 1 + at), status::ok);
            FX_CHECK_STATUS(env.qps[1].read(none, peers[1].slice(at, 0), 2 + at), status::ok);
            for (const std::uint64_t t : {1 + at, 2 + at}) {
              const completion c = env.next_token(t);
              FX_CHECK(c.status == status::ok);
              FX_CHECK(c.bytes == 0);
            }
          }
          const completion z = [&] {
            FX_CHECK_STATUS(env.qps[1].write_with_imm(none, peers[1].slice(0, 0), 5, 3), status::ok);
            return env.next_token(3);
          }();
          FX_CHECK(z.status == status::ok && z.bytes == 0);
          // The queue pair carries data as before.
          env.complete_ok(env.qps[1].write_with_imm(mr.slice(0, 64), peers[1].slice(0, 64), 6, 4), 4);
        } else {
          const completion n = env.next_notify();
          FX_CHECK(n.imm == 5 && n.bytes == 0);
          for (std::size_t i = 64; i < buf.size(); ++i) FX_CHECK(buf[i] == std::byte{0});  // nothing moved
          const completion d = env.next_notify();
          FX_CHECK(d.imm == 6 && d.bytes == 64);
          FX_CHECK(fxt::first_mismatch(buf.data(), 64, 3) == 64);
        }
        env.boot.barrier().value();
      },
      std::chrono::seconds(60));
}

// The survivor keeps reads in flight while its peer is killed: each one
// completes ok or with an error, never hangs. For ofi, whose README promises
// it, every error is peer_unreachable (tcp;ofi_rxm used to say canceled for
// most of them); other providers may also say canceled or timed_out, as in
// the peer-death case of test_bad_input.cpp.
TEST_CASE_TEMPLATE("conformance: operations in flight to a peer that dies complete with peer errors", P, FX_PROVIDERS) {
  constexpr std::size_t flag_at = (1 << 20) - 1;  // the last byte: outside what rank 0 reads and reads into
  constexpr std::uint64_t read_token = 1, flag_token = 2;
  fxt::with_ranks<P>(
      2,
      [](fxt::rank_env<P>& env) {
        std::vector<std::byte> buf(1 << 20);
        auto mr = env.reg(buf);
        auto peers = env.share(mr);
        if (env.rank == 1) {
          // Serves until rank 0 has seen a read succeed (it then writes the
          // flag byte here), so that some reads finish first however slow
          // the machine: a fixed 500 ms, later 1500 ms, saw none now and
          // then under TSan on a loaded 2-core machine over tcp;ofi_rxm.
          const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(12);
          const volatile std::byte& flag = buf[flag_at];
          while (flag == std::byte{0} && std::chrono::steady_clock::now() < give_up)
            env.serve_for(std::chrono::milliseconds(1));
          // Then it stops answering, so that where reads need the target's
          // progress (checked requests, tcp) some are in flight when it
          // dies: a peer that answered everything and died between two
          // polls of a descheduled initiator left nothing to fail (seen
          // once over ucx shm under the callbacks bootstrap, beside other tests).
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          ::kill(::getpid(), SIGKILL);
        }
        const bool strict = env.dom.provider() == fabrix::provider_id::ofi;
        const auto t0 = std::chrono::steady_clock::now();
        std::size_t inflight = 0, ok = 0, failed = 0;
        bool refused = false, flagged = false;
        buf[flag_at] = std::byte{1};  // the flag's source
        completion c[32];
        while (!refused || inflight > 0) {
          FX_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
          if (ok > 0 && !flagged && !refused) {
            const status s = env.qps[1].write(mr.slice(flag_at, 1), peers[1].slice(flag_at, 1), flag_token);
            if (s == status::ok) {
              flagged = true;
              ++inflight;
            } else if (s != status::again) {
              FX_CHECK_STATUS(s, status::peer_unreachable);
              refused = true;
            }
          }
          while (!refused && inflight < 32) {
            const status s = env.qps[1].read(mr.slice(0, 32768), peers[1].slice(65536, 32768), read_token);
            if (s == status::again) break;
            if (s != status::ok) {
              FX_CHECK_STATUS(s, status::peer_unreachable);
              refused = true;
              break;
            }
            ++inflight;
          }
          const std::size_t n = env.dom.poll(c);
          for (std::size_t i = 0; i < n; ++i) {
            --inflight;
            if (c[i].token == flag_token) continue;  // ok, or failed with the peer: either may happen
            if (c[i].status == status::ok) {
              ++ok;
              continue;
            }
            ++failed;
            if (strict && c[i].status != status::peer_unreachable)
              fxt::rank_fail(
                  "an operation to the dead peer completed with another error", __FILE__, __LINE__,
                  std::string(fabrix::to_string(c[i].status)) + " native " + std::to_string(c[i].native_code));
            FX_CHECK(c[i].status == status::peer_unreachable || c[i].status == status::canceled ||
                     c[i].status == status::timed_out || c[i].status == status::provider_error ||
                     c[i].status == status::access_denied);
          }
        }
        FX_CHECK(ok > 0);
        FX_CHECK(failed > 0);
      },
      std::chrono::seconds(60), [](int rank) { return rank == 1 ? fxt::ending::killed : fxt::ending::exit_ok; });
}
