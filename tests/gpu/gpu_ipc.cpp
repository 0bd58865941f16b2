// cuda_ipc between real processes on one node (ranks forked by the
// conformance harness), every byte checked on the host. Needs a GPU; with
// two or more GPUs the ranks use different devices (peer copies).
#include "../conformance/harness.hpp"

#include <fabrix/cuda_ipc.hpp>

#include <cuda_runtime_api.h>

#include <cstring>
#include <optional>
#include <set>
#include <thread>

using acc = fabrix::access;
using fabrix::completion;
using fabrix::opcode;
using fabrix::status;
using fabrix::cuda::allocation;
using fabrix::cuda::device_buffer;
using P = fabrix::cuda_ipc::provider;
using env_t = fxt::rank_env<P>;

namespace {

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Rank r uses device r % count: peer copies when there are several GPUs.
fabrix::domain<P> open_domain(int rank) {
  fabrix::domain_options o;
  o.device = std::to_string(rank % std::max(1, device_count()));
  return fxt::must(fabrix::cuda_ipc::domain::create(o), "cuda_ipc domain");
}

template <class Body>
void ranks(int n, Body body) {
  fxt::run_ranks(n, [&](int rank, fabrix::bootstrap& boot) {
    env_t env(rank, boot, open_domain(rank));
    body(env);
  });
}

// Device memory and its registration (the region goes first).
struct gpu_region {
  device_buffer buf;
  fabrix::memory_region<P> mr;
};
gpu_region gpu_reg(env_t& env, std::size_t size, allocation kind, acc rights = acc::all_remote) {
  auto buf =
      fxt::must(device_buffer::create(size, fabrix::detail::provider_impl(env.dom).device(), kind), "device_buffer");
  FX_CHECK(buf.fill(0) == status::ok);
  auto mr = fxt::must(env.dom.register_memory(buf.data(), size, buf.location(), rights), "register device memory");
  return {std::move(buf), std::move(mr)};
}

std::vector<std::byte> to_host(const device_buffer& b, std::size_t off, std::size_t n) {
  std::vector<std::byte> h(n);
  FX_CHECK(b.copy_to_host(off, h) == status::ok);
  return h;
}
void fill_device(device_buffer& b, std::size_t off, std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> h(n);
  fxt::fill(h.data(), n, seed);
  FX_CHECK(b.copy_from_host(off, h) == status::ok);
}

bool is_notify(const completion& c, std::uint32_t imm) { return c.op == opcode::remote_write_imm && c.imm == imm; }

}  // namespace

TEST_CASE("gpu: write then read back between processes, 1 B to 64 MiB, cudaMalloc and cuMemCreate memory") {
  ranks(2, [](env_t& env) {
    for (allocation kind : {allocation::legacy, allocation::vmm}) {
      const std::size_t sizes[] = {1, 7, 64, 4095, 4097, 65537, 1 << 20, (4 << 20) + 3, 64 << 20};
      const std::size_t cap = (64 << 20) + 64;
      auto target = gpu_reg(env, cap, kind);
      auto src = gpu_reg(env, cap, kind, acc::local);
      auto back = gpu_reg(env, cap, kind, acc::local);
      auto peers = env.share(target.mr);
      const std::uint32_t base = kind == allocation::legacy ? 0 : 100;
      for (std::uint32_t i = 0; i < std::size(sizes); ++i) {
        const std::size_t size = sizes[i], loff = i % 7 + 1, roff = (i * 3) % 13 + 1;
        const std::uint32_t tag = base + i;
        if (env.rank == 0) {
          fill_device(src.buf, loff, size, tag);
          env.complete_ok(env.qps[1].write(src.mr.slice(loff, size), peers[1].slice(roff, size), tag), tag);
          env.complete_ok(env.qps[1].flush(4000 + tag), 4000 + tag);
          FX_CHECK(back.buf.fill(0) == status::ok);
          env.complete_ok(env.qps[1].read(back.mr.slice(loff + 1, size), peers[1].slice(roff, size), 2000 + tag),
                          2000 + tag);
          const auto got = to_host(back.buf, loff, size + 2);
          FX_CHECK(got[0] == std::byte{0});
          FX_CHECK(fxt::first_mismatch(got.data() + 1, size, tag) == size);
          FX_CHECK(got[size + 1] == std::byte{0});
          env.complete_ok(env.qps[1].write_with_imm(src.mr.slice(0, 0), peers[1].slice(0, 0), tag, 1000 + tag),
                          1000 + tag);
          env.next([&](const completion& c) { return is_notify(c, tag); });
        } else {
          env.next([&](const completion& c) { return is_notify(c, tag); });
          const auto got = to_host(target.buf, roff - 1, size + 2);
          FX_CHECK(got[0] == std::byte{0});
          FX_CHECK(fxt::first_mismatch(got.data() + 1, size, tag) == size);
          FX_CHECK(got[size + 1] == std::byte{0});
          FX_CHECK(target.buf.fill(0) == status::ok);
          env.complete_ok(env.qps[0].write_with_imm(src.mr.slice(0, 0), peers[0].slice(0, 0), tag, 3000 + tag),
                          3000 + tag);
        }
      }
    }
  });
}

