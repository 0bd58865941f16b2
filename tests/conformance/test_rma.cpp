// write / read / write_with_imm / flush between two real processes, every
// byte checked.
#include "providers.hpp"

#include <cstdlib>
#include <cstring>
#include <span>

using fabrix::access;
using fabrix::completion;
using fabrix::opcode;
using fabrix::status;

namespace {

constexpr std::uint32_t done_imm = 0xd0e0u;

bool is_notify(const completion& c, std::uint32_t imm) { return c.op == opcode::remote_write_imm && c.imm == imm; }

// How many of `sizes` (ascending) to run: all, or those up to
// FABRIX_TEST_MAX_TRANSFER bytes (at least one). The TSan run sets it: there
// the case looks for races, which a 4 MiB transfer meets as well as a 64 MiB
// one, and under TSan UCX 1.13's tcp transport drops the connection in the
// middle of a 64 MiB read (UCS_ERR_ENDPOINT_TIMEOUT from a closed socket,
// 3 runs of 3 with three instances at once; never without TSan, 6 of 6 with
// six instances and four busy loops).
std::size_t transfer_sizes_up_to(std::span<const std::size_t> sizes) {
  const char* cap = std::getenv("FABRIX_TEST_MAX_TRANSFER");
  if (cap == nullptr || *cap == '\0') return sizes.size();
  const std::size_t limit = std::strtoull(cap, nullptr, 10);
  std::size_t n = 1;
  while (n < sizes.size() && sizes[n] <= limit) ++n;
  return n;
}

}  // namespace

TEST_CASE_TEMPLATE("conformance: write then read back, 1 B to 64 MiB, unaligned offsets", P, FX_PROVIDERS) {
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    const std::size_t all_sizes[] = {
        1, 2, 3, 7, 8, 9, 63, 64, 65, 1000, 4095, 4096, 4097, 65535, 65536, 65537, 1 << 20, (4 << 20) + 3, 64 << 20};
    const std::span<const std::size_t> sizes(all_sizes, transfer_sizes_up_to(all_sizes));
    const std::size_t largest = sizes.back() + 64;
    std::vector<std::byte> target(largest), src(largest), back(largest);
    auto mt = env.reg(target);
    auto ms = env.reg(src, access::local);
    auto mb = env.reg(back, access::local);
    auto peers = env.share(mt);

    for (std::uint32_t i = 0; i < std::size(sizes); ++i) {
      const std::size_t size = sizes[i], loff = i % 7 + 1, roff = (i * 3) % 13 + 1;
      if (env.rank == 0) {
        fxt::fill(src.data() + loff, size, i);
        env.complete_ok(env.qps[1].write(ms.slice(loff, size), peers[1].slice(roff, size), i), i);
        // A write's completion frees its source; flush makes it visible remotely.
        env.complete_ok(env.qps[1].flush(4000 + i), 4000 + i);
        std::memset(back.data(), 0, size + 16);
        env.complete_ok(env.qps[1].read(mb.slice(loff + 1, size), peers[1].slice(roff, size), 2000 + i), 2000 + i);
        FX_CHECK(fxt::first_mismatch(back.data() + loff + 1, size, i) == size);
        FX_CHECK(back[loff] == std::byte{0});
        FX_CHECK(back[loff + 1 + size] == std::byte{0});
        env.complete_ok(env.qps[1].write_with_imm(ms.slice(0, 0), peers[1].slice(0, 0), i, 1000 + i), 1000 + i);
        env.next([&](const completion& c) { return is_notify(c, i); });  // target has checked
      } else {
        const completion n = env.next([&](const completion& c) { return is_notify(c, i); });
        FX_CHECK(n.bytes == 0);
        FX_CHECK(fxt::first_mismatch(target.data() + roff, size, i) == size);
        FX_CHECK(target[roff - 1] == std::byte{0});     // nothing written before the range
        FX_CHECK(target[roff + size] == std::byte{0});  // nor after it
        std::memset(target.data() + roff, 0, size);     // clean for the next size
        env.complete_ok(env.qps[0].write_with_imm(ms.slice(0, 0), peers[0].slice(0, 0), i, 3000 + i), 3000 + i);
      }
    }
    if (env.rank == 0) {
      env.complete_ok(env.qps[1].write_with_imm(ms.slice(0, 0), peers[1].slice(0, 0), done_imm, 9), 9);
    } else {
      env.next([](const completion& c) { return is_notify(c, done_imm); });
    }
  });
}

