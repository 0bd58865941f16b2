// A consumer of the collectives (fabrix-coll) on the UCX provider
// (fabrix-ucx): forms a real 2-rank job in one invocation and checks the
// results. Rank 0 listens on 127.0.0.1 (a free port), then forks; the child
// is rank 1. Each rank opens a UCX domain over tcp and a
// fabrix::coll::communicator on it, then:
//   1. allreduce (sum) of 100003 int64 in place, in memory the communicator
//      allocated (the ring, above direct_allreduce_bytes), every element
//      checked;
//   2. allreduce (sum) of 1000 int64 from a plain vector into another (the
//      one-hop exchange, below direct_allreduce_bytes), every element
//      checked;
//   3. a barrier.
// Every wait is bounded (bootstrap and communicator timeouts of 10 s); the
// parent reaps the child within 30 s (then kills it). Exits 1 with a
// "coll_allreduce: FAIL: ..." message when either rank failed.
//
// tests/consume builds it from an installed prefix via pkg-config
// (fabrix-coll.pc with fabrix-ucx.pc), CMake (fabrix::coll with fabrix::ucx)
// and a Meson subproject (dependency('fabrix-coll'), dependency('fabrix-ucx')).
#include <fabrix/collectives.hpp>
#include <fabrix/fabrix.hpp>
#include <fabrix/ucx.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace coll = fabrix::coll;
using comm_t = coll::communicator<fabrix::ucx::provider>;

constexpr const char* me = "coll_allreduce";
constexpr const char* job_token = "fabrix-consume-coll";
constexpr std::size_t large_count = 100003;  // 800 KB: the ring, with zero-copy
constexpr std::size_t small_count = 1000;    // 8000 bytes: the one-hop exchange
constexpr std::chrono::seconds child_limit{30};

int fail(int rank, const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "%s: FAIL: rank %d: %s%s%s\n", me, rank, what, detail.empty() ? "" : ": ", detail.c_str());
  return 1;
}

fabrix::bootstrap_options bootstrap_opts() {
  fabrix::bootstrap_options o;
  o.connect_timeout = std::chrono::seconds(10);
  o.op_timeout = std::chrono::seconds(10);
  return o;
}

// Rank r's element i, and the sum over both ranks: int64 values past 2^32.
std::int64_t value(int rank, std::size_t i) {
  return (rank + 1) * static_cast<std::int64_t>(i) + (std::int64_t{rank} << 40);
}
std::int64_t expected_sum(std::size_t i) { return value(0, i) + value(1, i); }

// The index of the first element of `x` that is not the sum, or x.size().
std::size_t first_wrong(std::span<const std::int64_t> x) {
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i] != expected_sum(i)) return i;
  return x.size();
}

std::string mismatch(std::span<const std::int64_t> x, std::size_t i) {
  return "element " + std::to_string(i) + " is " + std::to_string(x[i]) + ", expected " +
         std::to_string(expected_sum(i));
}

// 1. The large allreduce, in place in memory the communicator allocated.
int large_allreduce(comm_t& comm) {
  const int rank = comm.rank();
  auto mem = comm.allocate_memory(large_count * sizeof(std::int64_t));
  if (!mem) return fail(rank, "allocate_memory", mem.error().describe());
  const std::span<std::int64_t> x = mem->as<std::int64_t>().first(large_count);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = value(rank, i);
  if (auto r = coll::allreduce(comm, x, coll::reduce_op::sum); !r)
    return fail(rank, "allreduce of 100003 int64", r.error().describe());
  if (const std::size_t i = first_wrong(x); i != x.size())
    return fail(rank, "allreduce of 100003 int64", mismatch(x, i));
  return 0;
}

