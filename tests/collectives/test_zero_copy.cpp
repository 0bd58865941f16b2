// Collectives on buffers registered with the communicator (zero_copy.hpp)
// or allocated by it (communicator::allocate_memory): allreduce over every
// dtype and op, sizes that divide by nothing, buffers at different offsets
// of their registrations on different ranks, and ranks that registered or
// allocated different things (input, output, both, in place, nothing), so
// that every route between neighbours runs; allgather and alltoallv the
// same way. Where the slots came from the provider (UCX), peers write only
// into allocated outputs, not registered ones; elsewhere into both. Plus the checks on a peer's output message:
// malformed, truncated, outside its registration, for another call size.
// (A forged region the provider refuses at post time: tests/conformance,
// forged keys.)
#include "common.hpp"

#include <fabrix/collectives/zero_copy.hpp>

#include <algorithm>
#include <cstring>
#include <span>

namespace {

using fxc::reduce_op;

constexpr reduce_op zero_copy_ops[] = {reduce_op::sum, reduce_op::min, reduce_op::max};

// Chunks just large enough for the output message; zero copy at any size.
fabrix::coll::options zero_copy_chunks() {
  fabrix::coll::options o = fxc::small_chunks();
  o.chunk_bytes = 1024;
  o.zero_copy_min_bytes = 0;
  return o;
}

// What a rank registers in one call: mode 0 nothing, 1 the input, 2 the
// output, 3 both, 4 both, in place; allocated: 5 both, 6 both, in place.
constexpr int modes = 7;
int mode_of(int rank, int round) { return (rank + round) % modes; }

// Whether peers write chunks straight into an output of `mode` (>= 2).
bool output_takes_writes(const fxc::comm_t& comm, int mode) {
  return mode >= 5 || (mode >= 2 && !comm.slots_from_provider());
}

template <class T>
void registered_sizes(fxc::comm_t& comm, int rank, int n, std::span<const std::size_t> sizes) {
  std::uint64_t salt = 300;
  int round = 0;
  for (const std::size_t count : sizes) {
    for (const reduce_op op : zero_copy_ops) {
      ++salt;
      ++round;
      const int mode = mode_of(rank, round);
      const int right_mode = mode_of((rank + 1) % n, round);
      // One pool per rank (allocated: the communicator's); the buffers sit
      // at a rank-dependent offset in it.
      const std::size_t skew = 3 + static_cast<std::size_t>(rank) * 5;
      fabrix::coll::registered_memory<fxc::P> reg_in, reg_out;
      std::vector<T> heap;
      std::span<T> pool;
      if (mode >= 5) {
        reg_in = fxt::must(comm.allocate_memory((2 * count + 2 * skew + 8) * sizeof(T)), "allocate");
        pool = reg_in.as<T>();
      } else {
        heap.resize(2 * count + 2 * skew + 8);
        pool = heap;
      }
      std::fill(pool.begin(), pool.end(), T(-9));
      const std::span<T> in(pool.data() + skew, count);
      const std::span<T> out = mode == 4 || mode == 6 ? in : std::span<T>(pool.data() + count + 2 * skew, count);
      for (std::size_t i = 0; i < count; ++i) in[i] = fxc::value<T>(rank, i, salt);
      if (mode == 1 || mode == 3 || mode == 4) reg_in = fxt::must(comm.register_memory(in), "register input");
      if (mode == 2 || mode == 3) reg_out = fxt::must(comm.register_memory(out), "register output");
      const std::uint64_t before = comm.direct_chunks();
      fxc::check_ok(fabrix::coll::allreduce(comm, std::span<const T>(in), out, op), "allreduce");
      const std::string what = "registered allreduce " + std::string(fabrix::coll::to_string(op)) + " of " +
                               std::to_string(count) + ", mode " + std::to_string(mode);
      fxc::expect_elements(
          std::vector<T>(out.begin(), out.end()), [&](std::size_t i) { return fxc::reference<T>(n, i, op, salt); },
          what);
      // The guard elements around the buffers are untouched.
      for (std::size_t i = 0; i < skew; ++i)
        if (pool[i] != T(-9)) fxt::rank_fail(what.c_str(), __FILE__, __LINE__, "guard before the input overwritten");
      for (std::size_t i = pool.size() - 8; i < pool.size(); ++i)
        if (pool[i] != T(-9)) fxt::rank_fail(what.c_str(), __FILE__, __LINE__, "guard after the output overwritten");
      // Routes were taken exactly when this rank registered something or
      // its right neighbour's output takes writes.
      const bool direct = count * sizeof(T) > 1024 && (mode != 0 || output_takes_writes(comm, right_mode));
      if ((comm.direct_chunks() > before) != direct)
        fxt::rank_fail(what.c_str(), __FILE__, __LINE__,
                       "direct chunks " + std::to_string(comm.direct_chunks() - before) + ", expected " +
                           (direct ? "some" : "none"));
    }
  }
}

// allgather: mode 0 nothing registered, 1 the output, 2 the output with
// the input in place (block rank() of it), 3 the output allocated.
template <class T>
void registered_allgather(fxc::comm_t& comm, int rank, int n, std::span<const std::size_t> sizes) {
  std::uint64_t salt = 500;
  int round = 0;
  for (const std::size_t count : sizes) {
    ++salt;
    ++round;
    const int mode = (rank + round) % 4;
    const int right_mode = ((rank + 1) % n + round) % 4;
    const bool right_takes = right_mode == 3 || (right_mode != 0 && !comm.slots_from_provider());
    const std::size_t total = count * static_cast<std::size_t>(n);
    const std::size_t skew = 1 + static_cast<std::size_t>(rank) * 3;
    fabrix::coll::registered_memory<fxc::P> reg;
    std::vector<T> heap;
    std::span<T> pool;
    if (mode == 3) {
      reg = fxt::must(comm.allocate_memory((total + count + 2 * skew) * sizeof(T)), "allocate");
      pool = reg.as<T>();
    } else {
      heap.resize(total + count + 2 * skew);
      pool = heap;
    }
    std::fill(pool.begin(), pool.end(), T(-9));
    const std::span<T> out(pool.data() + skew, total);
    const std::span<T> in = mode == 2 ? out.subspan(static_cast<std::size_t>(rank) * count, count)
                                      : std::span<T>(pool.data() + 2 * skew + total, count);
    for (std::size_t i = 0; i < count; ++i) in[i] = fxc::value<T>(rank, i, salt);
    if (mode == 1 || mode == 2) reg = fxt::must(comm.register_memory(out), "register output");
    const std::uint64_t before = comm.direct_chunks();
    fxc::check_ok(fabrix::coll::allgather(comm, std::span<const T>(in), out), "allgather");
    const std::string what = "registered allgather of " + std::to_string(count) + ", mode " + std::to_string(mode);
    fxc::expect_elements(
        std::vector<T>(out.begin(), out.end()),
        [&](std::size_t i) { return fxc::value<T>(static_cast<int>(i / count), i % count, salt); }, what);
    for (std::size_t i = 0; i < skew; ++i)
      if (pool[i] != T(-9)) fxt::rank_fail(what.c_str(), __FILE__, __LINE__, "guard before the output overwritten");
    if ((comm.direct_chunks() > before) != (mode != 0 || right_takes))
      fxt::rank_fail(what.c_str(), __FILE__, __LINE__, "unexpected route");
  }
}

// alltoallv: mode 0 nothing registered, 1 the input, 2 the output, 3 both,
// 4 both allocated.
// Pieces of 0 to 3001 elements, some under the zero-copy threshold of
// `min_piece` bytes, with gaps between them that must stay untouched.
template <class T>
void registered_alltoallv(fxc::comm_t& comm, int rank, int n, std::size_t min_piece) {
  const std::size_t lengths[] = {0, 1, 100, 511, 512, 3001};
  const std::size_t un = static_cast<std::size_t>(n), me = static_cast<std::size_t>(rank);
  for (int round = 0; round < 8; ++round) {
    const std::uint64_t salt = 700 + static_cast<std::uint64_t>(round);
    auto count = [&](std::size_t from, std::size_t to) { return lengths[(from + 2 * to + round) % 6]; };
    auto mode = [&](std::size_t r) { return (static_cast<int>(r) + round) % 5; };
    auto sends_direct = [&](std::size_t r) { return (mode(r) & 1) != 0 || mode(r) == 4; };
    auto takes_writes = [&](std::size_t r) {
      return mode(r) == 4 || ((mode(r) & 2) != 0 && !comm.slots_from_provider());
    };
    std::vector<std::size_t> sc(un), sd(un), rc(un), rd(un);
    std::size_t in_len = 1, out_len = 2;  // leading gaps
    for (std::size_t p = 0; p < un; ++p) {
      sc[p] = count(me, p);
      sd[p] = in_len;
      in_len += sc[p] + 2;
      rc[p] = count(p, me);
      rd[p] = out_len;
      out_len += rc[p] + 3;
    }
    fabrix::coll::registered_memory<fxc::P> reg_in, reg_out;
    std::vector<T> in_heap, out_heap;
    std::span<T> in, out;
    if (mode(me) == 4) {
      reg_in = fxt::must(comm.allocate_memory(in_len * sizeof(T)), "allocate input");
      reg_out = fxt::must(comm.allocate_memory(out_len * sizeof(T)), "allocate output");
      in = reg_in.as<T>().first(in_len);
      out = reg_out.as<T>().first(out_len);
    } else {
      in_heap.resize(in_len);
      out_heap.resize(out_len);
      in = in_heap;
      out = out_heap;
    }
    std::fill(in.begin(), in.end(), T(-5));
    std::fill(out.begin(), out.end(), T(-9));
    for (std::size_t p = 0; p < un; ++p)
      for (std::size_t i = 0; i < sc[p]; ++i) in[sd[p] + i] = fxc::value<T>(rank, p * 100000 + i, salt);
    if (mode(me) == 1 || mode(me) == 3) reg_in = fxt::must(comm.register_memory(in), "register input");
    if (mode(me) == 2 || mode(me) == 3) reg_out = fxt::must(comm.register_memory(out), "register output");
    const std::uint64_t before = comm.direct_chunks();
    fxc::check_ok(fabrix::coll::alltoallv(comm, std::span<const T>(in), std::span<const std::size_t>(sc),
                                          std::span<const std::size_t>(sd), out, std::span<const std::size_t>(rc),
                                          std::span<const std::size_t>(rd)),
                  "alltoallv");
    const std::string what = "registered alltoallv round " + std::to_string(round) + ", mode " +
                             std::to_string(mode(me)) + ", element size " + std::to_string(sizeof(T));
    std::vector<T> want(out_len, T(-9));
    for (std::size_t p = 0; p < un; ++p)
      for (std::size_t i = 0; i < rc[p]; ++i)
        want[rd[p] + i] = fxc::value<T>(static_cast<int>(p), me * 100000 + i, salt);
    fxc::expect_elements(
        std::vector<T>(out.begin(), out.end()), [&](std::size_t i) { return want[i]; }, what);
    // Direct chunks went out exactly for pieces over the threshold that
    // leave from a registered input or land in an output that takes writes.
    bool direct = false;
    for (std::size_t p = 0; p < un; ++p)
      direct = direct || (p != me && sc[p] * sizeof(T) >= min_piece && (sends_direct(me) || takes_writes(p)));
    if ((comm.direct_chunks() > before) != direct) fxt::rank_fail(what.c_str(), __FILE__, __LINE__, "unexpected route");
  }
}

// Rank 1 plays a broken peer: it sends rank 0 the output message that
// `forge` writes (instead of calling the collective). Rank 0's `call`
// (default: allreduce on its registered vector) must fail with
// invalid_argument and leave its buffer as it was.
auto allreduce_call = [](fxc::comm_t& comm, std::vector<double>& v) {
  return fabrix::coll::allreduce(comm, std::span<double>(v), reduce_op::sum);
};

template <class Forge, class Call = decltype(allreduce_call)>
void broken_neighbour(Forge forge, const char* expect, Call call = allreduce_call) {
  fxc::with_comm(
      2, zero_copy_chunks(),
      [&](fxc::comm_t& comm, int rank, int) {
        std::vector<double> v(4096, 1.0);
        auto reg = fxt::must(comm.register_memory(std::span(v)), "register");
        if (rank == 0) {
          auto r = call(comm, v);
          FX_CHECK(!r);
          FX_CHECK(r.code() == fabrix::status::invalid_argument);
          FX_CHECK(r.error().describe().find(expect) != std::string::npos);
          FX_CHECK(std::all_of(v.begin(), v.end(), [](double x) { return x == 1.0; }));
          return;
        }
        while (!comm.can_send(0)) (void)comm.progress();
        const std::size_t len = forge(comm, comm.send_slot(0), v);
        fxc::check_ok(comm.post(0, len), "post");
        // Rank 0's abort arrives; until then, keep progressing.
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (comm.health() && std::chrono::steady_clock::now() < until) (void)comm.progress();
        FX_CHECK(!comm.health());
      },
      std::chrono::seconds(60), [](int) { return fxt::ending::exit_ok; });
}

// An honest message for a registration, at `offset` bytes into it and for
// a call of `bytes`.
std::size_t honest(fxc::comm_t&, std::byte* slot, std::uint64_t offset, std::uint64_t bytes,
                   const fabrix::remote_buffer& rb) {
  return fabrix::coll::detail::write_output_message(std::span<std::byte>(slot, 1024), offset, bytes, rb);
}

}  // namespace