// cuda_ipc enqueues copies through the driver (cuMemcpyAsync), which needs
// a current context; a thread that never called CUDA has none until the
// runtime makes one. Its posts must still move the bytes.
TEST_CASE("gpu: writes and reads posted from a thread that never called CUDA") {
  ranks(2, [](env_t& env) {
    const std::size_t size = (1 << 20) + 5;
    auto target = gpu_reg(env, size, allocation::legacy);
    auto src = gpu_reg(env, size, allocation::legacy, acc::local);
    auto back = gpu_reg(env, size, allocation::legacy, acc::local);
    auto peers = env.share(target.mr);
    if (env.rank == 0) {
      fill_device(src.buf, 0, size, 77);
      std::thread fresh([&] {
        env.complete_ok(env.qps[1].write(src.mr.slice(0, size), peers[1].slice(0, size), 1), 1);
        env.complete_ok(env.qps[1].read(back.mr.slice(0, size), peers[1].slice(0, size), 2), 2);
      });
      fresh.join();
      const auto got = to_host(back.buf, 0, size);
      FX_CHECK(fxt::first_mismatch(got.data(), size, 77) == size);
    }
    FX_CHECK(env.boot.barrier().has_value());  // the target outlives the copies
  });
}

TEST_CASE("gpu: write_with_imm's notification never arrives before its data; scatter-gather from host and device") {
  ranks(2, [](env_t& env) {
    constexpr std::uint32_t rounds = 32;
    constexpr std::size_t chunk = 1 << 20;
    // Round r: a scatter-gather write into block 2r, a write_with_imm into block 2r+1.
    auto target = gpu_reg(env, 2 * chunk * rounds, allocation::legacy);
    auto src = gpu_reg(env, 2 * chunk, allocation::legacy, acc::local);
    std::vector<std::byte> host(chunk / 2);
    auto hmr = fxt::must(env.dom.register_memory(host, acc::local), "register host memory");
    auto peers = env.share(target.mr);
    if (env.rank == 0) {
      for (std::uint32_t r = 0; r < rounds; ++r) {
        // Half from device memory, half from pinned host memory, in one op.
        std::vector<std::byte> expect(chunk);
        fxt::fill(expect.data(), chunk, r);
        FX_CHECK(src.buf.copy_from_host(0, std::span<const std::byte>(expect.data(), chunk / 2)) == status::ok);
        std::memcpy(host.data(), expect.data() + chunk / 2, chunk / 2);
        fill_device(src.buf, chunk, chunk, 1000 + r);
        const fabrix::local_slice parts[] = {src.mr.slice(0, chunk / 2), hmr.slice(0, chunk / 2)};
        FX_CHECK_STATUS(env.qps[1].post(fabrix::op::write(parts, peers[1].slice(2 * r * chunk, chunk), r)), status::ok);
        env.complete_ok(env.qps[1].write_with_imm(src.mr.slice(chunk, chunk),
                                                  peers[1].slice((2 * r + 1) * chunk, chunk), r, 100 + r),
                        100 + r);
        FX_CHECK(env.next_token(r).status == status::ok);
      }
    } else {
      for (std::uint32_t r = 0; r < rounds; ++r) {
        const completion n = env.next([&](const completion& c) { return is_notify(c, r); });
        FX_CHECK(n.bytes == chunk);
        const auto data = to_host(target.buf, (2 * r + 1) * chunk, chunk);  // the notified write itself
        FX_CHECK(fxt::first_mismatch(data.data(), chunk, 1000 + r) == chunk);
        const auto sg = to_host(target.buf, 2 * r * chunk, chunk);  // posted before it on the same queue pair
        FX_CHECK(fxt::first_mismatch(sg.data(), chunk, r) == chunk);
      }
    }
    auto sync_mr = gpu_reg(env, 64, allocation::legacy);
    env.sync(sync_mr.mr, env.share(sync_mr.mr), 7);
  });
}

