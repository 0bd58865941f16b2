// Bad input from callers and peers: clear errors, no crash, no hang, no
// stray bytes.
#include "providers.hpp"

#include <signal.h>

#include <cstring>

using fabrix::access;
using fabrix::completion;
using fabrix::opcode;
using fabrix::status;

TEST_CASE_TEMPLATE("conformance: out-of-range, read-only and foreign remote buffers are refused", P, FX_PROVIDERS) {
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    std::vector<std::byte> rw(4096), ro(4096), wo(4096), src(8192);
    auto mrw = env.reg(rw);
    auto mro = env.reg(ro, access::remote_read);
    auto mwo = env.reg(wo, access::remote_write);
    auto ms = env.reg(src, access::local);
    auto prw = env.share(mrw);
    auto pro = env.share(mro);
    auto pwo = env.share(mwo);
    if (env.rank == 0) {
      fxt::fill(src.data(), src.size(), 3);
      auto& qp = env.qps[1];
      // Beyond the region: past the end, straddling it, and offsets that overflow.
      FX_CHECK_STATUS(qp.write(ms.slice(0, 8), prw[1].slice(4096, 8), 1), status::out_of_range);
      FX_CHECK_STATUS(qp.write(ms.slice(0, 16), prw[1].slice(4090, 16), 1), status::out_of_range);
      FX_CHECK_STATUS(qp.write(ms.slice(0, 5000), prw[1].slice(0, 5000), 1), status::out_of_range);
      FX_CHECK_STATUS(qp.write(ms.slice(0, 8), prw[1].slice(~std::uint64_t{0} - 3, 8), 1), status::out_of_range);
      FX_CHECK_STATUS(qp.read(ms.slice(0, 8), prw[1].slice(4092, 8), 1), status::out_of_range);
      FX_CHECK_STATUS(qp.write_with_imm(ms.slice(0, 8), prw[1].slice(5000, 8), 1, 1), status::out_of_range);
      // Local slices outside their region.
      FX_CHECK_STATUS(qp.write(ms.slice(8190, 8), prw[1].slice(0, 8), 1), status::out_of_range);
      // Wrong rights: writing a read-only region, reading a write-only one, atomics on either.
      FX_CHECK_STATUS(qp.write(ms.slice(0, 8), pro[1].slice(0, 8), 1), status::access_denied);
      FX_CHECK_STATUS(qp.write_with_imm(ms.slice(0, 8), pro[1].slice(0, 8), 1, 1), status::access_denied);
      FX_CHECK_STATUS(qp.read(ms.slice(0, 8), pwo[1].slice(0, 8), 1), status::access_denied);
      FX_CHECK_STATUS(qp.fetch_add(ms.slice(0, 8), pro[1].slice(0, 8), 1, 1), status::access_denied);
      // Sizes that disagree.
      FX_CHECK_STATUS(qp.write(ms.slice(0, 8), prw[1].slice(0, 16), 1), status::invalid_argument);
      // A remote_buffer of another provider.
      fabrix::remote_buffer foreign = prw[1];
      foreign.provider =
          env.dom.provider() == fabrix::provider_id::verbs ? fabrix::provider_id::ucx : fabrix::provider_id::verbs;
      FX_CHECK_STATUS(qp.write(ms.slice(0, 8), foreign.slice(0, 8), 1), status::invalid_argument);
      // A local slice registered with another domain.
      auto other = fxt::open_provider<P>::domain();
      std::vector<std::byte> elsewhere(64);
      auto mother = fxt::must(other.register_memory(elsewhere, access::local), "register elsewhere");
      FX_CHECK_STATUS(qp.write(mother.slice(0, 8), prw[1].slice(0, 8), 1), status::invalid_argument);
      // A batch with one bad operation posts nothing.
      const fabrix::operation batch[] = {fabrix::op::write(ms.slice(0, 8), prw[1].slice(0, 8), 1),
                                         fabrix::op::write(ms.slice(0, 8), pro[1].slice(0, 8), 2)};
      const auto r = qp.post(batch);
      FX_CHECK(r.status == status::access_denied && r.posted == 1);
      // The allowed operations still work, and nothing was written by the refused ones.
      env.complete_ok(qp.read(ms.slice(0, 4096), pro[1].slice(0, 4096), 10), 10);
      FX_CHECK(fxt::first_mismatch(src.data(), 4096, 3) == 0 || ro[0] == std::byte{0});
      env.complete_ok(qp.write_with_imm(ms.slice(0, 0), prw[1].slice(0, 0), 1, 11), 11);
    } else {
      env.next_notify();
      for (const auto* buf : {&rw, &ro, &wo})
        for (std::byte b : *buf) FX_CHECK(b == std::byte{0});
    }
  });
}