TEST_CASE_TEMPLATE("conformance: scatter-gather write and read", P, FX_PROVIDERS) {
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    std::vector<std::byte> target(1 << 16), a(5000), b(3), c(70000);
    auto mt = env.reg(target);
    auto ma = env.reg(a, access::local);
    auto mb = env.reg(b, access::local);
    auto mc = env.reg(c, access::local);
    auto peers = env.share(mt);
    // Gather 1000 + 3 + 20000 bytes from three regions into one remote range.
    const std::size_t total = 1000 + 3 + 20000, roff = 17;
    std::vector<std::byte> expected(total);
    fxt::fill(expected.data(), total, 77);
    if (env.rank == 0) {
      std::memcpy(a.data() + 5, expected.data(), 1000);
      std::memcpy(b.data(), expected.data() + 1000, 3);
      std::memcpy(c.data() + 333, expected.data() + 1003, 20000);
      const fabrix::local_slice parts[] = {ma.slice(5, 1000), mb.slice(0, 3), mc.slice(333, 20000)};
      env.complete_ok(env.qps[1].write(parts, peers[1].slice(roff, total), 1), 1);
      env.complete_ok(env.qps[1].write_with_imm(ma.slice(0, 0), peers[1].slice(0, 0), 1, 2), 2);
      env.next([](const completion& x) { return is_notify(x, 1); });
      // Scatter the same remote range back into three other places.
      std::memset(a.data(), 0, a.size());
      std::memset(c.data(), 0, c.size());
      const fabrix::local_slice back[] = {mc.slice(1, 20000), ma.slice(4000, 3), ma.slice(0, 1000)};
      env.complete_ok(env.qps[1].read(back, peers[1].slice(roff, total), 3), 3);
      FX_CHECK(std::memcmp(c.data() + 1, expected.data(), 20000) == 0);
      FX_CHECK(std::memcmp(a.data() + 4000, expected.data() + 20000, 3) == 0);
      FX_CHECK(std::memcmp(a.data(), expected.data() + 20003, 1000) == 0);
      env.complete_ok(env.qps[1].write_with_imm(ma.slice(0, 0), peers[1].slice(0, 0), done_imm, 4), 4);
    } else {
      env.next([](const completion& x) { return is_notify(x, 1); });
      FX_CHECK(std::memcmp(target.data() + roff, expected.data(), total) == 0);
      FX_CHECK(target[roff - 1] == std::byte{0});
      FX_CHECK(target[roff + total] == std::byte{0});
      env.complete_ok(env.qps[0].write_with_imm(ma.slice(0, 0), peers[0].slice(0, 0), 1, 5), 5);
      env.next([](const completion& x) { return is_notify(x, done_imm); });
    }
  });
}

TEST_CASE_TEMPLATE("conformance: a batch of 1000 writes posted in one call", P, FX_PROVIDERS) {
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    constexpr std::size_t n = 1000, each = 64;
    std::vector<std::byte> target(n * each), src(n * each);
    auto mt = env.reg(target);
    auto ms = env.reg(src, access::local);
    auto peers = env.share(mt);
    if (env.rank == 0) {
      fxt::fill(src.data(), src.size(), 5);
      std::vector<fabrix::operation> ops;
      for (std::size_t i = 0; i < n; ++i)
        ops.push_back(fabrix::op::write(ms.slice(i * each, each), peers[1].slice((n - 1 - i) * each, each), i));
      std::vector<int> seen(n, 0);
      std::size_t next = 0, done = 0;
      completion buf[64];
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (done < n) {
        FX_CHECK(std::chrono::steady_clock::now() < deadline);
        if (next < n) {
          const auto r = env.qps[1].post(std::span<const fabrix::operation>(ops).subspan(next));
          FX_CHECK(r.status == status::ok || r.status == status::again);
          next += r.posted;
        }
        const std::size_t got = env.dom.poll(buf);
        for (std::size_t k = 0; k < got; ++k) {
          FX_CHECK(buf[k].op == opcode::write);
          FX_CHECK(buf[k].status == status::ok);
          FX_CHECK(buf[k].token < n);
          FX_CHECK(buf[k].bytes == each);
          ++seen[buf[k].token];
          ++done;
        }
      }
      for (std::size_t i = 0; i < n; ++i) FX_CHECK(seen[i] == 1);
      env.complete_ok(env.qps[1].write_with_imm(ms.slice(0, 0), peers[1].slice(0, 0), done_imm, n), n);
    } else {
      env.next([](const completion& x) { return is_notify(x, done_imm); });
      std::vector<std::byte> expected(n * each);
      fxt::fill(expected.data(), expected.size(), 5);
      for (std::size_t i = 0; i < n; ++i)
        FX_CHECK(std::memcmp(target.data() + (n - 1 - i) * each, expected.data() + i * each, each) == 0);
    }
  });
}