TEST_CASE("gpu: fetch_add and compare_swap under contention from 4 ranks") {
  ranks(4, [](env_t& env) {
    constexpr std::uint64_t per_rank = 200;
    auto counter = gpu_reg(env, 64, allocation::legacy);
    auto result = gpu_reg(env, 64, allocation::legacy, acc::local);
    std::vector<std::byte> host_result(8);
    auto hres = fxt::must(env.dom.register_memory(host_result, acc::local), "register host result");
    auto peers = env.share(counter.mr);
    std::vector<std::uint64_t> seen;
    for (std::uint64_t i = 0; i < per_rank; ++i) {
      // Alternate device and host result slices.
      const bool host = i % 2;
      env.complete_ok(env.qps[0].fetch_add(host ? hres.slice(0, 8) : result.mr.slice(8, 8), peers[0].slice(8, 8), 1, i),
                      i);
      std::uint64_t old = 0;
      if (host)
        std::memcpy(&old, host_result.data(), 8);
      else
        FX_CHECK(result.buf.copy_to_host(8, std::span<std::byte>(reinterpret_cast<std::byte*>(&old), 8)) == status::ok);
      seen.push_back(old);
    }
    std::set<std::uint64_t> unique(seen.begin(), seen.end());
    FX_CHECK(unique.size() == per_rank);  // every fetch saw a different old value
    FX_CHECK(*unique.rbegin() < per_rank * 4);
    // compare_swap: exactly one rank wins the swap from 0 to its rank + 1 on word 16.
    env.complete_ok(env.qps[0].compare_swap(hres.slice(0, 8), peers[0].slice(16, 8), 0, env.rank + 1, 9000), 9000);
    std::uint64_t old = 0;
    std::memcpy(&old, host_result.data(), 8);
    std::vector<std::byte> winner(8);
    std::memcpy(winner.data(), &old, 8);
    auto all = fxt::must(env.boot.allgather(winner), "allgather");
    int zeros = 0;
    std::uint64_t final_value = 0;
    for (auto& w : all) {
      std::uint64_t v = 0;
      std::memcpy(&v, w.data(), 8);
      zeros += v == 0;
      if (v != 0) final_value = v;
    }
    FX_CHECK(zeros == 1);
    FX_CHECK(final_value >= 1 && final_value <= 4);
    FX_CHECK(env.boot.barrier().has_value());
    if (env.rank == 0) {
      std::uint64_t total = 0;
      FX_CHECK(counter.buf.copy_to_host(8, std::span<std::byte>(reinterpret_cast<std::byte*>(&total), 8)) ==
               status::ok);
      FX_CHECK(total == per_rank * 4);
    }
    FX_CHECK(env.boot.barrier().has_value());
  });
}