TEST_CASE_TEMPLATE("conformance: forged or misdirected remote keys are refused, not used", P, FX_PROVIDERS) {
  fxt::with_ranks<P>(3, [](fxt::rank_env<P>& env) {
    std::vector<std::byte> target(4096), src(4096);
    auto mt = env.reg(target);
    auto ms = env.reg(src, access::local);
    auto peers = env.share(mt);
    if (env.rank == 0) {
      auto& qp = env.qps[1];
      // Key bytes UCX did not produce for this region.
      const std::uint8_t forged[][12] = {{0},
                                         {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
                                         {0x01, 0, 0, 0, 0, 0, 0, 0, 0x00, 0xff, 0x10, 0x20}};
      for (const auto& key : forged) {
        fabrix::remote_buffer bad = peers[1];
        bad.key.fill(std::byte{0});
        std::memcpy(bad.key.data(), key, sizeof(key));
        bad.key_size = sizeof(key);
        FX_CHECK_STATUS(qp.write(ms.slice(0, 64), bad.slice(0, 64), 1), status::invalid_argument);
      }
      // The right key with a widened range, added rights, or a moved address.
      fabrix::remote_buffer wider = peers[1];
      wider.length = 1 << 20;
      FX_CHECK_STATUS(qp.write(ms.slice(0, 64), wider.slice(8192, 64), 1), status::invalid_argument);
      fabrix::remote_buffer moved = peers[1];
      moved.address -= 4096;
      FX_CHECK_STATUS(qp.write(ms.slice(0, 64), moved.slice(0, 64), 1), status::invalid_argument);
      // A remote_buffer of rank 2 used on the queue pair to rank 1.
      FX_CHECK_STATUS(qp.write(ms.slice(0, 64), peers[2].slice(0, 64), 1), status::invalid_argument);
      // The genuine one still works after all that.
      fxt::fill(src.data(), 64, 1);
      env.complete_ok(qp.write_with_imm(ms.slice(0, 64), peers[1].slice(64, 64), 1, 2), 2);
      env.complete_ok(env.qps[2].write_with_imm(ms.slice(0, 0), peers[2].slice(0, 0), 1, 3), 3);
    } else {
      env.next_notify();
      if (env.rank == 1) {
        FX_CHECK(fxt::first_mismatch(target.data() + 64, 64, 1) == 64);
        for (std::size_t i = 0; i < 64; ++i) FX_CHECK(target[i] == std::byte{0});
        for (std::size_t i = 128; i < target.size(); ++i) FX_CHECK(target[i] == std::byte{0});
      } else {
        for (std::byte b : target) FX_CHECK(b == std::byte{0});
      }
    }
  });
}

TEST_CASE_TEMPLATE("conformance: a peer killed mid-transfer gives the survivor errors, not a hang", P, FX_PROVIDERS) {
  fxt::with_ranks<P>(
      2,
      [](fxt::rank_env<P>& env) {
        std::vector<std::byte> buf(1 << 20);
        auto mr = env.reg(buf);
        auto peers = env.share(mr);
        if (env.rank == 1) {
          env.serve_for(std::chrono::milliseconds(2000));  // serve the transfer for a while, then die
          ::kill(::getpid(), SIGKILL);
        }
        const auto t0 = std::chrono::steady_clock::now();
        const auto limit = std::chrono::seconds(20);
        std::size_t inflight = 0, ok = 0, failed = 0;
        completion c[32];
        bool refused = false;
        while (!refused && (failed == 0 || inflight > 0)) {
          FX_CHECK(std::chrono::steady_clock::now() - t0 < limit);
          if (!refused && inflight < 16) {
            const status s = env.qps[1].read(mr.slice(0, 65536), peers[1].slice(65536, 65536), 1);
            if (s == status::ok)
              ++inflight;
            else if (s != status::again) {
              FX_CHECK(s == status::peer_unreachable);
              refused = true;
            }
          }
          const std::size_t n = env.dom.poll(c);
          for (std::size_t i = 0; i < n; ++i) {
            --inflight;
            if (c[i].status == status::ok)
              ++ok;
            else {
              // access_denied too: a dying process's memory registrations can
              // go before its queue pair does (seen on rxe: IBV_WC_REM_ACCESS_ERR).
              FX_CHECK(c[i].status == status::peer_unreachable || c[i].status == status::canceled ||
                       c[i].status == status::timed_out || c[i].status == status::provider_error ||
                       c[i].status == status::access_denied);
              ++failed;
            }
          }
        }
        FX_CHECK(ok > 0);  // the transfer was under way before the peer died
        // Once the failure is known, new operations are refused at once.
        FX_CHECK_STATUS(env.qps[1].write(mr.slice(0, 8), peers[1].slice(0, 8), 2), status::peer_unreachable);
      },
      std::chrono::seconds(60), [](int rank) { return rank == 1 ? fxt::ending::killed : fxt::ending::exit_ok; });
}
