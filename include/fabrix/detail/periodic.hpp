// Work a domain does now and then from poll() and wait(): the liveness of
// peers on this node, timeout sweeps, probes of idle peers. A poll must
// stay cheap, so the clock is read on one poll in 64 only (poll_clock), and
// each task runs at most once per its period (schedule). Single-threaded,
// like its domain.
#pragma once

#include <chrono>
#include <cstdint>

namespace fabrix::detail {

// How often fabrix looks for peers on this node whose process is gone
// (process_identity.hpp), where the transport cannot tell.
inline constexpr std::chrono::milliseconds liveness_period{100};

class poll_clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  // On one call in 64 and on the first call after wake(): reads the time
  // into `now` and returns true; on the others returns false and leaves
  // `now` alone. (Not std::optional: returned through the stack, its
  // 16 bytes were reloaded right after a 1-byte store on every poll, a
  // store-forwarding stall in each provider's spin loop.)
  bool sample(time_point& now) noexcept {
    if ((++polls_ & 63) != 0) return false;
    now = std::chrono::steady_clock::now();
    return true;
  }
  // The next sample(now) reads the clock: wait() calls it before a sleep
  // bounded by a period, so the task that is due runs when it wakes.
  void wake() noexcept { polls_ |= 63; }

 private:
  std::uint32_t polls_ = 0;
};

// When a periodic task runs next.
struct schedule {
  std::chrono::steady_clock::time_point next{};

  // Whether the task is due at `now`; when so, the next period starts.
  bool due(std::chrono::steady_clock::time_point now, std::chrono::milliseconds period) noexcept {
    if (now < next) return false;
    next = now + period;
    return true;
  }
};

}  // namespace fabrix::detail
