// Rules of the core contract that outside testing found providers breaking
// (issue: hardening): which peer a notification or message came from,
// receives bounded apart from other operations, wait() with huge timeouts,
// registrations checked against the process's mappings, and a domain
// destroyed before its queue pairs and regions.
#include "providers.hpp"

#include <fabrix/detail/topology.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <optional>

using fabrix::access;
using fabrix::completion;
using fabrix::opcode;
using fabrix::status;

TEST_CASE_TEMPLATE("conformance: completions name their peer, and wait(max) blocks until one comes", P, FX_PROVIDERS) {
  fxt::with_ranks<P>(
      3,
      [](fxt::rank_env<P>& env) {
        std::vector<std::byte> buf(4096), msgs(3 * 64);
        auto mr = env.reg(buf);
        auto mm = env.reg(msgs, access::local);
        auto peers = env.share(mr);
        if (env.rank == 0) {
          for (int r = 1; r < 3; ++r) FX_CHECK(env.qps[r].peer_id() == static_cast<std::uint32_t>(r));
          for (int r = 1; r < 3; ++r) FX_CHECK_STATUS(env.qps[r].recv(mm.slice(r * 64, 64), 10 + r), status::ok);
          // Rank 2 sends only after a pause: wait(max) must sleep until then,
          // not return timed_out at once.
          int seen = 0, timed_out = 0;
          completion c[16];
          while (seen < 4) {
            if (env.dom.wait(std::chrono::milliseconds::max()) == status::timed_out) ++timed_out;
            FX_CHECK(timed_out == 0);
            const std::size_t n = env.dom.poll(c);
            for (std::size_t i = 0; i < n; ++i) {
              if (c[i].op == opcode::remote_write_imm) {
                FX_CHECK(c[i].status == status::ok);
                FX_CHECK(c[i].imm == 100 + c[i].peer);  // each sender put its rank in the value
                FX_CHECK(c[i].peer == 1 || c[i].peer == 2);
                ++seen;
              } else if (c[i].op == opcode::recv) {
                FX_CHECK(c[i].status == status::ok);
                FX_CHECK(c[i].token == 10 + c[i].peer);  // arrived on the queue pair of that peer
                FX_CHECK(c[i].bytes == 8);
                FX_CHECK(fxt::first_mismatch(msgs.data() + c[i].peer * 64, 8, c[i].peer) == 8);
                ++seen;
              }
            }
          }
        } else {
          if (env.rank == 2) env.serve_for(std::chrono::milliseconds(300));
          fxt::fill(msgs.data(), 8, env.rank);
          env.complete_ok(
              env.qps[0].write_with_imm(mr.slice(0, 64), peers[0].slice(env.rank * 64, 64), 100 + env.rank, 1), 1);
          env.complete_ok(env.qps[0].send(mm.slice(0, 8), 2), 2);
        }
        if (env.rank == 0) env.serve_for(std::chrono::milliseconds(100));  // the senders' last completions
        env.boot.barrier().value();
      },
      std::chrono::seconds(60));
}

