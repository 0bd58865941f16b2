// The staged adapter between two real processes over a real network
// provider (FX_INNER_PROVIDER over FABRIX_TEST_TRANSPORT), with host memory
// standing in for device memory (test_engine): "device" regions are host
// buffers registered as cuda_device, which the adapter must stage. Every
// test runs for the static staged<P, test_engine> and for fabrix::open("<P>+staged").
// meson.build sets FABRIX_STAGING_CHUNK=64k, DEPTH=3, OPS=2.
#include "harness.hpp"
#include "post_all.hpp"
#include "test_engine.hpp"

#include <fabrix/cuda/staged.hpp>
#include <fabrix/cuda/staged_open.hpp>

#include FX_INNER_HEADER

#include <cstring>
#include <string>
#include <vector>

namespace {

using fabrix::status;
using fxt::first_mismatch;
using fxt::must;

using static_staged = fabrix::cuda::staged<FX_INNER_PROVIDER, fxt::test_engine>;
constexpr std::size_t chunk = 64 << 10;
const fabrix::memory_location device{fabrix::memory_kind::cuda_device, 0};

template <class P>
fabrix::domain<P> open_staged();
template <>
fabrix::domain<static_staged> open_staged<static_staged>() {
  return must(fabrix::domain<static_staged>::create(fxt::test_options()), "staged domain");
}
template <>
fabrix::domain<fabrix::any_provider> open_staged<fabrix::any_provider>() {
  fabrix::cuda::enable_staged_providers<fxt::test_engine>();
  return must(fabrix::open(std::string(FX_INNER_NAME) + "+staged", fxt::test_options()), "open +staged");
}

template <class P>
fabrix::memory_region<P> reg_device(fxt::rank_env<P>& env, std::vector<std::byte>& buf) {
  return must(env.dom.register_memory(buf.data(), buf.size(), device, fabrix::access::local), "register device memory");
}

// Notification imm == tag from the peer (host memory, zero bytes), and back.
template <class P>
void signal(fxt::rank_env<P>& env, fabrix::memory_region<P>& scratch, const fabrix::remote_buffer& peer,
            std::uint32_t tag) {
  env.complete_ok(env.qps[1 - env.rank].write_with_imm(scratch.slice(0, 0), peer.slice(0, 0), tag, 0x5000 + tag),
                  0x5000 + tag);
}
template <class P>
void await_signal(fxt::rank_env<P>& env, std::uint32_t tag) {
  env.next([tag](const fabrix::completion& c) { return c.op == fabrix::opcode::remote_write_imm && c.imm == tag; });
}

}  // namespace

