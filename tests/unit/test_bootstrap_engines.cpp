// The bootstrap engines (bootstrap_engine.hpp) that run without a launcher:
// bootstrap::from_callbacks over an in-process fake store — the ranks are
// threads of this process, each with its own bootstrap, whose callbacks
// start and test fixed-size allgathers on one shared store (what a
// framework's key-value service would do across processes) — and
// from_env's choice of engine. (PMIx and MPI run under mpirun: tests/mpi.)
#include <doctest/doctest.h>

#include <fabrix/bootstrap.hpp>

#include "child_process.hpp"

#include <cstdlib>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using fabrix::bootstrap;
using fabrix::bootstrap_callbacks;
using fabrix::bootstrap_options;
using fabrix::result;
using fabrix::status;

namespace {

// Rounds of fixed-size allgathers: each rank's n-th start joins round n.
class fake_store {
 public:
  explicit fake_store(int size) : size_(size), next_round_(static_cast<std::size_t>(size)) {}

  bootstrap_callbacks callbacks_for(int rank) {
    bootstrap_callbacks cb;
    cb.rank = rank;
    cb.size = size_;
    cb.name = "fake store";
    cb.allgather_start = [this, rank](const std::byte* mine, std::byte* out, std::size_t bytes) -> result<void*> {
      const std::lock_guard<std::mutex> hold(m_);
      const int n = next_round_[static_cast<std::size_t>(rank)]++;
      round& r = rounds_[n];
      r.parts.resize(static_cast<std::size_t>(size_));
      r.parts[static_cast<std::size_t>(rank)].assign(mine, mine + bytes);
      ++r.arrived;
      return static_cast<void*>(new request{n, out, bytes});
    };
    cb.test = [this](void* p) -> result<bool> {
      auto* req = static_cast<request*>(p);
      if (fail_tests) return fabrix::unexpected(status::peer_unreachable, "the store went away", "fake store");
      const std::lock_guard<std::mutex> hold(m_);
      const round& r = rounds_[req->round];
      if (r.arrived < size_) return false;
      for (std::size_t i = 0; i < r.parts.size(); ++i) {
        if (r.parts[i].size() != req->bytes)  // fabrix starts the same size on every rank
          return fabrix::unexpected(status::invalid_argument, "ranks started different sizes", "fake store");
        std::memcpy(req->out + i * req->bytes, r.parts[i].data(), req->bytes);
      }
      return true;
    };
    cb.release = [this](void* p, bool finished) {
      if (!finished) ++released_unfinished;
      delete static_cast<request*>(p);
    };
    return cb;
  }

  std::atomic<bool> fail_tests{false};
  std::atomic<int> released_unfinished{0};

 private:
  struct request {
    int round;
    std::byte* out;
    std::size_t bytes;
  };
  struct round {
    std::vector<std::vector<std::byte>> parts;
    int arrived = 0;
  };
  int size_;
  std::mutex m_;
  std::map<int, round> rounds_;
  std::vector<int> next_round_;
};

std::vector<std::byte> blob_of(int rank, std::size_t bytes) {
  std::vector<std::byte> b(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    b[i] = static_cast<std::byte>((i * 131 + static_cast<std::size_t>(rank) * 7) & 0xff);
  return b;
}

// Runs body(rank, bootstrap) on `n` threads; returns each thread's failure text ("" when it passed).
std::vector<std::string> run_threads(int n, fake_store& store, const bootstrap_options& opts,
                                     const std::function<std::string(int, bootstrap&)>& body) {
  std::vector<std::string> failures(static_cast<std::size_t>(n));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back([&, r] {
      auto b = bootstrap::from_callbacks(store.callbacks_for(r), opts);
      if (!b) {
        failures[static_cast<std::size_t>(r)] = "from_callbacks: " + b.error().describe();
        return;
      }
      failures[static_cast<std::size_t>(r)] = body(r, *b);
    });
  }
  for (auto& t : ranks) t.join();
  return failures;
}

}  // namespace