// 2. The small allreduce, from one plain vector into another.
int small_allreduce(comm_t& comm) {
  const int rank = comm.rank();
  std::vector<std::int64_t> in(small_count), out(small_count, -1);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = value(rank, i);
  if (in.size() * sizeof(std::int64_t) > comm.opts().direct_allreduce_bytes)
    return fail(rank, "the small allreduce is not below direct_allreduce_bytes");
  if (auto r = coll::allreduce(comm, std::span<const std::int64_t>(in), std::span(out), coll::reduce_op::sum); !r)
    return fail(rank, "allreduce of 1000 int64", r.error().describe());
  if (const std::size_t i = first_wrong(out); i != out.size())
    return fail(rank, "allreduce of 1000 int64", mismatch(out, i));
  return 0;
}

// One rank's whole part, on its bootstrap: 0 when every check passed.
int run_rank(int rank, fabrix::result<fabrix::bootstrap> boot) {
  if (!boot) return fail(rank, "bootstrap", boot.error().describe());
  if (boot->rank() != rank || boot->size() != 2) return fail(rank, "bootstrap: wrong rank or size");
  fabrix::domain_options dopts;
  dopts.transport = "tcp";
  auto dom = fabrix::ucx::domain::create(dopts);
  if (!dom) return fail(rank, "ucx domain::create", dom.error().describe());
  coll::options opts;
  opts.timeout = std::chrono::seconds(10);  // a dead peer makes calls fail, never hang
  auto comm = comm_t::create(*dom, *boot, opts);
  if (!comm) return fail(rank, "communicator::create", comm.error().describe());
  if (comm->rank() != rank || comm->size() != 2) return fail(rank, "communicator: wrong rank or size");

  if (int rc = large_allreduce(*comm); rc != 0) return rc;
  if (int rc = small_allreduce(*comm); rc != 0) return rc;
  if (auto r = comm->barrier(); !r) return fail(rank, "barrier", r.error().describe());
  if (rank == 0) std::printf("%s: %s\n", me, dom->describe().c_str());
  // Both ranks live: leave together, so that neither closes its endpoints
  // while the other still needs them (the communicator, then the domain,
  // are destroyed on return).
  if (auto r = boot->barrier(); !r) return fail(rank, "bootstrap barrier", r.error().describe());
  return 0;
}

// The child's exit code, or a message saying why there is none (killed when
// still running at `until`).
bool reap(pid_t pid, std::chrono::steady_clock::time_point until, int& code, std::string& why) {
  for (;;) {
    int st = 0;
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(st)) {
        code = WEXITSTATUS(st);
        return true;
      }
      why = WIFSIGNALED(st) ? "killed by signal " + std::to_string(WTERMSIG(st)) : "ended abnormally";
      return false;
    }
    if (r < 0) {
      why = "waitpid failed";
      return false;
    }
    if (std::chrono::steady_clock::now() >= until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      why = "still running after " + std::to_string(child_limit.count()) + " s, killed";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

int main() {
  const auto start = std::chrono::steady_clock::now();
  auto root = fabrix::bootstrap::listen(2, "127.0.0.1:0", job_token, bootstrap_opts());
  if (!root) return fail(0, "bootstrap::listen", root.error().describe());
  const std::string where = "127.0.0.1:" + std::to_string(root->port());

  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) return fail(0, "fork");
  if (child == 0) {
    { auto drop = std::move(*root); }  // rank 1 does not listen: close its copy of the socket
    const int rc = run_rank(1, fabrix::bootstrap::create(1, 2, where, job_token, bootstrap_opts()));
    std::fflush(nullptr);
    ::_exit(rc);
  }

  const int rc0 = run_rank(0, root->accept());
  int rc1 = -1;
  std::string why;
  const bool reaped = reap(child, start + child_limit, rc1, why);
  if (!reaped) std::fprintf(stderr, "%s: FAIL: rank 1 (pid %d): %s\n", me, static_cast<int>(child), why.c_str());
  if (reaped && rc1 != 0) std::fprintf(stderr, "%s: FAIL: rank 1 exited with status %d\n", me, rc1);
  if (rc0 != 0 || !reaped || rc1 != 0) return 1;

  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: ok (2 ranks: allreduce sum of %zu and %zu int64, every element checked; barrier; %lld ms)\n", me,
              large_count, small_count, static_cast<long long>(ms));
  return 0;
}
