// A communicator's failure state and the counters its liveness checks read:
// operations in flight (what teardown waits for), awaited completions (what
// a call waits for before it returns), probes and aborts in flight, and
// when anything last moved (idle() probes peers after probe_interval of
// silence and fails with timed_out at the call's deadline).
#pragma once

#include <fabrix/error.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace fabrix::coll::detail {

struct liveness {
  using clock = std::chrono::steady_clock;
  // Idle polls that return at once, before idle() checks the clock and
  // yields the core. One: with more ranks than cores (4 on 2 here), a rank
  // that polls without yielding keeps the one it waits for off the CPU;
  // 64 such polls measured 10-25% less allreduce bandwidth from 256 KiB to
  // 16 MiB (perf/results/2026-11-30/coll-allreduce.txt).
  static constexpr int spin_polls = 1;
  static constexpr std::chrono::milliseconds wait_slice{5};  // a bound on any missed wake-up

  std::optional<error> failure;   // set once; the communicator is broken from then on
  std::uint64_t outstanding = 0;  // operations posted here and not yet completed
  std::uint64_t awaited = 0;      // data writes and barrier notifications in flight
  std::uint64_t probes_in_flight = 0;
  int aborts_in_flight = 0;
  bool closing = false;  // in the destructor: errors are expected, not reported
  int idle_polls = 0;
  clock::time_point last_motion = clock::now();
  clock::time_point last_probe = clock::now();

  void moved(clock::time_point now) noexcept {
    last_motion = now;
    idle_polls = 0;
  }
  // Nothing moved for an interval and no probe went out in it.
  bool probe_due(clock::time_point now, std::chrono::milliseconds interval) const noexcept {
    return now - last_motion >= interval && now - last_probe >= interval;
  }
  // The failure a peer's abort notification sets.
  static error aborted_by(int rank, int source) {
    return make_error(status::peer_unreachable,
                      "rank " + std::to_string(rank) + ": rank " + std::to_string(source) +
                          " aborted the collective (it lost a peer or timed out)",
                      "collectives");
  }
};

}  // namespace fabrix::coll::detail
