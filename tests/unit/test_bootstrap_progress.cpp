// Hardening item 15: a rank waiting in the bootstrap keeps its domain
// progressing when given a progress callback. UCX over tcp emulates RMA in
// software (P::caps.needs_target_progress): a peer's read of this rank's
// memory completes only while this rank polls. Rank 1 reads rank 0's buffer
// while rank 0 sits in a barrier, and enters that barrier only once its read
// has completed: without the callback the read stalls (shown below, bounded
// to a second); with fabrix::bootstrap_progress it completes at once.
// Two forked processes on the loopback; a child reports by exit code.
#include <doctest/doctest.h>

#include <fabrix/connect.hpp>
#include <fabrix/ucx.hpp>

#include "child_process.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

using fxt_child::report;
using fxt_child::spawn;
int reap(pid_t pid, std::chrono::milliseconds limit = 30s) { return fxt_child::reap(pid, limit); }

constexpr std::size_t buffer_bytes = 64 * 1024;
constexpr std::uint64_t read_token = 77;

std::byte pattern(std::size_t i) { return static_cast<std::byte>((i * 7 + 3) & 0xff); }

// Polls until the read's completion arrives or `limit` passes; true when it arrived.
bool wait_read(fabrix::ucx::domain& dom, std::chrono::milliseconds limit, fabrix::status& got) {
  const auto until = steady::now() + limit;
  std::array<fabrix::completion, 16> cs;
  while (steady::now() < until) {
    const std::size_t n = dom.poll(cs);
    for (std::size_t i = 0; i < n; ++i) {
      if (cs[i].token != read_token) continue;
      got = cs[i].status;
      return true;
    }
    std::this_thread::sleep_for(100us);
  }
  return false;
}

// with_hook: rank 0 waits in its barrier with fabrix::bootstrap_progress.
int run_rank(int rank, fabrix::bootstrap& boot, bool with_hook) {
  fabrix::domain_options dopts;
  dopts.transport = "tcp";
  auto dom = fabrix::ucx::domain::create(dopts);
  if (!report(rank, dom, "domain")) return 1;
  std::vector<std::byte> buf(buffer_bytes);
  if (rank == 0)
    for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = pattern(i);
  auto mr = dom->register_memory(buf, fabrix::access::remote_read);
  if (!report(rank, mr, "register_memory")) return 1;
  std::vector<fabrix::completion> polled;  // what the progress callback polled: kept, never dropped
  auto qps = fabrix::connect_all(*dom, boot, polled);
  if (!report(rank, qps, "connect_all")) return 1;
  auto peers = fabrix::exchange(boot, mr->remote(), *dom, polled);
  if (!report(rank, peers, "exchange")) return 1;

  if (rank == 0) {
    const auto t0 = steady::now();
    auto b = with_hook ? boot.barrier(fabrix::bootstrap_progress(*dom, polled)) : boot.barrier();
    if (!report(0, b, "barrier while rank 1 reads")) return 1;
    std::fprintf(stderr, "rank 0 (%s): barrier took %.3f s\n", with_hook ? "hook" : "no hook",
                 std::chrono::duration<double>(steady::now() - t0).count());
    // Serve rank 1 until it is done (it reads here in the run without the hook).
    auto b2 = boot.barrier(fabrix::bootstrap_progress(*dom, polled));
    if (!report(0, b2, "final barrier")) return 1;
    for (const auto& c : polled) CHILD_CHECK(0, c.status == fabrix::status::ok);
    return 0;
  }

  std::fill(buf.begin(), buf.end(), std::byte{0});
  const auto t0 = steady::now();
  const auto posted = (*qps)[0].read(mr->slice(0, buffer_bytes), (*peers)[0].slice(0, buffer_bytes), read_token);
  CHILD_CHECK(1, posted == fabrix::status::ok);
  fabrix::status st = fabrix::status::in_progress;
  if (with_hook) {
    // Rank 0 is in its barrier (it cannot leave before we join), yet serves the read.
    const bool done = wait_read(*dom, 3000ms, st);
    std::fprintf(stderr, "rank 1 (hook): read %s after %.3f s while rank 0 waited in the barrier\n",
                 done ? "completed" : "DID NOT complete", std::chrono::duration<double>(steady::now() - t0).count());
    CHILD_CHECK(1, done);
    if (!report(1, boot.barrier(), "barrier")) return 1;
  } else {
    // The stall this fixes: no completion while rank 0 sits in its barrier.
    const bool done = wait_read(*dom, 1000ms, st);
    std::fprintf(stderr, "rank 1 (no hook): read %s within 1 s while rank 0 waited in the barrier\n",
                 done ? "completed" : "stalled");
    CHILD_CHECK(1, !done);
    if (!report(1, boot.barrier(), "barrier")) return 1;  // releases rank 0, which then polls (with the hook)
    CHILD_CHECK(1, wait_read(*dom, 3000ms, st));
  }
  CHILD_CHECK(1, st == fabrix::status::ok);
  for (std::size_t i = 0; i < buf.size(); ++i) CHILD_CHECK(1, buf[i] == pattern(i));
  if (!report(1, boot.barrier(), "final barrier")) return 1;
  return 0;
}

