// allgather, alltoall, alltoallv and barrier.
#include "common.hpp"

#include <atomic>
#include <span>
#include <thread>

namespace {

// Rank r's element i as a 64-bit tag that names both.
std::uint64_t tag(int rank, std::size_t i, std::uint64_t salt) {
  return (static_cast<std::uint64_t>(rank) << 48) ^ (salt << 32) ^ i;
}

}  // namespace

TEST_CASE("collectives: allgather, 2-4 ranks, uneven sizes") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    fxc::with_comm(n, fxc::small_chunks(), [](fxc::comm_t& comm, int rank, int n) {
      std::uint64_t salt = 0;
      for (const std::size_t count : {0, 1, 3, 33, 34, 1000, 20011}) {
        ++salt;
        std::vector<std::uint64_t> in(count), out(count * static_cast<std::size_t>(n), 0xdead);
        for (std::size_t i = 0; i < count; ++i) in[i] = tag(rank, i, salt);
        fxc::check_ok(fabrix::coll::allgather(comm, std::span<const std::uint64_t>(in), std::span<std::uint64_t>(out)),
                      "allgather");
        fxc::expect_elements(
            out, [&](std::size_t j) { return tag(static_cast<int>(j / count), j % count, salt); },
            "allgather of " + std::to_string(count));
      }
      // Odd element size (3 bytes), in place: block rank() of out is the input.
      struct rgb {
        std::uint8_t c[3];
        bool operator==(const rgb&) const = default;
      };
      const std::size_t count = 101;
      std::vector<rgb> all(count * static_cast<std::size_t>(n));
      auto make = [](int r, std::size_t i) {
        return rgb{{static_cast<std::uint8_t>(r), static_cast<std::uint8_t>(i), static_cast<std::uint8_t>(i >> 8)}};
      };
      for (std::size_t i = 0; i < count; ++i) all[static_cast<std::size_t>(rank) * count + i] = make(rank, i);
      std::span<rgb> out(all);
      fxc::check_ok(fabrix::coll::allgather(comm, std::span<const rgb>(out.subspan(rank * count, count)), out),
                    "allgather in place");
      for (std::size_t j = 0; j < all.size(); ++j) FX_CHECK(all[j] == make(static_cast<int>(j / count), j % count));
    });
  }
}

TEST_CASE("collectives: alltoall and alltoallv, 2-4 ranks") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    fxc::with_comm(n, fxc::small_chunks(), [](fxc::comm_t& comm, int rank, int n) {
      const auto un = static_cast<std::size_t>(n);
      std::uint64_t salt = 0;
      // alltoall: block p of rank r's input goes to block r of rank p's output.
      for (const std::size_t count : {0, 1, 32, 33, 35, 5000}) {
        ++salt;
        std::vector<std::uint64_t> in(count * un), out(count * un, 0xdead);
        for (std::size_t i = 0; i < in.size(); ++i) in[i] = tag(rank, i, salt);
        fxc::check_ok(fabrix::coll::alltoall(comm, std::span<const std::uint64_t>(in), std::span<std::uint64_t>(out)),
                      "alltoall");
        fxc::expect_elements(
            out,
            [&](std::size_t j) {
              const std::size_t from = j / count;  // rank `from` sent its block `rank`
              return tag(static_cast<int>(from), static_cast<std::size_t>(rank) * count + j % count, salt);
            },
            "alltoall of " + std::to_string(count));
      }
      // alltoallv: rank r sends (r + 2p) % 5 * 37 elements to rank p (zeros included),
      // packed in its input in rank order; receives packed in rank order too.
      for (int round = 0; round < 3; ++round) {
        ++salt;
        auto amount = [&](int from, int to) { return static_cast<std::size_t>((from + 2 * to + round) % 5) * 37; };
        std::vector<std::size_t> sc(un), sd(un), rc(un), rd(un);
        std::size_t in_total = 0, out_total = 0;
        for (int p = 0; p < n; ++p) {
          sc[p] = amount(rank, p);
          sd[p] = in_total;
          in_total += sc[p];
          rc[p] = amount(p, rank);
          rd[p] = out_total;
          out_total += rc[p];
        }
        std::vector<std::uint64_t> in(in_total), out(out_total, 0xdead);
        for (int p = 0; p < n; ++p)
          for (std::size_t i = 0; i < sc[p]; ++i) in[sd[p] + i] = tag(rank, 1000000u * p + i, salt);
        fxc::check_ok(fabrix::coll::alltoallv(comm, std::span<const std::uint64_t>(in), std::span(sc), std::span(sd),
                                              std::span<std::uint64_t>(out), std::span(rc), std::span(rd)),
                      "alltoallv");
        for (int p = 0; p < n; ++p)
          for (std::size_t i = 0; i < rc[p]; ++i) FX_CHECK(out[rd[p] + i] == tag(p, 1000000u * rank + i, salt));
      }
    });
  }
}

TEST_CASE("collectives: barrier lets no rank out before all are in") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    // Entry counters shared by the ranks (zeroed).
    fxt::shared_page shared;
    REQUIRE(shared.data() != nullptr);
    auto* entered = static_cast<std::atomic<int>*>(shared.data());
    fxc::with_comm(n, fxc::small_chunks(), [entered](fxc::comm_t& comm, int rank, int n) {
      for (int b = 1; b <= 5; ++b) {
        // The late rank changes every round.
        if (rank == b % n) std::this_thread::sleep_for(std::chrono::milliseconds(30));
        entered->fetch_add(1);
        fxc::check_ok(comm.barrier(), "barrier");
        FX_CHECK(entered->load() >= b * n);  // everyone entered barrier b
        // A second barrier keeps the next round's increments after every check.
        fxc::check_ok(comm.barrier(), "barrier");
      }
    });
  }
}