TEST_CASE_TEMPLATE("staged write, write_with_imm and read move every byte", P, static_staged, fabrix::any_provider) {
  fxt::run_ranks(2, [](int rank, fabrix::bootstrap& boot) {
    fxt::rank_env<P> env(rank, boot, open_staged<P>());
    FX_CHECK(env.dom.caps().gpu == fabrix::gpu_path::staged);
    const std::size_t max = 16 * chunk + 7;
    std::vector<std::byte> target(max + 64), scratch(64), dev(max + 64), dev2(max + 64), host(64);
    auto target_mr = env.reg(target);
    auto scratch_mr = env.reg(scratch);
    auto host_mr = env.reg(host, fabrix::access::local);
    auto dev_mr = reg_device(env, dev);
    auto dev2_mr = reg_device(env, dev2);
    const auto peers = env.share(target_mr);
    const auto peer_scratch = env.share(scratch_mr);
    const int peer = 1 - rank;
    auto& qp = env.qps[peer];
    const std::size_t sizes[] = {1, 100, chunk - 1, chunk, chunk + 1, 3 * chunk, 10 * chunk + 123, max};
    std::uint32_t round = 0;
    for (std::size_t s : sizes) {
      ++round;
      if (rank == 0) {
        // write_with_imm from device memory (up to depth x chunk; a staged
        // write, a flush and an empty host notification above that): the
        // peer checks every byte once notified.
        fxt::fill(dev.data(), s, s);
        if (s <= 3 * chunk) {
          env.complete_ok(qp.write_with_imm(dev_mr.slice(0, s), peers[peer].slice(0, s), round, 1), 1);
        } else {
          FX_CHECK_STATUS(qp.write_with_imm(dev_mr.slice(0, s), peers[peer].slice(0, s), round, 1),
                          status::unsupported);
          const fabrix::operation w[] = {
              fabrix::op::write(dev_mr.slice(0, s), peers[peer].slice(0, s), 1), fabrix::op::flush(6),
              fabrix::op::write_with_imm(scratch_mr.slice(0, 0), peers[peer].slice(0, 0), round, 7)};
          post_all(env, qp, std::span<const fabrix::operation>(w).first(2));
          env.complete_ok(status::ok, 1);
          env.complete_ok(status::ok, 6);
          post_all(env, qp, std::span<const fabrix::operation>(w).last(1));
          env.complete_ok(status::ok, 7);
        }
        await_signal(env, round);  // the peer checked and refilled its buffer
        // read into device memory; the byte after the range stays untouched.
        std::memset(dev2.data(), 0, dev2.size());
        dev2[s] = std::byte{0x5a};
        env.complete_ok(qp.read(dev2_mr.slice(0, s), peers[peer].slice(0, s), 2), 2);
        FX_CHECK(first_mismatch(dev2.data(), s, s + 7) == s);
        FX_CHECK(dev2[s] == std::byte{0x5a});
        // One batch: a staged write at an odd offset, a host write, a flush.
        const std::size_t off = s % 13;
        fxt::fill(dev.data() + off, s, s + 13);
        fxt::fill(host.data(), host.size(), s + 17);
        const fabrix::operation ops[] = {
            fabrix::op::write(dev_mr.slice(off, s), peers[peer].slice(0, s), 3),
            fabrix::op::write(host_mr.slice(0, 64), peers[peer].slice(max, 64), 4),
            fabrix::op::flush(5),
        };
        post_all(env, qp, ops);
        for (std::uint64_t t = 3; t <= 5; ++t) {
          const auto c = env.next_token(t);
          FX_CHECK_STATUS(c.status, status::ok);
          FX_CHECK(c.op == ops[t - 3].code);
          if (t == 3) FX_CHECK(c.bytes == s);
        }
        signal(env, scratch_mr, peer_scratch[peer], 1000 + round);
        await_signal(env, 2000 + round);
      } else {
        const auto n = env.next([round](const fabrix::completion& c) {
          return c.op == fabrix::opcode::remote_write_imm && c.imm == round;
        });
        FX_CHECK(n.bytes == (s <= 3 * chunk ? s : 0));
        FX_CHECK(first_mismatch(target.data(), s, s) == s);
        fxt::fill(target.data(), s, s + 7);
        signal(env, scratch_mr, peer_scratch[peer], round);
        await_signal(env, 1000 + round);
        FX_CHECK(first_mismatch(target.data(), s, s + 13) == s);
        FX_CHECK(first_mismatch(target.data() + max, 64, s + 17) == 64);
        signal(env, scratch_mr, peer_scratch[peer], 2000 + round);
      }
    }
  });
}

