// Where things live in the one data region each side registers:
//
//   target   [0, target_bytes)      what the peer writes into / reads from;
//                                   atomics use one 8-byte word per slot here
//   local    the initiator's source (write, send) or destination (read)
//   rx       receive slots for send/recv, one message size apart
//   results  one 8-byte word per slot for the atomics' old values
//
// The control region is separate: host memory, or device memory where the
// provider shares only that (see session.hpp and control.hpp).
#pragma once

#include <algorithm>
#include <cstdint>

namespace fabrix::perf {

struct layout {
  std::uint64_t target = 0, target_bytes = 0;
  std::uint64_t local = 0, local_bytes = 0;
  std::uint64_t rx = 0, rx_bytes = 0;
  std::uint64_t results = 0, results_bytes = 0;
  std::uint64_t total = 0;

  static layout make(std::uint64_t max_size, std::uint64_t slots) {
    auto round = [](std::uint64_t n) { return (n + 4095) / 4096 * 4096; };
    layout l;
    l.target_bytes = round(std::max(max_size, slots * 8));
    l.local = l.target + l.target_bytes;
    l.local_bytes = round(max_size);
    l.rx = l.local + l.local_bytes;
    l.rx_bytes = round(std::max(2 * max_size, std::min(slots * max_size, std::uint64_t{32} << 20)));
    l.results = l.rx + l.rx_bytes;
    l.results_bytes = round(slots * 8);
    l.total = l.results + l.results_bytes;
    return l;
  }
  // Receive slots of `size` bytes that fit, at most `slots`.
  std::uint64_t rx_slots(std::uint64_t size, std::uint64_t slots) const {
    return std::max<std::uint64_t>(1, std::min(slots, rx_bytes / std::max<std::uint64_t>(size, 1)));
  }
};

}  // namespace fabrix::perf