TEST_CASE_TEMPLATE("conformance: write_with_imm notification never arrives before its data", P, FX_PROVIDERS) {
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    constexpr std::uint32_t rounds = 64;
    constexpr std::size_t chunk = 256 << 10;
    std::vector<std::byte> target(rounds * chunk), src(rounds * chunk), extra(rounds * 4096);
    auto mt = env.reg(target);
    auto ms = env.reg(src, access::local);
    auto me = env.reg(extra);
    auto peers = env.share(mt);
    auto extras = env.share(me);
    if (env.rank == 0) {
      // All rounds in flight at once: each carries its data, and a plain
      // write posted before it to another region.
      for (std::uint32_t i = 0; i < rounds; ++i) {
        fxt::fill(src.data() + i * chunk, chunk, 100 + i);
        FX_CHECK_STATUS(env.qps[1].write(ms.slice(i * chunk, 4096), extras[1].slice(i * 4096, 4096), 5000 + i),
                        status::ok);
        FX_CHECK_STATUS(env.qps[1].write_with_imm(ms.slice(i * chunk, chunk), peers[1].slice(i * chunk, chunk), i, i),
                        status::ok);
      }
      for (std::uint32_t i = 0; i < rounds; ++i) {
        const auto c = env.next_token(i);
        FX_CHECK(c.status == status::ok && c.op == opcode::write_with_imm && c.imm == i && c.bytes == chunk);
        FX_CHECK(env.next_token(5000 + i).status == status::ok);
      }
      env.next([](const completion& x) { return is_notify(x, done_imm); });
    } else {
      std::vector<int> seen(rounds, 0);
      for (std::uint32_t k = 0; k < rounds; ++k) {
        const completion n = env.next_notify();
        FX_CHECK(n.imm < rounds && n.bytes == chunk);
        ++seen[n.imm];
        // Its data, and the write posted before it, are both in place.
        FX_CHECK(fxt::first_mismatch(target.data() + n.imm * chunk, chunk, 100 + n.imm) == chunk);
        FX_CHECK(fxt::first_mismatch(extra.data() + n.imm * 4096, 4096, 100 + n.imm) == 4096);
      }
      for (std::uint32_t i = 0; i < rounds; ++i) FX_CHECK(seen[i] == 1);
      env.complete_ok(env.qps[0].write_with_imm(ms.slice(0, 0), peers[0].slice(0, 0), done_imm, 1), 1);
    }
  });
}

TEST_CASE_TEMPLATE("conformance: flush completes after every earlier operation is done at the target", P,
                   FX_PROVIDERS) {
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    constexpr std::size_t n = 200, each = 8192;
    std::vector<std::byte> target(n * each), src(n * each), msg(64);
    auto mt = env.reg(target);
    auto ms = env.reg(src, access::local);
    auto mm = env.reg(msg, access::local);
    auto peers = env.share(mt);
    if (env.rank == 0) {
      fxt::fill(src.data(), src.size(), 9);
      std::size_t posted = 0;
      while (posted < n) {  // post all, then flush, without waiting for any completion
        const status s = env.qps[1].write(ms.slice(posted * each, each), peers[1].slice(posted * each, each), posted);
        if (s == status::again) {
          env.serve_for(std::chrono::milliseconds(1));
          continue;
        }
        FX_CHECK_STATUS(s, status::ok);
        ++posted;
      }
      // Also a notification in flight: flush waits for it as well.
      FX_CHECK_STATUS(env.qps[1].write_with_imm(ms.slice(0, each), peers[1].slice(0, each), 7, 7777), status::ok);
      env.complete_ok(env.qps[1].flush(4242), 4242);
      // Every earlier operation has completed (its completion was queued before the flush's).
      std::size_t writes = 0;
      for (const auto& c : env.backlog) writes += c.op == opcode::write && c.status == status::ok;
      FX_CHECK(writes == n);
      FX_CHECK(env.next_token(7777).status == status::ok);
      // A message sent only now must find all data already in place.
      std::memcpy(msg.data(), "check", 5);
      env.complete_ok(env.qps[1].send(mm.slice(0, 5), 1), 1);
    } else {
      std::vector<std::byte> in(64);
      auto mi = env.reg(in, access::local);
      FX_CHECK_STATUS(env.qps[0].recv(mi.slice(0, 64), 1), status::ok);
      const auto c = env.next_token(1);
      FX_CHECK(c.status == status::ok && c.op == opcode::recv && c.bytes == 5);
      FX_CHECK(std::memcmp(in.data(), "check", 5) == 0);
      FX_CHECK(fxt::first_mismatch(target.data(), target.size(), 9) == target.size());
      FX_CHECK(env.next_notify().imm == 7);
    }
  });
}