TEST_CASE_TEMPLATE("staged send and recv, in order, with truncation", P, static_staged, fabrix::any_provider) {
  fxt::run_ranks(2, [](int rank, fabrix::bootstrap& boot) {
    fxt::rank_env<P> env(rank, boot, open_staged<P>());
    std::vector<std::byte> dev(2 * chunk + 64), host(4096);
    auto dev_mr = reg_device(env, dev);
    auto host_mr = env.reg(host, fabrix::access::local);
    std::vector<std::byte> flag(8);
    auto flag_mr = env.reg(flag);
    const auto peers = env.share(flag_mr);
    auto& qp = env.qps[1 - rank];
    const std::size_t sizes[] = {1, 1000, chunk - 1, chunk};
    if (rank == 0) {
      // Over one chunk: refused at post, nothing sent.
      FX_CHECK_STATUS(qp.send(dev_mr.slice(0, chunk + 1), 99), status::unsupported);
      std::uint64_t token = 10;
      for (std::size_t s : sizes) {
        fxt::fill(dev.data(), s, s + 3);
        env.complete_ok(qp.send(dev_mr.slice(0, s), token), token);
        ++token;
      }
      fxt::fill(host.data(), 2000, 44);
      env.complete_ok(qp.send(host_mr.slice(0, 2000), 20), 20);  // host message between staged ones
      fxt::fill(dev.data(), 2000, 45);
      env.complete_ok(qp.send(dev_mr.slice(0, 2000), 21), 21);  // longer than the peer's buffer
      fxt::fill(dev.data(), 300, 46);
      env.complete_ok(qp.send(dev_mr.slice(0, 300), 22), 22);
      // A staged recv's completion names the queue pair it arrived on (rank
      // 1's, whose peer id is 1: 0 would not tell it from the default).
      FX_CHECK(qp.peer_id() == 1);
      std::memset(dev.data(), 0, 256);
      FX_CHECK_STATUS(qp.recv(dev_mr.slice(0, 256), 23), status::ok);
      const auto r = env.next_token(23);
      FX_CHECK_STATUS(r.status, status::ok);
      FX_CHECK(r.peer == 1);
      FX_CHECK(r.bytes == 100);
      FX_CHECK(first_mismatch(dev.data(), 100, 47) == 100);
      env.next_notify();  // the peer is done
    } else {
      std::uint64_t token = 10;
      for (std::size_t s : sizes) {
        std::memset(dev.data(), 0, dev.size());
        dev[s] = std::byte{0x77};
        env.complete_ok(qp.recv(dev_mr.slice(0, s), token), token);
        FX_CHECK(first_mismatch(dev.data(), s, s + 3) == s);
        FX_CHECK(dev[s] == std::byte{0x77});
        ++token;
      }
      env.complete_ok(qp.recv(host_mr.slice(0, 2000), 20), 20);
      FX_CHECK(first_mismatch(host.data(), 2000, 44) == 2000);
      std::memset(dev.data(), 0, 1001);
      FX_CHECK_STATUS(qp.recv(dev_mr.slice(0, 1000), 21), status::ok);
      const auto t = env.next_token(21);
      FX_CHECK_STATUS(t.status, status::truncated);
      FX_CHECK(t.op == fabrix::opcode::recv);
      FX_CHECK(t.bytes == 1000);  // the buffer's length: it holds the message's first 1000 bytes
      FX_CHECK(first_mismatch(dev.data(), 1000, 45) == 1000);
      FX_CHECK(dev[1000] == std::byte{0});
      std::memset(dev.data(), 0, 400);
      env.complete_ok(qp.recv(dev_mr.slice(0, 400), 22), 22);
      FX_CHECK(first_mismatch(dev.data(), 300, 46) == 300);
      fxt::fill(dev.data(), 100, 47);
      env.complete_ok(qp.send(dev_mr.slice(0, 100), 23), 23);
    }
    if (rank == 1) signal(env, flag_mr, peers[0], 7);  // done: rank 0 may go
  });
}

