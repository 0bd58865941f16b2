// What a crashing rank says before it dies, and how the supervisor names
// the death.
//
// Why: Debian's libfabric links libpsm2 (and libinfinipath), whose library
// constructors install handlers for SIGSEGV, SIGBUS, SIGILL and SIGFPE in
// every process that loads libfabric. They print a backtrace and call
// exit(1), so a rank that crashed looked like a rank whose check failed
// ("status 256"), and a CI log that keeps only the tail lost the signal and
// the top of the stack. A rank therefore installs report_crashes() right
// after fork: on a fatal signal it writes one line to stderr,
//   rank R (pid P): fatal signal S; frames: module+0xoffset ...
// innermost frame first, then dies of the same signal (default action), so
// the supervisor's describe_ending() says "killed by signal S".
// Offsets are in the module's file, for addr2line -e MODULE.
//
// Sanitizer builds keep their own reports: report_crashes() does nothing
// there.
#pragma once

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FXT_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FXT_SANITIZED 1
#endif
#endif

namespace fxt::detail {

// A fixed buffer the handler formats into: no allocation in the handler.
struct crash_line {
  char text[2048];
  std::size_t used = 0;
  void add(const char* s) {
    for (; *s && used + 1 < sizeof(text); ++s) text[used++] = *s;
  }
  void add_unsigned(std::uintptr_t v, unsigned base) {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = "0123456789abcdef"[v % base];
      v /= base;
    } while (v != 0 && n < 24);
    while (n > 0 && used + 1 < sizeof(text)) text[used++] = digits[--n];
  }
};

inline int crash_rank = -1;

// Async-signal-safe but for dladdr (it reads the loader's list without
// allocating; good enough for a process that is about to die).
inline void on_fatal_signal(int sig) {
  static crash_line line;
  line.used = 0;
  line.add("rank ");
  line.add_unsigned(static_cast<std::uintptr_t>(crash_rank), 10);
  line.add(" (pid ");
  line.add_unsigned(static_cast<std::uintptr_t>(::getpid()), 10);
  line.add("): fatal signal ");
  line.add_unsigned(static_cast<std::uintptr_t>(sig), 10);
  line.add("; frames:");
  void* frames[32];
  const int n = ::backtrace(frames, 32);
  for (int i = 0; i < n; ++i) {
    Dl_info info{};
    line.add(" ");
    if (::dladdr(frames[i], &info) != 0 && info.dli_fname != nullptr) {
      const char* base = std::strrchr(info.dli_fname, '/');
      line.add(base != nullptr ? base + 1 : info.dli_fname);
      line.add("+0x");
      line.add_unsigned(reinterpret_cast<std::uintptr_t>(frames[i]) - reinterpret_cast<std::uintptr_t>(info.dli_fbase),
                        16);
    } else {
      line.add("0x");
      line.add_unsigned(reinterpret_cast<std::uintptr_t>(frames[i]), 16);
    }
  }
  line.add("\n");
  (void)!::write(STDERR_FILENO, line.text, line.used);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace fxt::detail

namespace fxt {

// Call in a rank, after fork and before it opens a provider.
inline void report_crashes(int rank) {
#ifndef FXT_SANITIZED
  detail::crash_rank = rank;
  void* warm[1];
  (void)::backtrace(warm, 1);  // loads libgcc now, not inside the handler
  struct sigaction sa {};
  sa.sa_handler = detail::on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_NODEFER;
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) ::sigaction(sig, &sa, nullptr);
#else
  (void)rank;
#endif
}

// "exited with status N" or "killed by signal S (name)", for the supervisor.
inline std::string describe_ending(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    const char* name = ::strsignal(sig);
    return "killed by signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  }
  return "wait status " + std::to_string(wait_status);
}

}  // namespace fxt
