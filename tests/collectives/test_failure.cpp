// Failures: a rank killed mid-collective, a rank that never calls, ranks
// that disagree about the options or the size.
#include "common.hpp"

#include <sys/mman.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <span>
#include <string_view>
#include <thread>

namespace {

using clock_type = std::chrono::steady_clock;

// Whether the victim must die between two of its calls rather than at a
// random instant: libfabric 1.17's shm sends under a spin lock kept in the
// target's shared region, and a process killed holding it wedges every
// later sender to that target inside libfabric (providers/ofi/README.md,
// "A peer killed inside libfabric's shm send path"). Its peers are still
// mid-allreduce when it dies either way.
bool kill_between_calls() {
  const char* t = std::getenv("FABRIX_TEST_TRANSPORT");
  return std::string_view(fxt::provider_name) == "ofi" && t != nullptr && std::string_view(t) == "shm";
}

// Ranks other than `victim` loop on an allreduce of `elems` floats until
// one fails; the failure must come well before the collective timeout and
// name a lost peer. The timeout (30 s) stays below the rank limit (90 s),
// so a failure that was never detected reads as timed_out, not as a killed
// rank. The sizes are about failure, not volume: under TSan, libfabric's
// shm moves a few MB/s, and 4 MiB in 264-byte chunks took most of the rank
// limit on a loaded machine.
void survive_a_kill(int n, int victim, fabrix::coll::options o, std::size_t elems) {
  o.timeout = std::chrono::seconds(30);
  const bool at_a_boundary = kill_between_calls();
  // Survivors leave together (counted in memory shared by the forked ranks),
  // so that each closes its endpoints while the others still poll: a UCX
  // endpoint to a same-node peer closes only with that peer's help.
  void* shared = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  auto* done = static_cast<std::atomic<int>*>(shared);
  done->store(0);
  auto leave_together = [done, n] {
    done->fetch_add(1);
    const auto until = clock_type::now() + std::chrono::seconds(10);
    while (done->load() < n - 1 && clock_type::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  fxc::with_comm(
      n, o,
      [victim, elems, at_a_boundary, &leave_together](fxc::comm_t& comm, int rank, int) {
        std::vector<float> x(elems);
        for (std::size_t i = 0; i < x.size(); ++i) x[i] = fxc::value<float>(rank, i);
        fxc::check_ok(fabrix::coll::allreduce(comm, std::span<float>(x), fxc::reduce_op::max), "first allreduce");
        static std::atomic<bool> time_to_die{false};  // this rank's own copy (forked)
        if (rank == victim) {
          std::thread([at_a_boundary] {
            std::this_thread::sleep_for(std::chrono::milliseconds(150));
            if (!at_a_boundary) std::raise(SIGKILL);
            time_to_die = true;
          }).detach();
        }
        for (int i = 0; i < 100000; ++i) {
          if (rank == victim && time_to_die) std::raise(SIGKILL);
          const auto start = clock_type::now();
          auto r = fabrix::coll::allreduce(comm, std::span<float>(x), fxc::reduce_op::max);
          if (r) continue;
          const auto took = clock_type::now() - start;
          FX_CHECK(r.code() == fabrix::status::peer_unreachable);
          FX_CHECK(took < std::chrono::seconds(10));
          // Broken for good: later calls fail at once with the same error.
          FX_CHECK(comm.barrier().code() == fabrix::status::peer_unreachable);
          leave_together();
          return;
        }
        fxt::rank_fail("no allreduce failed although a rank was killed", __FILE__, __LINE__);
      },
      std::chrono::seconds(90), [victim](int r) { return r == victim ? fxt::ending::killed : fxt::ending::exit_ok; });
  ::munmap(shared, 4096);
}

}  // namespace

TEST_CASE("collectives: a rank killed mid-allreduce makes the others fail fast") {
  // UCX 1.13 emulates put over tcp in software; when the initiator of such a
  // put dies mid-transfer, the target's ucp_put_handler cannot send its
  // reply and UCX aborts the target process ("Fatal: unexpected error:
  // Endpoint timeout", seen in about one run in five here). That is UCX
  // killing the survivor, not something fabrix can report, so meson.build
  // leaves this case out of the tcp entry (it runs on shared memory).
  SUBCASE("4 ranks, small chunks") { survive_a_kill(4, 2, fxc::small_chunks(), std::size_t{1} << 14); }
  SUBCASE("3 ranks, default chunks") { survive_a_kill(3, 0, fabrix::coll::options{}, std::size_t{1} << 18); }
}

TEST_CASE("collectives: a rank that never calls makes the others time out") {
  auto o = fxc::small_chunks();
  o.timeout = std::chrono::milliseconds(1500);
  fxc::with_comm(3, o, [](fxc::comm_t& comm, int rank, int) {
    std::vector<std::int32_t> x(1000, rank);
    if (rank == 1) {  // alive but late: joins after the others gave up
      std::this_thread::sleep_for(std::chrono::seconds(3));
      // It fails too: at once when the others' abort notifications reached it,
      // else after its own timeout (they may need the others' progress to leave).
      const auto start = clock_type::now();
      auto r = fabrix::coll::allreduce(comm, std::span<std::int32_t>(x), fxc::reduce_op::sum);
      FX_CHECK((r.code() == fabrix::status::peer_unreachable || r.code() == fabrix::status::timed_out));
      FX_CHECK(clock_type::now() - start < std::chrono::milliseconds(2500));
      return;
    }
    const auto start = clock_type::now();
    auto r = fabrix::coll::allreduce(comm, std::span<std::int32_t>(x), fxc::reduce_op::sum);
    const auto took = clock_type::now() - start;
    FX_CHECK(!r);
    // The neighbour that waits for rank 1 times out; the other may hear its abort first.
    FX_CHECK((r.code() == fabrix::status::timed_out || r.code() == fabrix::status::peer_unreachable));
    FX_CHECK(took < std::chrono::seconds(4));
  });
}

TEST_CASE("collectives: ranks that disagree are refused, never corrupted") {
  SUBCASE("different chunk sizes at create") {
    fxt::run_ranks(2, [](int rank, fabrix::bootstrap& boot) {
      auto dom = fxt::open_static();
      auto o = fxc::small_chunks();
      if (rank == 1) o.chunk_bytes = 512;
      auto comm = fxc::comm_t::create(dom, boot, o);
      FX_CHECK(!comm);
      FX_CHECK(comm.code() == fabrix::status::invalid_argument);
    });
  }
  SUBCASE("different allgather sizes") {
    fxc::with_comm(2, fxc::small_chunks(), [](fxc::comm_t& comm, int rank, int) {
      std::vector<std::int64_t> in(rank == 0 ? 10 : 11, 1), out(in.size() * 2);
      auto r = fabrix::coll::allgather(comm, std::span<const std::int64_t>(in), std::span<std::int64_t>(out));
      FX_CHECK(!r);
      FX_CHECK(r.code() == fabrix::status::invalid_argument || r.code() == fabrix::status::peer_unreachable);
    });
  }
  SUBCASE("bad arguments") {
    fxc::with_comm(2, fxc::small_chunks(), [](fxc::comm_t& comm, int, int) {
      std::vector<double> a(10), b(11);
      FX_CHECK(
          fabrix::coll::allreduce(comm, std::span<const double>(a), std::span<double>(b), fxc::reduce_op::sum).code() ==
          fabrix::status::invalid_argument);
      FX_CHECK(fabrix::coll::allreduce(comm, std::span<double>(a), fxc::reduce_op::sum,
                                       fabrix::memory_location{fabrix::memory_kind::cuda_device, 0})
                   .code() == fabrix::status::unsupported);
      // The communicator still works after refused arguments.
      fxc::check_ok(fabrix::coll::allreduce(comm, std::span<double>(a), fxc::reduce_op::sum), "allreduce");
    });
  }
}