void run_job(bool with_hook) {
  // Short op_timeout: without progress the barrier would otherwise sit until it.
  const fabrix::bootstrap_options opts{5000ms, 5000ms};
  auto root = fabrix::bootstrap::listen(2, "127.0.0.1:0", "progress-test", opts);
  REQUIRE(root);
  const std::string where = "127.0.0.1:" + std::to_string(root->port());
  const pid_t r0 = spawn([&] {
    auto b = root->accept();
    if (!report(0, b, "accept")) return 1;
    return run_rank(0, *b, with_hook);
  });
  const pid_t r1 = spawn([&] {
    auto b = fabrix::bootstrap::create(1, 2, where, "progress-test", opts);
    if (!report(1, b, "create")) return 1;
    return run_rank(1, *b, with_hook);
  });
  const auto t0 = steady::now();
  CHECK(reap(r0) == 0);
  CHECK(reap(r1) == 0);
  MESSAGE(std::string(with_hook ? "with" : "without")
          << " the progress hook: " << std::chrono::duration<double>(steady::now() - t0).count() << " s");
}

}  // namespace

TEST_CASE("bootstrap progress: a rank in a barrier serves a peer's UCX-over-tcp read when given the hook") {
  run_job(true);
}

TEST_CASE("bootstrap progress: without the hook the same read stalls while the target waits in the barrier") {
  run_job(false);
}

TEST_CASE("bootstrap progress: the callback runs while waiting, and may not re-enter the bootstrap") {
  // A job of two in this process's children: rank 1 arrives late, rank 0
  // counts its callback calls meanwhile and tries to call the bootstrap from it.
  auto root = fabrix::bootstrap::listen(2, "127.0.0.1:0", "reenter", {5000ms, 5000ms});
  REQUIRE(root);
  const std::string where = "127.0.0.1:" + std::to_string(root->port());
  const pid_t r0 = spawn([&] {
    auto b = root->accept();
    if (!report(0, b, "accept")) return 1;
    int calls = 0;
    fabrix::status nested = fabrix::status::ok;
    auto r = b->barrier([&] {
      if (calls++ == 0) nested = b->barrier().code();
    });
    if (!report(0, r, "barrier")) return 1;
    std::fprintf(stderr, "rank 0: %d progress calls during a ~300 ms wait\n", calls);
    CHILD_CHECK(0, calls >= 20);  // every few ms (2 ms by default)
    CHILD_CHECK(0, nested == fabrix::status::invalid_argument);
    CHILD_CHECK(0, b->barrier());  // the nested call did not break the object
    return 0;
  });
  const pid_t r1 = spawn([&] {
    auto b = fabrix::bootstrap::create(1, 2, where, "reenter", {5000ms, 5000ms});
    if (!report(1, b, "create")) return 1;
    std::this_thread::sleep_for(300ms);
    CHILD_CHECK(1, b->barrier());
    CHILD_CHECK(1, b->barrier());
    return 0;
  });
  CHECK(reap(r0) == 0);
  CHECK(reap(r1) == 0);
}