TEST_CASE_TEMPLATE("staged back-pressure, engine errors, atomics and refusals", P, static_staged,
                   fabrix::any_provider) {
  fxt::run_ranks(2, [](int rank, fabrix::bootstrap& boot) {
    fxt::rank_env<P> env(rank, boot, open_staged<P>());
    const std::size_t n = 5 * chunk + 11;
    std::vector<std::byte> target(4 * n), scratch(64), dev(4 * n), dev2(n);
    auto target_mr = env.reg(target);
    auto scratch_mr = env.reg(scratch);
    auto dev_mr = reg_device(env, dev);
    auto dev2_mr = reg_device(env, dev2);
    const auto peers = env.share(target_mr);
    const auto peer_scratch = env.share(scratch_mr);
    const int peer = 1 - rank;
    auto& qp = env.qps[peer];
    if (rank == 1) {
      await_signal(env, 9);  // serve rank 0's one-sided traffic until it is done
      return;
    }
    // Refusals: remote rights on staged device memory; device memory in a gather list.
    for (fabrix::access a : {fabrix::access::remote_read, fabrix::access::remote_write, fabrix::access::all_remote}) {
      auto r = env.dom.register_memory(dev.data(), dev.size(), device, a);
      FX_CHECK(!r);
      FX_CHECK_STATUS(r.error().code, status::unsupported);
      FX_CHECK(r.error().message.find("remote rights") != std::string::npos);
    }
    const fabrix::local_slice gather[] = {dev_mr.slice(0, 8), scratch_mr.slice(0, 8)};
    FX_CHECK_STATUS(qp.write(gather, peers[peer].slice(0, 16), 1), status::unsupported);
    FX_CHECK(env.dom.describe().find("staged") != std::string::npos);

    // Back-pressure: two lanes (FABRIX_STAGING_OPS=2); the third staged op waits.
    for (std::size_t i = 0; i < 4; ++i) fxt::fill(dev.data() + i * n, n, 100 + i);
    FX_CHECK_STATUS(qp.write(dev_mr.slice(0, n), peers[peer].slice(0, n), 10), status::ok);
    FX_CHECK_STATUS(qp.write(dev_mr.slice(n, n), peers[peer].slice(n, n), 11), status::ok);
    FX_CHECK_STATUS(qp.write(dev_mr.slice(2 * n, n), peers[peer].slice(2 * n, n), 12), status::again);
    FX_CHECK_STATUS(qp.flush(13), status::again);  // staged writes before it are still running
    env.complete_ok(status::ok, 10);
    env.complete_ok(status::ok, 11);
    const fabrix::operation batch[] = {
        fabrix::op::write(dev_mr.slice(2 * n, n), peers[peer].slice(2 * n, n), 12),
        fabrix::op::write(dev_mr.slice(3 * n, n), peers[peer].slice(3 * n, n), 13),
        fabrix::op::write(dev_mr.slice(0, n), peers[peer].slice(0, n), 14),
    };
    const auto r = qp.post(batch);
    FX_CHECK_STATUS(r.status, status::again);
    FX_CHECK(r.posted == 2);
    env.complete_ok(status::ok, 12);
    env.complete_ok(status::ok, 13);
    const fabrix::operation flush[] = {fabrix::op::flush(15)};
    post_all(env, qp, flush);
    env.complete_ok(status::ok, 15);
    for (std::size_t i = 0; i < 4; ++i) {
      std::memset(dev2.data(), 0, n);
      env.complete_ok(qp.read(dev2_mr.slice(0, n), peers[peer].slice(i * n, n), 20 + i), 20 + i);
      FX_CHECK(first_mismatch(dev2.data(), n, 100 + i) == n);
    }

    // An engine error fails that operation only.
    fxt::test_engine::poison_begin = dev.data() + 2 * chunk + 5;
    fxt::test_engine::poison_end = dev.data() + 2 * chunk + 9;
    fxt::fill(dev.data() + n, n, 200);
    FX_CHECK_STATUS(qp.write(dev_mr.slice(0, n), peers[peer].slice(0, n), 30), status::ok);
    FX_CHECK_STATUS(qp.write(dev_mr.slice(n, n), peers[peer].slice(n, n), 31), status::ok);
    const auto bad = env.next_token(30);
    FX_CHECK_STATUS(bad.status, status::provider_error);
    FX_CHECK(bad.op == fabrix::opcode::write);
    env.complete_ok(status::ok, 31);
    FX_CHECK_STATUS(qp.read(dev_mr.slice(chunk, 2 * chunk), peers[peer].slice(0, 2 * chunk), 32), status::ok);
    FX_CHECK_STATUS(env.next_token(32).status, status::provider_error);
    fxt::test_engine::poison_begin = fxt::test_engine::poison_end = nullptr;
    const fabrix::operation flush2[] = {fabrix::op::flush(33)};
    post_all(env, qp, flush2);
    env.complete_ok(status::ok, 33);
    std::memset(dev2.data(), 0, n);
    env.complete_ok(qp.read(dev2_mr.slice(0, n), peers[peer].slice(n, n), 34), 34);
    FX_CHECK(first_mismatch(dev2.data(), n, 200) == n);

    // Atomics with their result in device memory.
    if (env.dom.caps().atomics) {
      std::memset(dev.data(), 0, 8);  // the peer's counter starts at zero
      env.complete_ok(qp.write(dev_mr.slice(0, 8), peers[peer].slice(0, 8), 40), 40);
      const fabrix::operation f[] = {fabrix::op::flush(41)};
      post_all(env, qp, f);
      env.complete_ok(status::ok, 41);
      for (std::uint64_t i = 0; i < 3; ++i) {
        std::memset(dev2.data(), 0xff, 16);
        env.complete_ok(qp.fetch_add(dev2_mr.slice(0, 8), peers[peer].slice(0, 8), 5, 42 + i), 42 + i);
        std::uint64_t old = 0;
        std::memcpy(&old, dev2.data(), 8);
        FX_CHECK(old == 5 * i);
        FX_CHECK(dev2[8] == std::byte{0xff});
      }
      env.complete_ok(qp.compare_swap(dev2_mr.slice(0, 8), peers[peer].slice(0, 8), 15, 99, 50), 50);
      std::uint64_t old = 0;
      std::memcpy(&old, dev2.data(), 8);
      FX_CHECK(old == 15);
    }
    signal(env, scratch_mr, peer_scratch[peer], 9);
  });
}

TEST_CASE("staged domain: static caps and name") {
  static_assert(static_staged::caps.gpu == fabrix::gpu_path::staged);
  static_assert(fabrix::provider<static_staged>);
  CHECK(static_staged::name == std::string(FX_INNER_NAME) + "+staged");
}
