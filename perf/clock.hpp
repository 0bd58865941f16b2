// The clock of the timed loops. On x86-64 with an invariant TSC
// (constant_tsc and nonstop_tsc in /proc/cpuinfo) it reads the TSC — a few
// nanoseconds, like perftest's get_cycles() and UCX's ucs_get_time() —
// calibrated once against steady_clock; elsewhere it is steady_clock.
// Loops take one reading per iteration and difference consecutive ones.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace fabrix::perf {

class tick_clock {
 public:
  tick_clock() {
#if defined(__x86_64__)
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string text((std::istreambuf_iterator<char>(cpuinfo)), std::istreambuf_iterator<char>());
    if (text.find("constant_tsc") != std::string::npos && text.find("nonstop_tsc") != std::string::npos) {
      using clock = std::chrono::steady_clock;
      const auto t0 = clock::now();
      const std::uint64_t c0 = __rdtsc();
      while (clock::now() - t0 < std::chrono::milliseconds(20)) {
      }
      const std::uint64_t c1 = __rdtsc();
      const double ns = std::chrono::duration<double, std::nano>(clock::now() - t0).count();
      if (c1 > c0 && ns > 0) {
        seconds_per_tick_ = ns * 1e-9 / static_cast<double>(c1 - c0);
        tsc_ = true;
      }
    }
#endif
  }

  std::uint64_t now() const noexcept {
#if defined(__x86_64__)
    if (tsc_) return __rdtsc();
#endif
    return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  double seconds(std::uint64_t ticks) const noexcept { return static_cast<double>(ticks) * seconds_per_tick_; }
  const char* source() const noexcept { return tsc_ ? "TSC" : "steady_clock"; }

 private:
  bool tsc_ = false;
  double seconds_per_tick_ =
      static_cast<double>(std::chrono::steady_clock::period::num) / std::chrono::steady_clock::period::den;
};

// One calibration per process.
inline const tick_clock& ticks() {
  static const tick_clock c;
  return c;
}

}  // namespace fabrix::perf