TEST_CASE("gpu: send and recv in order, from host and device memory, truncation reported") {
  ranks(2, [](env_t& env) {
    auto dev = gpu_reg(env, 4096, allocation::legacy, acc::local);
    std::vector<std::byte> host(4096);
    auto hmr = fxt::must(env.dom.register_memory(host, acc::local), "register host");
    if (env.rank == 0) {
      for (std::uint32_t i = 0; i < 20; ++i) {
        const std::size_t n = 100 + i;
        if (i % 2) {
          fill_device(dev.buf, 0, n, i);
          env.complete_ok(env.qps[1].send(dev.mr.slice(0, n), i), i);
        } else {
          fxt::fill(host.data(), n, i);
          env.complete_ok(env.qps[1].send(hmr.slice(0, n), i), i);
        }
      }
      fxt::fill(host.data(), 4000, 99);
      env.complete_ok(env.qps[1].send(hmr.slice(0, 4000), 99), 99);
    } else {
      for (std::uint32_t i = 0; i < 20; ++i) {
        const std::size_t n = 100 + i;
        if (i % 2) {
          FX_CHECK_STATUS(env.qps[0].recv(hmr.slice(0, 4096), 500 + i), status::ok);
          const completion c = env.next_token(500 + i);
          FX_CHECK(c.status == status::ok);
          FX_CHECK(c.bytes == n);
          FX_CHECK(fxt::first_mismatch(host.data(), n, i) == n);
        } else {
          FX_CHECK_STATUS(env.qps[0].recv(dev.mr.slice(0, 4096), 500 + i), status::ok);
          const completion c = env.next_token(500 + i);
          FX_CHECK(c.status == status::ok);
          FX_CHECK(c.bytes == n);
          const auto got = to_host(dev.buf, 0, n);
          FX_CHECK(fxt::first_mismatch(got.data(), n, i) == n);
        }
      }
      FX_CHECK_STATUS(env.qps[0].recv(hmr.slice(0, 1000), 600), status::ok);
      const completion c = env.next_token(600);
      FX_CHECK(c.status == status::truncated);
      FX_CHECK(c.bytes == 1000);
      FX_CHECK(fxt::first_mismatch(host.data(), 1000, 99) == 1000);
    }
  });
}

TEST_CASE("gpu: a freed and reallocated target is not written through a stale mapping") {
  ranks(2, [](env_t& env) {
    auto src = gpu_reg(env, 1 << 20, allocation::legacy, acc::local);
    auto scratch = gpu_reg(env, 64, allocation::legacy);
    auto sync_peers = env.share(scratch.mr);
    for (std::uint32_t round = 0; round < 4; ++round) {
      const allocation kind = round % 2 ? allocation::vmm : allocation::legacy;
      std::optional<device_buffer> buf;
      buf.emplace(fxt::must(device_buffer::create(1 << 20, fabrix::detail::provider_impl(env.dom).device(), kind),
                            "device_buffer"));
      FX_CHECK(buf->fill(0) == status::ok);
      std::optional<fabrix::memory_region<P>> mr;
      mr.emplace(
          fxt::must(env.dom.register_memory(buf->data(), buf->size(), buf->location(), acc::all_remote), "register"));
      auto peers = env.share(*mr);
      if (env.rank == 0) {
        fill_device(src.buf, 0, 1 << 20, 50 + round);
        env.complete_ok(env.qps[1].write(src.mr.slice(0, 1 << 20), peers[1].slice(0, 1 << 20), round), round);
        env.complete_ok(env.qps[1].write_with_imm(src.mr.slice(0, 0), peers[1].slice(0, 0), 70 + round, 80 + round),
                        80 + round);
      } else {
        env.next([&](const completion& c) { return is_notify(c, 70 + round); });
        const auto got = to_host(*buf, 0, 1 << 20);
        FX_CHECK(fxt::first_mismatch(got.data(), 1 << 20, 50 + round) == (1 << 20));
      }
      env.sync(scratch.mr, sync_peers, 200 + round);
      // Deregister (peers are told and close their mapping while they poll in
      // the sync), then free: the next round likely gets the same address.
      mr.reset();
      env.sync(scratch.mr, sync_peers, 300 + round);
      buf.reset();
    }
    // Rank 0 holds no mapping of a freed allocation: only rank 1's scratch.
    if (env.rank == 0) FX_CHECK(fabrix::detail::provider_impl(env.dom).mapped_allocations() == 1);
  });
}