TEST_CASE_TEMPLATE("conformance: posted receives have their own bound", P, FX_PROVIDERS) {
  fabrix::domain_options o = fxt::test_options();
  o.max_outstanding = 16;
  o.max_posted_recvs = 8;
  fxt::with_ranks_options<P>(2, o, [](fxt::rank_env<P>& env) {
    std::vector<std::byte> buf(16 * 64), in(8 * 64);
    auto mr = env.reg(buf);
    auto mi = env.reg(in, access::local);
    auto peers = env.share(mr);
    if (env.rank == 1) {
      for (int i = 0; i < 8; ++i) FX_CHECK_STATUS(env.qps[0].recv(mi.slice(i * 64, 64), 100 + i), status::ok);
      FX_CHECK_STATUS(env.qps[0].recv(mi.slice(0, 64), 200), status::again);  // the recv bound
      // Eight waiting receives take nothing from the 16 other operations.
      for (int i = 0; i < 16; ++i)
        FX_CHECK_STATUS(env.qps[0].write(mr.slice(i * 64, 64), peers[0].slice(i * 64, 64), i), status::ok);
      for (int i = 0; i < 16; ++i) FX_CHECK(env.next_token(i).status == status::ok);
      env.complete_ok(env.qps[0].write_with_imm(mr.slice(0, 0), peers[0].slice(0, 0), 7, 50), 50);
      for (int i = 0; i < 8; ++i) FX_CHECK(env.next_token(100 + i).status == status::ok);
      for (int i = 0; i < 8; ++i) FX_CHECK(fxt::first_mismatch(in.data() + i * 64, 64, i) == 64);
      // Completed receives give their places back.
      for (int i = 0; i < 8; ++i) FX_CHECK_STATUS(env.qps[0].recv(mi.slice(i * 64, 64), 300 + i), status::ok);
    } else {
      env.next_notify();
      for (int i = 0; i < 8; ++i) {
        fxt::fill(buf.data() + i * 64, 64, i);
        env.complete_ok(env.qps[1].send(mr.slice(i * 64, 64), i), i);
      }
    }
    env.boot.barrier().value();
  });
}

TEST_CASE_TEMPLATE("conformance: registrations are checked, and a domain may go before its queue pairs", P,
                   FX_PROVIDERS) {
  fxt::with_ranks<P>(1, [](fxt::rank_env<P>& env) {
    // Unmapped, overflowing and read-only-for-writers memory is refused
    // before any peer could write into it.
    FX_CHECK(env.dom.register_memory(reinterpret_cast<void*>(0x1000), 4096, {}, access::remote_write).code() ==
             status::invalid_argument);
    std::vector<std::byte> small(64);
    FX_CHECK(env.dom.register_memory(small.data(), SIZE_MAX, {}, access::local).code() == status::invalid_argument);
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    void* ro = ::mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FX_CHECK(ro != MAP_FAILED);
    FX_CHECK(env.dom.register_memory(ro, page, {}, access::remote_write).code() == status::access_denied);
    ::munmap(ro, page);

    // The device the domain uses, where it reports one, is a PCI function
    // sysfs has; soft-RoCE (the verbs runs here) sits on none.
    if (const auto pci = env.dom.device_pci())
      FX_CHECK(std::filesystem::exists(fabrix::detail::sysfs_root() + "/bus/pci/devices/" + *pci));
    if (env.dom.describe().starts_with("verbs rxe")) FX_CHECK(!env.dom.device_pci().has_value());

    // A second domain whose queue pair (a loopback to itself) and regions outlive it.
    std::vector<std::byte> target(256), src(256);
    std::optional<fabrix::domain<P>> other(fxt::open_provider<P>::domain());
    auto qp = fxt::must(other->connect(fxt::must(other->address(), "address")), "connect");
    auto mt = fxt::must(other->register_memory(target, access::all_remote), "register_memory");
    auto ms = fxt::must(other->register_memory(src, access::local), "register_memory");
    fxt::fill(src.data(), src.size(), 5);
    FX_CHECK_STATUS(qp.write(ms.whole(), mt.remote().slice(0, 256), 1), status::ok);
    FX_CHECK_STATUS(qp.flush(2), status::ok);
    completion c[8];
    for (int done = 0; done < 2;) {
      const std::size_t n = other->poll(c);
      for (std::size_t i = 0; i < n; ++i) {
        FX_CHECK(c[i].status == status::ok);
        ++done;
      }
    }
    FX_CHECK(fxt::first_mismatch(target.data(), target.size(), 5) == target.size());
    other.reset();
    FX_CHECK_STATUS(qp.write(ms.whole(), mt.remote().slice(0, 256), 3), status::invalid_argument);
    FX_CHECK_STATUS(qp.flush(4), status::invalid_argument);
    // qp and ms are released after the domain, at the end of this scope.
  });
}
