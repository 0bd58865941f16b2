// 8-byte atomics: results, alignment checks, and contention from 4 ranks.
#include "providers.hpp"

#include <algorithm>
#include <cstring>

using fabrix::access;
using fabrix::completion;
using fabrix::opcode;
using fabrix::status;

namespace {

std::uint64_t load64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
void store64(std::byte* p, std::uint64_t v) { std::memcpy(p, &v, 8); }

}  // namespace

TEST_CASE_TEMPLATE("conformance: fetch_add and compare_swap results", P, FX_PROVIDERS) {
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    alignas(8) static std::byte target_storage[64];
    std::vector<std::byte> result(64), sync(8);
    std::memset(target_storage, 0, sizeof(target_storage));
    store64(target_storage + 8, 100);
    store64(target_storage + 16, 7);
    auto mt = fxt::must(env.dom.register_memory(target_storage, sizeof(target_storage), {}, access::all_remote), "reg");
    auto mr = env.reg(result, access::local);
    auto ms = env.reg(sync);
    auto peers = env.share(mt);
    auto syncs = env.share(ms);
    if (env.rank == 0) {
      env.complete_ok(env.qps[1].fetch_add(mr.slice(0, 8), peers[1].slice(8, 8), 5, 1), 1);
      FX_CHECK(load64(result.data()) == 100);
      env.complete_ok(env.qps[1].fetch_add(mr.slice(0, 8), peers[1].slice(8, 8), ~std::uint64_t{0}, 2), 2);
      FX_CHECK(load64(result.data()) == 105);  // then 104: adding -1 wraps
      // compare_swap that fails leaves the value and returns it.
      env.complete_ok(env.qps[1].compare_swap(mr.slice(8, 8), peers[1].slice(16, 8), 3, 99, 3), 3);
      FX_CHECK(load64(result.data() + 8) == 7);
      // compare_swap that succeeds.
      env.complete_ok(env.qps[1].compare_swap(mr.slice(8, 8), peers[1].slice(16, 8), 7, 0x1122334455667788ull, 4), 4);
      FX_CHECK(load64(result.data() + 8) == 7);
      // Unaligned or wrongly sized atomics are refused before posting.
      FX_CHECK_STATUS(env.qps[1].fetch_add(mr.slice(0, 8), peers[1].slice(9, 8), 1, 5), status::invalid_argument);
      FX_CHECK_STATUS(env.qps[1].fetch_add(mr.slice(1, 8), peers[1].slice(8, 8), 1, 5), status::invalid_argument);
      FX_CHECK_STATUS(env.qps[1].fetch_add(mr.slice(0, 4), peers[1].slice(8, 4), 1, 5), status::invalid_argument);
      FX_CHECK_STATUS(env.qps[1].compare_swap(mr.slice(0, 8), peers[1].slice(12, 8), 0, 1, 5),
                      status::invalid_argument);
      env.complete_ok(env.qps[1].write_with_imm(mr.slice(0, 0), syncs[1].slice(0, 0), 1, 6), 6);
    } else {
      env.next_notify();
      FX_CHECK(load64(target_storage + 8) == 104);
      FX_CHECK(load64(target_storage + 16) == 0x1122334455667788ull);
      FX_CHECK(load64(target_storage) == 0);
      FX_CHECK(load64(target_storage + 24) == 0);
    }
  });
}

TEST_CASE_TEMPLATE("conformance: atomics under contention from 4 ranks", P, FX_PROVIDERS) {
  constexpr int ranks = 4;
  constexpr std::uint64_t adds = 300, swaps = 50;
  fxt::with_ranks<P>(ranks, [](fxt::rank_env<P>& env) {
    std::vector<std::byte> counters(64), result(16), scratch(8);
    auto mc = env.reg(counters);
    auto mr = env.reg(result, access::local);
    auto msc = env.reg(scratch);
    auto peers = env.share(mc);
    auto scratches = env.share(msc);
    // Everyone (rank 0 included, through its loopback queue pair) adds 1 to
    // rank 0's counter; every old value must be seen exactly once overall.
    std::vector<std::uint64_t> fetched;
    for (std::uint64_t i = 0; i < adds; ++i) {
      env.complete_ok(env.qps[0].fetch_add(mr.slice(0, 8), peers[0].slice(0, 8), 1, i), i);
      fetched.push_back(load64(result.data()));
    }
    // A compare_swap increment loop on a second counter.
    for (std::uint64_t done = 0, guess = 0; done < swaps;) {
      env.complete_ok(env.qps[0].compare_swap(mr.slice(8, 8), peers[0].slice(8, 8), guess, guess + 1, 7), 7);
      const std::uint64_t old = load64(result.data() + 8);
      if (old == guess) ++done;
      guess = old == guess ? guess + 1 : old;
    }
    env.sync(msc, scratches, 1);  // everyone is done; rank 0 kept serving meanwhile
    std::vector<std::byte> mine(fetched.size() * 8);
    std::memcpy(mine.data(), fetched.data(), mine.size());
    auto all = fxt::must(env.boot.allgather(mine), "allgather");
    if (env.rank == 0) {
      FX_CHECK(load64(counters.data()) == ranks * adds);
      FX_CHECK(load64(counters.data() + 8) == ranks * swaps);
      std::vector<std::uint64_t> every;
      for (const auto& blob : all) {
        FX_CHECK(blob.size() == adds * 8);
        for (std::size_t i = 0; i < adds; ++i) every.push_back(load64(blob.data() + i * 8));
      }
      std::sort(every.begin(), every.end());
      for (std::uint64_t i = 0; i < every.size(); ++i) FX_CHECK(every[i] == i);
    }
    env.sync(msc, scratches, 2);
  });
}
