// Forked child processes for tests that need real peers (bootstrap ranks):
// a child runs a body and exits with its return value; the parent reaps it
// with a bound, so a hung child fails the test instead of hanging it.
#pragma once

#include <doctest/doctest.h>

#include "../conformance/hang_report.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

namespace fxt_child {

// Runs `body` in a child process, which exits with its return value.
inline pid_t spawn(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int rc = 3;
    try {
      rc = body();
    } catch (...) {  // a doctest REQUIRE in a helper: never unwind into doctest's copy in this process
      std::fprintf(stderr, "child %d: failed (exception)\n", static_cast<int>(::getpid()));
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  return pid;
}

// The child's exit code; -1 when it did not exit normally, -2 when it cannot
// be waited for, -3 when it was still running after `limit` (then killed).
inline int reap(pid_t pid, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int st = 0;
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (r < 0) return -2;
    if (std::chrono::steady_clock::now() >= until) {
      std::fprintf(stderr, "child %d still running after %lld ms, killed; it was at:\n%s", static_cast<int>(pid),
                   static_cast<long long>(limit.count()), fxt::stack_of(pid).c_str());
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      return -3;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// In a child: true when `r` holds a value, else prints why and returns false.
template <class R>
bool report(int rank, const R& r, const char* what) {
  if (r) return true;
  std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, r.error().describe().c_str());
  return false;
}

}  // namespace fxt_child

// In a child's body: on a failed check, print it and return 1 (the exit code).
#define CHILD_CHECK(rank, cond)                                                                            \
  do {                                                                                                     \
    if (!(cond)) {                                                                                         \
      std::fprintf(stderr, "child rank %d: %s:%d: check failed: %s\n", (rank), __FILE__, __LINE__, #cond); \
      return 1;                                                                                            \
    }                                                                                                      \
  } while (0)