TEST_CASE("callbacks bootstrap: 4 thread ranks allgather blobs of 0 B to 1 MiB and barrier, every byte checked") {
  constexpr int n = 4;
  fake_store store(n);
  const auto failures = run_threads(n, store, {}, [](int rank, bootstrap& b) -> std::string {
    if (b.rank() != rank || b.size() != n) return "rank/size";
    if (b.describe().find("fake store") == std::string::npos) return "describe: " + b.describe();
    for (std::size_t base : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{1} << 20}) {
      // Sizes differ per rank (rank 0 gives `base`, rank r base + r*13).
      const auto mine = blob_of(rank, base + static_cast<std::size_t>(rank) * 13);
      auto all = b.allgather(mine);
      if (!all) return "allgather: " + all.error().describe();
      if (all->size() != n) return "allgather returned " + std::to_string(all->size()) + " blobs";
      for (int r = 0; r < n; ++r)
        if ((*all)[static_cast<std::size_t>(r)] != blob_of(r, base + static_cast<std::size_t>(r) * 13))
          return "blob of rank " + std::to_string(r) + " differs";
      if (auto ok = b.barrier(); !ok) return "barrier: " + ok.error().describe();
    }
    return "";
  });
  for (int r = 0; r < n; ++r) CHECK_MESSAGE(failures[static_cast<std::size_t>(r)] == "", "rank " << r);
}

TEST_CASE("callbacks bootstrap: ranks calling different collectives fail on every rank, naming both") {
  constexpr int n = 3;
  fake_store store(n);
  const auto failures = run_threads(n, store, {}, [](int rank, bootstrap& b) -> std::string {
    if (auto ok = b.barrier(); !ok) return "first barrier: " + ok.error().describe();
    const auto mine = blob_of(rank, 10);
    auto r = rank == 1 ? fabrix::result<void>(b.barrier()) : fabrix::result<void>();
    if (rank != 1) {
      auto all = b.allgather(mine);
      if (all) return "the allgather beside a barrier succeeded";
      r = fabrix::unexpected(all.error());
    }
    if (r) return "the barrier beside allgathers succeeded";
    if (r.code() != status::invalid_argument) return "status " + std::string(fabrix::to_string(r.code()));
    const std::string& m = r.error().message;
    if (m.find("mismatch") == std::string::npos || m.find("barrier #2") == std::string::npos ||
        m.find("allgather #1") == std::string::npos)
      return "message: " + m;
    // The object stays failed.
    if (b.barrier().code() != status::invalid_argument) return "a later call did not return the same error";
    return "";
  });
  for (int r = 0; r < n; ++r) CHECK_MESSAGE(failures[static_cast<std::size_t>(r)] == "", "rank " << r);
}

TEST_CASE("callbacks bootstrap: a rank that never calls: the others time out, driving progress while they wait") {
  constexpr int n = 3;
  fake_store store(n);
  bootstrap_options opts;
  opts.op_timeout = 400ms;
  std::atomic<int> progress_calls{0};
  opts.progress = [&progress_calls] { ++progress_calls; };
  const auto failures = run_threads(n, store, opts, [](int rank, bootstrap& b) -> std::string {
    if (rank == 2) return "";  // never calls
    const auto t0 = std::chrono::steady_clock::now();
    auto all = b.allgather(blob_of(rank, 5));
    const auto took = std::chrono::steady_clock::now() - t0;
    if (all) return "allgather succeeded without rank 2";
    if (all.code() != status::timed_out) return "status " + std::string(fabrix::to_string(all.code()));
    if (all.error().message.find("400 ms") == std::string::npos) return "message: " + all.error().message;
    if (took < 390ms || took > 10s) return "took " + std::to_string(took.count()) + " ns";
    return "";
  });
  for (int r = 0; r < n; ++r) CHECK_MESSAGE(failures[static_cast<std::size_t>(r)] == "", "rank " << r);
  CHECK(progress_calls > 10);             // about every 2 ms for 0.4 s, on two ranks
  CHECK(store.released_unfinished == 2);  // each waiting rank gave its request back
}

TEST_CASE("callbacks bootstrap: a failing test() fails the call with its message; later calls return it") {
  fake_store store(2);
  store.fail_tests = true;
  const auto failures = run_threads(2, store, {}, [](int, bootstrap& b) -> std::string {
    auto ok = b.barrier();
    if (ok) return "barrier succeeded";
    if (ok.code() != status::peer_unreachable) return "status " + std::string(fabrix::to_string(ok.code()));
    if (ok.error().message.find("the store went away") == std::string::npos) return "message: " + ok.error().message;
    if (b.allgather(blob_of(0, 3)).code() != status::peer_unreachable) return "later call";
    return "";
  });
  CHECK(failures[0] == "");
  CHECK(failures[1] == "");
}