TEST_CASE("collectives: allreduce on registered buffers, every route, dtype and op, 2-4 ranks") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    fxc::with_comm(n, zero_copy_chunks(), [](fxc::comm_t& comm, int rank, int n) {
      // 1 KiB chunks: 128 doubles; sizes under 1 KiB take the one-hop path.
      const std::size_t sizes[] = {3, 263, 1001, 4099, 20011};
      registered_sizes<std::int32_t>(comm, rank, n, sizes);
      registered_sizes<std::int64_t>(comm, rank, n, sizes);
      registered_sizes<float>(comm, rank, n, sizes);
      registered_sizes<double>(comm, rank, n, sizes);
    });
  }
}

TEST_CASE("collectives: allgather into registered outputs, every route, 2-4 ranks") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    fxc::with_comm(n, zero_copy_chunks(), [](fxc::comm_t& comm, int rank, int n) {
      const std::size_t sizes[] = {1, 2, 131, 1001, 4099, 9001};
      registered_allgather<std::int32_t>(comm, rank, n, sizes);
      registered_allgather<double>(comm, rank, n, sizes);
    });
  }
}

TEST_CASE("collectives: alltoallv between registered buffers, every route, 2-4 ranks") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    // Pieces of at least 2 KiB go zero copy.
    fabrix::coll::options o = zero_copy_chunks();
    o.zero_copy_min_bytes = 2048 * static_cast<std::size_t>(n);
    fxc::with_comm(n, o, [](fxc::comm_t& comm, int rank, int n) {
      registered_alltoallv<std::int32_t>(comm, rank, n, 2048);
      registered_alltoallv<double>(comm, rank, n, 2048);
    });
  }
}

