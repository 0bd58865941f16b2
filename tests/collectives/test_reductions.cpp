// allreduce and reduce_scatter: every dtype and op, sizes that do not divide
// by the number of ranks or by the chunk, in place and out of place.
#include "common.hpp"

#include <span>
#include <tuple>

namespace {

using fxc::reduce_op;

constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::min, reduce_op::max};

template <class T>
void allreduce_sizes(fxc::comm_t& comm, int rank, int n, std::span<const std::size_t> sizes) {
  std::uint64_t salt = 0;
  for (const std::size_t count : sizes) {
    for (const reduce_op op : all_ops) {
      ++salt;
      std::vector<T> in(count), out(count, T(-7));
      for (std::size_t i = 0; i < count; ++i) in[i] = fxc::value<T>(rank, i, salt);
      const bool in_place = (salt % 2) == 0;
      auto r = in_place ? fabrix::coll::allreduce(comm, std::span<T>(in), op)
                        : fabrix::coll::allreduce(comm, std::span<const T>(in), std::span<T>(out), op);
      fxc::check_ok(r, "allreduce");
      const std::string what = "allreduce " + std::string(fabrix::coll::to_string(op)) + " of " +
                               std::to_string(count) + (in_place ? " in place" : "");
      fxc::expect_elements(
          in_place ? in : out, [&](std::size_t i) { return fxc::reference<T>(n, i, op, salt); }, what);
    }
  }
}

template <class T>
void reduce_scatter_sizes(fxc::comm_t& comm, int rank, int n, std::span<const std::size_t> sizes) {
  std::uint64_t salt = 100;
  for (const std::size_t count : sizes) {
    for (const reduce_op op : all_ops) {
      ++salt;
      std::vector<T> in(count * static_cast<std::size_t>(n)), out(count, T(-7));
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = fxc::value<T>(rank, i, salt);
      fxc::check_ok(fabrix::coll::reduce_scatter(comm, std::span<const T>(in), std::span<T>(out), op),
                    "reduce_scatter");
      const std::size_t base = static_cast<std::size_t>(rank) * count;
      fxc::expect_elements(
          out, [&](std::size_t i) { return fxc::reference<T>(n, base + i, op, salt); },
          "reduce_scatter " + std::string(fabrix::coll::to_string(op)) + " of " + std::to_string(count));
    }
  }
}

}  // namespace

TEST_CASE("collectives: allreduce, every dtype and op, 2-4 ranks, uneven sizes") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    fxc::with_comm(n, fxc::small_chunks(), [](fxc::comm_t& comm, int rank, int n) {
      // 264-byte chunks: 33 int64 / 66 int32 per chunk; 2 chunks per step.
      const std::size_t sizes[] = {0, 1, 2, 3, 5, 67, 263, 1001, 4099};
      allreduce_sizes<std::int32_t>(comm, rank, n, sizes);
      allreduce_sizes<std::int64_t>(comm, rank, n, sizes);
      allreduce_sizes<float>(comm, rank, n, sizes);
      allreduce_sizes<double>(comm, rank, n, sizes);
    });
  }
}

TEST_CASE("collectives: allreduce with the default chunk, several MiB") {
  fxc::with_comm(3, fabrix::coll::options{}, [](fxc::comm_t& comm, int rank, int n) {
    const std::size_t sizes[] = {(std::size_t{3} << 20) + 5};  // 24 MiB of doubles, not a multiple of anything
    std::vector<double> x(sizes[0]);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = fxc::value<double>(rank, i, 9);
    fxc::check_ok(fabrix::coll::allreduce(comm, std::span<double>(x), reduce_op::sum), "allreduce");
    fxc::expect_elements(
        x, [&](std::size_t i) { return fxc::reference<double>(n, i, reduce_op::sum, 9); }, "allreduce 24 MiB");
  });
}

TEST_CASE("collectives: reduce_scatter, every dtype and op, 2-4 ranks") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    fxc::with_comm(n, fxc::small_chunks(), [](fxc::comm_t& comm, int rank, int n) {
      const std::size_t sizes[] = {0, 1, 7, 100, 1003};
      reduce_scatter_sizes<std::int32_t>(comm, rank, n, sizes);
      reduce_scatter_sizes<std::int64_t>(comm, rank, n, sizes);
      reduce_scatter_sizes<float>(comm, rank, n, sizes);
      reduce_scatter_sizes<double>(comm, rank, n, sizes);
    });
  }
}

TEST_CASE("collectives: the ring forwarding from receive slots (forward_received), 2-4 ranks") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    fabrix::coll::options o = fxc::small_chunks();
    o.forward_received = true;
    fxc::with_comm(n, o, [](fxc::comm_t& comm, int rank, int n) {
      const std::size_t sizes[] = {67, 1001, 4099};
      allreduce_sizes<std::int32_t>(comm, rank, n, sizes);
      allreduce_sizes<double>(comm, rank, n, sizes);
      for (const std::size_t count : {std::size_t{1}, std::size_t{777}}) {
        std::vector<std::int64_t> mine(count), all(count * static_cast<std::size_t>(n), -7);
        for (std::size_t i = 0; i < count; ++i) mine[i] = fxc::value<std::int64_t>(rank, i, 5);
        fxc::check_ok(fabrix::coll::allgather(comm, std::span<const std::int64_t>(mine), std::span<std::int64_t>(all)),
                      "allgather");
        fxc::expect_elements(
            all, [&](std::size_t i) { return fxc::value<std::int64_t>(static_cast<int>(i / count), i % count, 5); },
            "forwarded allgather of " + std::to_string(count));
      }
    });
  }
}
