// send / recv, awaitables, and wait().
#include "providers.hpp"

#include <cstring>

using fabrix::access;
using fabrix::completion;
using fabrix::opcode;
using fabrix::status;

TEST_CASE_TEMPLATE("conformance: send and recv in order, with truncation reported", P, FX_PROVIDERS) {
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    constexpr int count = 100;
    std::vector<std::byte> out(70000), in(count * 1024 + 70000);
    auto mo = env.reg(out, access::local);
    auto mi = env.reg(in, access::local);
    if (env.rank == 1) {
      for (int i = 0; i < count; ++i) FX_CHECK_STATUS(env.qps[0].recv(mi.slice(i * 1024, 1024), i), status::ok);
      FX_CHECK_STATUS(env.qps[0].recv(mi.slice(count * 1024, 16), 500), status::ok);  // too small
      for (int i = 0; i < count; ++i) {
        const completion c = env.next_token(i);
        FX_CHECK(c.status == status::ok && c.op == opcode::recv);
        FX_CHECK(c.bytes == static_cast<std::uint64_t>(i * 10 + 1));
        FX_CHECK(fxt::first_mismatch(in.data() + i * 1024, c.bytes, i) == c.bytes);
      }
      const completion t = env.next_token(500);
      FX_CHECK(t.status == status::truncated);
      FX_CHECK(t.bytes == 16);  // the buffer's length: it holds the message's first 16 bytes
      FX_CHECK(fxt::first_mismatch(in.data() + count * 1024, 16, 77) == 16);
      // Answer with one large message.
      fxt::fill(out.data(), 65536, 1234);
      env.complete_ok(env.qps[0].send(mo.slice(0, 65536), 600), 600);
    } else {
      env.serve_for(std::chrono::milliseconds(50));  // let the receives be posted first
      for (int i = 0; i < count; ++i) {
        fxt::fill(out.data() + i * 11, i * 10 + 1, i);
        env.complete_ok(env.qps[1].send(mo.slice(i * 11, i * 10 + 1), i), i);
      }
      fxt::fill(out.data(), 64, 77);
      env.complete_ok(env.qps[1].send(mo.slice(0, 64), 500), 500);
      env.complete_ok(env.qps[1].recv(mi.slice(0, 65536), 600), 600);
      FX_CHECK(fxt::first_mismatch(in.data(), 65536, 1234) == 65536);
    }
  });
}

template <class P>
fabrix::task<std::uint64_t> ping(fxt::rank_env<P>& env, fabrix::memory_region<P>& mr,
                                 const std::vector<fabrix::remote_buffer>& peers) {
  std::uint64_t moved = 0;
  for (int i = 0; i < 10; ++i) {
    fxt::fill(mr.data(), 4096, i);
    const completion w = co_await env.qps[1].write_with_imm(mr.slice(0, 4096), peers[1].slice(4096, 4096), i);
    FX_CHECK(w.status == status::ok && w.op == opcode::write_with_imm && w.bytes == 4096);
    moved += w.bytes;
    const completion r = co_await env.qps[1].read(mr.slice(8192, 4096), peers[1].slice(4096, 4096));
    FX_CHECK(r.status == status::ok && r.op == opcode::read);
    FX_CHECK(fxt::first_mismatch(mr.data() + 8192, 4096, i) == 4096);
  }
  const completion bad = co_await env.qps[1].write(mr.slice(0, 16), peers[1].slice(3 * 4096, 16));
  FX_CHECK(bad.status == status::out_of_range);  // refused posts resume at once with the error
  co_return moved;
}

TEST_CASE_TEMPLATE("conformance: coroutine awaitables and sync_wait", P, FX_PROVIDERS) {
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    std::vector<std::byte> buf(3 * 4096);
    auto mr = env.reg(buf);
    auto peers = env.share(mr);
    if (env.rank == 0) {
      FX_CHECK(fabrix::sync_wait(env.dom, ping(env, mr, peers)) == 10 * 4096);
      env.complete_ok(env.qps[1].write_with_imm(mr.slice(0, 0), peers[1].slice(0, 0), 99, 1), 1);
    } else {
      for (std::uint32_t i = 0; i < 10; ++i) FX_CHECK(env.next_notify().imm == i);
      env.next([](const completion& c) { return c.op == opcode::remote_write_imm && c.imm == 99; });
    }
  });
}

template <class P>
void wait_until_completion_or_timeout(const fabrix::domain_options& options) {
  fxt::with_ranks_options<P>(2, options, [](fxt::rank_env<P>& env) {
    std::vector<std::byte> buf(64);
    auto mr = env.reg(buf);
    auto peers = env.share(mr);
    if (env.rank == 1) {
      const auto t0 = std::chrono::steady_clock::now();
      FX_CHECK_STATUS(env.dom.wait(std::chrono::milliseconds(100)), status::timed_out);
      const auto waited = std::chrono::steady_clock::now() - t0;
      FX_CHECK(waited >= std::chrono::milliseconds(90));
      FX_CHECK(waited < std::chrono::seconds(5));
      FX_CHECK(env.boot.barrier().has_value());  // now rank 0 notifies us
      const auto t1 = std::chrono::steady_clock::now();
      for (;;) {
        const status s = env.dom.wait(std::chrono::milliseconds(10000));
        FX_CHECK(s == status::ok);
        completion c[4];
        const std::size_t n = env.dom.poll(c);
        if (n == 1) {
          FX_CHECK(c[0].op == opcode::remote_write_imm && c[0].imm == 5);
          break;
        }
        FX_CHECK(std::chrono::steady_clock::now() - t1 < std::chrono::seconds(10));
      }
    } else {
      FX_CHECK(env.boot.barrier().has_value());
      env.serve_for(std::chrono::milliseconds(200));
      env.complete_ok(env.qps[1].write_with_imm(mr.slice(0, 0), peers[1].slice(0, 0), 5, 1), 1);
    }
  });
}

// Both with a wake-up object and without one (domain_options::wakeup false:
// wait() may poll in slices instead): the same statuses and completions.
TEST_CASE_TEMPLATE("conformance: wait() sleeps until a completion or the timeout", P, FX_PROVIDERS) {
  for (const bool wakeup : {true, false}) {
    CAPTURE(wakeup);
    fabrix::domain_options options = fxt::test_options();
    options.wakeup = wakeup;
    wait_until_completion_or_timeout<P>(options);
  }
}