TEST_CASE("callbacks bootstrap: argument checks, a job of one, and no re-entry from the progress callback") {
  bootstrap_callbacks none;
  none.size = 2;
  CHECK(bootstrap::from_callbacks(none).code() == status::invalid_argument);  // no callbacks
  fake_store store(2);
  auto bad = store.callbacks_for(0);
  bad.rank = 2;
  CHECK(bootstrap::from_callbacks(bad).code() == status::invalid_argument);
  bad.rank = -1;
  CHECK(bootstrap::from_callbacks(bad).code() == status::invalid_argument);

  bootstrap_callbacks solo;  // rank 0 of 1: nothing to call
  auto one = bootstrap::from_callbacks(solo);
  REQUIRE(one);
  auto all = one->allgather(blob_of(0, 9));
  REQUIRE(all);
  CHECK(all->size() == 1);
  CHECK((*all)[0] == blob_of(0, 9));
  CHECK(one->barrier());

  // A progress callback that calls the bootstrap is refused (invalid_argument), the call goes on.
  fake_store pair(2);
  const auto failures = run_threads(2, pair, {}, [](int rank, bootstrap& b) -> std::string {
    if (rank == 1) std::this_thread::sleep_for(50ms);  // rank 0 waits, and calls its progress meanwhile
    fabrix::status inner = status::ok;
    const std::function<void()> progress = [&] {
      if (inner == status::ok) inner = b.barrier().code();
    };
    if (auto ok = b.barrier(progress); !ok) return "barrier: " + ok.error().describe();
    if (rank == 0 && inner != status::invalid_argument) return "re-entry gave " + std::string(fabrix::to_string(inner));
    return "";
  });
  CHECK(failures[0] == "");
  CHECK(failures[1] == "");
}

// from_env's choice, in a child process each (the environment is changed,
// and a failed PMIx_Init may leave state behind that this process keeps).
TEST_CASE("from_env picks the engine: FABRIX_BOOTSTRAP_ENGINE, else PMIx under a PMIx launcher, else the TCP store") {
  const auto in_child = [](const std::function<int()>& body) { return fxt_child::reap(fxt_child::spawn(body), 20s); };
  const auto clear = [] {
    for (const char* v : {"FABRIX_BOOTSTRAP_ENGINE", "FABRIX_RANK", "FABRIX_SIZE", "FABRIX_BOOTSTRAP", "PMIX_NAMESPACE",
                          "PMIX_RANK", "PMIX_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                          "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS"})
      ::unsetenv(v);
  };
  CHECK(in_child([&] {
          clear();
          ::setenv("FABRIX_BOOTSTRAP_ENGINE", "bogus", 1);
          auto b = bootstrap::from_env();
          CHILD_CHECK(0, b.code() == status::invalid_argument);
          CHILD_CHECK(0, b.error().message.find("FABRIX_BOOTSTRAP_ENGINE=bogus") != std::string::npos);
          return 0;
        }) == 0);
  CHECK(in_child([&] {  // asked for PMIx, but no launcher started this process
          clear();
          ::setenv("FABRIX_BOOTSTRAP_ENGINE", "pmix", 1);
          auto b = bootstrap::from_env();
          CHILD_CHECK(0, b.code() == status::unsupported);
          CHILD_CHECK(0, b.error().message.find("PMIx") != std::string::npos);
          return 0;
        }) == 0);
  CHECK(in_child([&] {  // PMIx variables without a server behind them: the TCP store
          clear();
          ::setenv("PMIX_NAMESPACE", "not-a-job", 1);
          ::setenv("PMIX_RANK", "0", 1);
          ::setenv("PMIX_SIZE", "1", 1);
          auto b = bootstrap::from_env();
          CHILD_CHECK(0, b.has_value());
          CHILD_CHECK(0, b->size() == 1);
          CHILD_CHECK(0, b->describe().find("tcp store") != std::string::npos);
          return 0;
        }) == 0);
  CHECK(in_child([&] {  // nothing set: a job of one, TCP store, no socket
          clear();
          auto b = bootstrap::from_env();
          CHILD_CHECK(0, b.has_value());
          CHILD_CHECK(0, b->rank() == 0 && b->size() == 1);
          CHILD_CHECK(0, b->describe().find("tcp store") != std::string::npos);
          CHILD_CHECK(0, b->barrier().has_value());
          return 0;
        }) == 0);
}