TEST_CASE("collectives: registered allreduce with the default options, several MiB, 4 ranks") {
  fxc::with_comm(4, fabrix::coll::options{}, [](fxc::comm_t& comm, int rank, int n) {
    std::vector<float> x((std::size_t{1} << 20) + 7);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = fxc::value<float>(rank, i, 11);
    auto reg = fxt::must(comm.register_memory(std::span(x)), "register");
    const std::uint64_t before = comm.direct_chunks();
    fxc::check_ok(fabrix::coll::allreduce(comm, std::span<float>(x), reduce_op::sum), "allreduce");
    FX_CHECK(comm.direct_chunks() > before);
    fxc::expect_elements(
        x, [&](std::size_t i) { return fxc::reference<float>(n, i, reduce_op::sum, 11); }, "allreduce 4 MiB");
    // Deregistered: the same call goes through the slots again.
    reg.reset();
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = fxc::value<float>(rank, i, 12);
    const std::uint64_t again = comm.direct_chunks();
    fxc::check_ok(fabrix::coll::allreduce(comm, std::span<float>(x), reduce_op::sum), "allreduce");
    FX_CHECK(comm.direct_chunks() == again);
    fxc::expect_elements(
        x, [&](std::size_t i) { return fxc::reference<float>(n, i, reduce_op::sum, 12); }, "allreduce 4 MiB again");
  });
}

