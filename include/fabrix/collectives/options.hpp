// fabrix::coll::options — how a communicator sizes its scratch memory and
// bounds its waits. Every rank of a job must pass the same chunk_bytes and
// slots (communicator::create checks it).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace fabrix::coll {

struct options {
  // Largest piece of data one notification carries. A multiple of 8.
  std::size_t chunk_bytes = std::size_t{256} << 10;
  // Chunks in flight per peer and direction (credits). Even, at least 2: the
  // ring pipelines slots/2 chunks per step.
  std::uint32_t slots = 8;
  // Bound on one collective call: a peer that stops answering makes the call
  // return timed_out after this long, never hang.
  std::chrono::milliseconds timeout{30000};
  // While nothing moves, peers are probed (a flush) this often, so that a
  // dead peer is reported as peer_unreachable long before the timeout.
  std::chrono::milliseconds probe_interval{100};
};

// The scratch a communicator registers: a send and a receive area of
// `slots` chunks for each other rank.
constexpr std::size_t scratch_bytes(const options& o, int ranks) noexcept {
  return ranks > 1 ? std::size_t{2} * static_cast<std::size_t>(ranks - 1) * o.slots * o.chunk_bytes : 0;
}

}  // namespace fabrix::coll