TEST_CASE("gpu: bad input is refused with the right status") {
  ranks(2, [](env_t& env) {
    auto rw = gpu_reg(env, 4096, allocation::legacy);
    auto ro = gpu_reg(env, 4096, allocation::legacy, acc::remote_read);
    auto src = gpu_reg(env, 4096, allocation::legacy, acc::local);
    auto peers_rw = env.share(rw.mr);
    auto peers_ro = env.share(ro.mr);
    // Host memory cannot be shared; device memory cannot pass for host memory and vice versa.
    std::vector<std::byte> host(4096);
    FX_CHECK_STATUS(env.dom.register_memory(host, acc::remote_write).code(), status::unsupported);
    FX_CHECK_STATUS(
        env.dom.register_memory(host.data(), host.size(), {fabrix::memory_kind::cuda_device, 0}, acc::local).code(),
        status::invalid_argument);
    // The provider says what the memory is before the core's mapping check
    // (which would see an address mapped without access: "not readable").
    auto as_host = env.dom.register_memory(rw.buf.data(), 4096, {}, acc::local);
    FX_CHECK_STATUS(as_host.code(), status::invalid_argument);
    if (!as_host) FX_CHECK(as_host.error().message.find("CUDA device memory") != std::string::npos);
    FX_CHECK_STATUS(env.dom.register_memory(rw.buf.data(), 64 << 20, rw.buf.location(), acc::local).code(),
                    status::out_of_range);
    if (env.rank == 0) {
      FX_CHECK_STATUS(env.qps[1].write(src.mr.slice(0, 100), peers_rw[1].slice(4000, 100), 1), status::out_of_range);
      FX_CHECK_STATUS(env.qps[1].write(src.mr.slice(0, 100), peers_ro[1].slice(0, 100), 2), status::access_denied);
      fabrix::remote_buffer forged = peers_rw[1];
      forged.key[40] ^= std::byte{1};  // a handle byte
      FX_CHECK_STATUS(env.qps[1].write(src.mr.slice(0, 8), forged.slice(0, 8), 3), status::invalid_argument);
      forged = peers_rw[1];
      forged.length = 1 << 30;  // a longer region than was registered
      FX_CHECK_STATUS(env.qps[1].write(src.mr.slice(0, 8), forged.slice(0, 8), 4), status::invalid_argument);
      // Rank 1's region sent to rank 0's own endpoint to itself: not that peer's.
      FX_CHECK_STATUS(env.qps[0].write(src.mr.slice(0, 8), peers_rw[1].slice(0, 8), 5), status::invalid_argument);
      // The good one still works.
      env.complete_ok(env.qps[1].write(src.mr.slice(0, 8), peers_rw[1].slice(0, 8), 6), 6);
    }
    env.sync(rw.mr, peers_rw, 1);
  });
}

TEST_CASE("gpu: a peer on another node is refused at connect") {
  fxt::run_ranks(1, [](int rank, fabrix::bootstrap&) {
    auto dom = open_domain(rank);
    auto blob = fxt::must(dom.address(), "address");
    blob[4 + 2 + 8] ^= std::byte{1};  // the node id (after magic, version, nonce)
    auto qp = dom.connect(blob);
    FX_CHECK(!qp.has_value());
    FX_CHECK(qp.code() == status::peer_unreachable);
    FX_CHECK(qp.error().message.find("another node") != std::string::npos);
  });
}