TEST_CASE("collectives: registered alltoall with the default options, several MiB, 4 ranks") {
  fxc::with_comm(4, fabrix::coll::options{}, [](fxc::comm_t& comm, int rank, int) {
    const std::size_t block = (std::size_t{1} << 18) + 3;  // pieces of 1 MiB and a bit
    std::vector<float> in(block * 4), out(block * 4, -1.0f);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = fxc::value<float>(rank, i, 21);
    auto reg_in = fxt::must(comm.register_memory(std::span(in)), "register input");
    auto reg_out = fxt::must(comm.register_memory(std::span(out)), "register output");
    const std::uint64_t before = comm.direct_chunks();
    fxc::check_ok(fabrix::coll::alltoall(comm, std::span<const float>(in), std::span(out)), "alltoall");
    FX_CHECK(comm.direct_chunks() > before);
    // Block p of the output is block `rank` of rank p's input.
    fxc::expect_elements(
        out,
        [&](std::size_t i) {
          return fxc::value<float>(static_cast<int>(i / block), static_cast<std::size_t>(rank) * block + i % block, 21);
        },
        "alltoall of 4 MiB");
  });
}

TEST_CASE("collectives: allreduce and alltoall on allocated buffers with the default options, several MiB, 4 ranks") {
  fxc::with_comm(4, fabrix::coll::options{}, [](fxc::comm_t& comm, int rank, int n) {
    const std::size_t count = (std::size_t{1} << 20) + 7;
    auto in_mem = fxt::must(comm.allocate_memory(count * sizeof(float)), "allocate input");
    auto out_mem = fxt::must(comm.allocate_memory(count * sizeof(float)), "allocate output");
    const std::span<float> in = in_mem.as<float>(), out = out_mem.as<float>();
    FX_CHECK(in.size() == count);
    FX_CHECK(out.size() == count);
    for (std::size_t i = 0; i < count; ++i) in[i] = fxc::value<float>(rank, i, 31);
    std::fill(out.begin(), out.end(), -1.0f);
    std::uint64_t before = comm.direct_chunks();
    fxc::check_ok(fabrix::coll::allreduce(comm, std::span<const float>(in), out, reduce_op::sum), "allreduce");
    FX_CHECK(comm.direct_chunks() > before);
    fxc::expect_elements(
        std::vector<float>(out.begin(), out.end()),
        [&](std::size_t i) { return fxc::reference<float>(n, i, reduce_op::sum, 31); }, "allocated allreduce");
    const std::size_t block = count / 4;
    before = comm.direct_chunks();
    fxc::check_ok(fabrix::coll::alltoall(comm, std::span<const float>(in.first(4 * block)), out.first(4 * block)),
                  "alltoall");
    FX_CHECK(comm.direct_chunks() > before);
    fxc::expect_elements(
        std::vector<float>(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(4 * block)),
        [&](std::size_t i) {
          return fxc::value<float>(static_cast<int>(i / block), static_cast<std::size_t>(rank) * block + i % block, 31);
        },
        "allocated alltoall");
  });
}