TEST_CASE_TEMPLATE("conformance: writes into more regions than a provider keeps keys for", P, FX_PROVIDERS) {
  // A peer that hands out ever new regions (say, a collective's output per
  // call): providers that cache unpacked keys must bound the cache (UCX: 64
  // per endpoint) and take an evicted region's key up again, while keys of
  // operations in flight stay. Every write must land where it was aimed.
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    constexpr std::size_t regions = 150, half = 256;
    std::vector<std::vector<std::byte>> targets(regions, std::vector<std::byte>(2 * half));
    std::vector<fabrix::memory_region<P>> mts;
    for (auto& t : targets) mts.push_back(env.reg(t));
    const auto peers = env.share_all(mts);
    std::vector<std::byte> src(regions * 2 * half);
    auto ms = env.reg(src, access::local);
    if (env.rank == 0) {
      for (std::size_t i = 0; i < regions; ++i) fxt::fill(src.data() + 2 * i * half, half, i);
      for (std::size_t i = 0; i < regions; ++i) fxt::fill(src.data() + (2 * i + 1) * half, half, 1000 + i);
      // The first halves one at a time (a bounded cache evicts as it goes),
      // then the second halves in reverse, all in flight at once (evicted
      // keys are taken up again while the others are held).
      for (std::size_t i = 0; i < regions; ++i)
        env.complete_ok(env.qps[1].write(ms.slice(2 * i * half, half), peers[i][1].slice(0, half), i), i);
      for (std::size_t i = regions; i-- > 0;) {
        const std::size_t at = (2 * i + 1) * half;
        FX_CHECK_STATUS(env.qps[1].write(ms.slice(at, half), peers[i][1].slice(half, half), 1000 + i), status::ok);
      }
      for (std::size_t i = 0; i < regions; ++i) FX_CHECK(env.next_token(1000 + i).status == status::ok);
      env.complete_ok(env.qps[1].write_with_imm(ms.slice(0, 0), peers[0][1].slice(0, 0), done_imm, 5000), 5000);
    } else {
      env.next([](const completion& x) { return is_notify(x, done_imm); });
      for (std::size_t i = 0; i < regions; ++i) {
        FX_CHECK(fxt::first_mismatch(targets[i].data(), half, i) == half);
        FX_CHECK(fxt::first_mismatch(targets[i].data() + half, half, 1000 + i) == half);
      }
    }
  });
}

TEST_CASE_TEMPLATE("conformance: operations posted behind a flush still complete", P, FX_PROVIDERS) {
  // A flush posted while a write is in flight may be held back by the
  // provider, and what is posted after it queues behind it; when the flush
  // goes out, everything behind it must too (ofi's drain() once dropped it).
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    constexpr std::size_t big = 1 << 20, each = 4096, behind = 8;
    std::vector<std::byte> target(big + behind * each), src(big + behind * each);
    auto mt = env.reg(target);
    auto ms = env.reg(src, access::local);
    auto peers = env.share(mt);
    if (env.rank == 0) {
      fxt::fill(src.data(), src.size(), 21);
      FX_CHECK_STATUS(env.qps[1].write(ms.slice(0, big), peers[1].slice(0, big), 1), status::ok);
      FX_CHECK_STATUS(env.qps[1].flush(2), status::ok);
      for (std::size_t i = 0; i < behind; ++i) {
        const std::size_t at = big + i * each;
        FX_CHECK_STATUS(env.qps[1].write(ms.slice(at, each), peers[1].slice(at, each), 10 + i), status::ok);
      }
      FX_CHECK_STATUS(env.qps[1].flush(3), status::ok);
      FX_CHECK_STATUS(env.qps[1].write_with_imm(ms.slice(0, 0), peers[1].slice(0, 0), done_imm, 4), status::ok);
      for (std::uint64_t t : {1, 2, 3, 4}) FX_CHECK(env.next_token(t).status == status::ok);
      for (std::size_t i = 0; i < behind; ++i) FX_CHECK(env.next_token(10 + i).status == status::ok);
    } else {
      env.next([](const completion& x) { return is_notify(x, done_imm); });
      FX_CHECK(fxt::first_mismatch(target.data(), target.size(), 21) == target.size());
    }
  });
}