TEST_CASE("gpu: wait() sleeps until a notification or the timeout") {
  ranks(2, [](env_t& env) {
    auto target = gpu_reg(env, 4096, allocation::legacy);
    auto peers = env.share(target.mr);
    if (env.rank == 1) {
      const auto t0 = std::chrono::steady_clock::now();
      FX_CHECK(env.dom.wait(std::chrono::milliseconds(100)) == status::timed_out);
      FX_CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(95));
      FX_CHECK(env.boot.barrier().has_value());  // now rank 0 sends
      const auto t1 = std::chrono::steady_clock::now();
      FX_CHECK(env.dom.wait(std::chrono::seconds(20)) == status::ok);
      FX_CHECK(std::chrono::steady_clock::now() - t1 < std::chrono::seconds(10));
      env.next([](const completion& c) { return is_notify(c, 5); });
    } else {
      FX_CHECK(env.boot.barrier().has_value());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      env.complete_ok(env.qps[1].write_with_imm(target.mr.slice(0, 8), peers[1].slice(0, 8), 5, 1), 1);
    }
  });
}

TEST_CASE("gpu: any_provider opened by name moves the same bytes") {
  fxt::run_ranks(2, [](int rank, fabrix::bootstrap& boot) {
    fabrix::domain_options o;
    o.provider = "cuda_ipc";
    fxt::rank_env<fabrix::any_provider> env(rank, boot, fxt::must(fabrix::open("cuda_ipc", o), "open(cuda_ipc)"));
    FX_CHECK(env.dom.provider() == fabrix::provider_id::cuda_ipc);
    FX_CHECK(env.dom.caps().gpu == fabrix::gpu_path::direct);
    auto buf = fxt::must(device_buffer::create(1 << 16), "device_buffer");
    FX_CHECK(buf.fill(0) == status::ok);
    auto mr = fxt::must(env.dom.register_memory(buf.data(), buf.size(), buf.location(), acc::all_remote), "register");
    auto peers = env.share(mr);
    if (rank == 0) {
      fill_device(buf, 0, 1 << 16, 11);
      env.complete_ok(env.qps[1].write_with_imm(mr.slice(0, 1 << 16), peers[1].slice(0, 1 << 16), 11, 1), 1);
      env.next([](const completion& c) { return is_notify(c, 12); });
    } else {
      env.next([](const completion& c) { return is_notify(c, 11); });
      const auto got = to_host(buf, 0, 1 << 16);
      FX_CHECK(fxt::first_mismatch(got.data(), 1 << 16, 11) == (1 << 16));
      env.complete_ok(env.qps[0].write_with_imm(mr.slice(0, 0), peers[0].slice(0, 0), 12, 2), 2);
    }
  });
}

TEST_CASE("gpu: a peer that exits fails the endpoint with peer_unreachable") {
  ranks(2, [](env_t& env) {
    std::vector<std::byte> host(64);
    auto hmr = fxt::must(env.dom.register_memory(host, acc::local), "register host");
    if (env.rank == 1) {
      FX_CHECK_STATUS(env.qps[0].recv(hmr.slice(0, 64), 1), status::ok);
      env.next_token(1);  // rank 0 is ready: leave without tearing anything down
      std::_Exit(0);
    }
    env.complete_ok(env.qps[1].send(hmr.slice(0, 8), 1), 1);
    FX_CHECK_STATUS(env.qps[1].recv(hmr.slice(0, 64), 2), status::ok);  // never answered
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    bool recv_failed = false, post_refused = false;
    while (!(recv_failed && post_refused) && std::chrono::steady_clock::now() < deadline) {
      completion c[8];
      for (std::size_t i = 0, n = env.dom.poll(c); i < n; ++i)
        if (c[i].token == 2) recv_failed = c[i].status == status::peer_unreachable;
      if (recv_failed) post_refused = env.qps[1].send(hmr.slice(0, 8), 3) == status::peer_unreachable;
    }
    FX_CHECK(recv_failed);
    FX_CHECK(post_refused);
  });
}