TEST_CASE("collectives: a peer's bad output address fails the call, writes nothing") {
  const std::uint64_t call = 4096 * sizeof(double);
  SUBCASE("malformed") {
    broken_neighbour(
        [](fxc::comm_t&, std::byte* slot, std::vector<double>&) {
          std::memset(slot, 0x5a, 40);
          return std::size_t{40};
        },
        "malformed");
  }
  SUBCASE("truncated key") {
    broken_neighbour(
        [&](fxc::comm_t& comm, std::byte* slot, std::vector<double>& v) {
          auto* mr = comm.registered(v.data(), call);
          return honest(comm, slot, 0, call, mr->remote()) - 20;
        },
        "unusable output address");
  }
  SUBCASE("a range outside the registration") {
    broken_neighbour(
        [&](fxc::comm_t& comm, std::byte* slot, std::vector<double>& v) {
          auto* mr = comm.registered(v.data(), call);
          return honest(comm, slot, 64, call, mr->remote());
        },
        "outside its registration");
  }
  SUBCASE("another call size") {
    broken_neighbour(
        [&](fxc::comm_t& comm, std::byte* slot, std::vector<double>& v) {
          auto* mr = comm.registered(v.data(), call);
          return honest(comm, slot, 0, call - 8, mr->remote());
        },
        "mismatched collective calls");
  }
  SUBCASE("alltoall: another piece size") {
    // Rank 0 sends rank 1 a piece of 2048 doubles and waits for where to put it.
    broken_neighbour(
        [&](fxc::comm_t& comm, std::byte* slot, std::vector<double>& v) {
          auto* mr = comm.registered(v.data(), call);
          return honest(comm, slot, 0, call / 2 - 8, mr->remote());
        },
        "mismatched collective calls",
        [](fxc::comm_t& comm, std::vector<double>& v) {
          std::vector<double> out(v.size(), 7.0);
          auto r = fabrix::coll::alltoall(comm, std::span<const double>(v), std::span(out));
          FX_CHECK(std::all_of(out.begin() + 2048, out.end(), [](double x) { return x == 7.0; }));  // rank 1's block
          return r;
        });
  }
}

TEST_CASE("collectives: a registration handle that outlives its communicator is empty, not dangling") {
  fxt::run_ranks(2, [](int, fabrix::bootstrap& boot) {
    auto dom = fxt::open_static();
    std::vector<double> v(1024, 1.0);
    fabrix::coll::registered_memory<fxc::P> reg;
    {
      auto comm = fxt::must(fxc::comm_t::create(dom, boot, zero_copy_chunks()), "communicator::create");
      reg = fxt::must(comm.register_memory(std::span(v)), "register");
      FX_CHECK(comm.registered(v.data(), v.size() * sizeof(double)) != nullptr);
      fxc::check_ok(fabrix::coll::allreduce(comm, std::span<double>(v), reduce_op::sum), "allreduce");
      (void)boot.barrier();
    }
    reg.reset();  // the communicator (and its registrations) are gone: nothing to do, nothing touched
    FX_CHECK(v[0] == 2.0);
  });
}

TEST_CASE("collectives: allocated memory is there while its handle and communicator are, and then empty") {
  fxt::run_ranks(2, [](int, fabrix::bootstrap& boot) {
    auto dom = fxt::open_static();
    fabrix::coll::registered_memory<fxc::P> kept;
    {
      auto comm = fxt::must(fxc::comm_t::create(dom, boot, zero_copy_chunks()), "communicator::create");
      auto empty = comm.allocate_memory(0);
      FX_CHECK(!empty);
      FX_CHECK(empty.code() == fabrix::status::invalid_argument);
      auto mem = fxt::must(comm.allocate_memory(3000 * sizeof(double)), "allocate");
      const std::span<double> v = mem.as<double>();
      FX_CHECK(v.size() == 3000);
      FX_CHECK(mem.bytes().size() == 3000 * sizeof(double));
      FX_CHECK(comm.registered(v.data(), v.size_bytes()) != nullptr);
      std::fill(v.begin(), v.end(), 1.5);
      fxc::check_ok(fabrix::coll::allreduce(comm, v, reduce_op::sum), "allreduce");
      FX_CHECK(std::all_of(v.begin(), v.end(), [](double x) { return x == 3.0; }));
      mem.reset();  // freed: the handle is empty, the communicator forgets it
      FX_CHECK(mem.bytes().empty());
      kept = fxt::must(comm.allocate_memory(64), "allocate");
      FX_CHECK(kept.bytes().size() == 64);
      (void)boot.barrier();
    }
    FX_CHECK(kept.bytes().empty());  // freed with its communicator
    kept.reset();
  });
}
