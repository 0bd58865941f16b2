// fabrix::coll::options — how a communicator sizes its scratch memory and
// bounds its waits. Every rank of a job must pass the same chunk_bytes and
// slots (communicator::create checks it).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace fabrix::coll {

class device_kernels;  // device_kernels.hpp

struct options {
  // Largest piece of data one notification carries. A multiple of 8.
  std::size_t chunk_bytes = std::size_t{256} << 10;
  // Chunks in flight per peer and direction (credits). Even, at least 2: the
  // ring pipelines slots/2 chunks per step.
  std::uint32_t slots = 8;
  // Bound on one collective call: a peer that stops answering makes the call
  // return timed_out after this long, never hang.
  std::chrono::milliseconds timeout{30000};
  // How long a call keeps polling (yielding the CPU between polls) after
  // the last progress before it sleeps on the domain's event fd. Sleeping
  // frees the core but adds a wake-up to every hop, and UCX over shared
  // memory misses some wake-ups (then a hop costs a 5 ms wait slice);
  // polling is what MPI libraries do, and measured best here even with 4
  // ranks on 2 busy cores.
  std::chrono::microseconds spin{1000000};
  // Allreduce of at most this many bytes (and at most chunk_bytes) sends
  // every rank's whole input to every other rank in one hop and reduces
  // locally, in rank order; larger ones use the ring.
  std::size_t direct_allreduce_bytes = std::size_t{32} << 10;
  // While nothing moves, peers are probed (a flush) this often, so that a
  // dead peer is reported as peer_unreachable long before the timeout.
  std::chrono::milliseconds probe_interval{100};
  // The ring's allgather steps pass each received chunk on by writing it
  // straight from its receive slot (one local copy fewer per chunk) instead
  // of copying it to a send slot first. The receive slot then goes back to
  // its sender only once that write has completed, which ties a rank's
  // credits to its right neighbour's progress: on UCX over shared memory
  // with 4 ranks on 2 busy cores this measured slower (perf/coll), so it
  // is off by default. A local choice: ranks need not agree on it.
  bool forward_received = false;
  // Allreduce and allgather of at least this many bytes (alltoall(v): each
  // piece of at least this / size()) on host memory write chunks straight
  // from and into buffers registered with communicator::register_memory
  // or allocated by communicator::allocate_memory (zero_copy.hpp), at the
  // cost of one extra message per call (alltoall: per piece) that tells the
  // writer where the output is. Smaller calls, and calls when chunk_bytes is
  // under 1 KiB, copy through the scratch. Every rank passes the same value.
  std::size_t zero_copy_min_bytes = std::size_t{256} << 10;
  // Null: the scratch and every collective's buffers are host memory. Else
  // the scratch is memory this object allocates (e.g. GPU memory from
  // fabrix::cuda::collective_kernels), the collectives take buffers in that
  // memory and copy and reduce with its kernels, and the provider must
  // register such memory itself (caps().gpu == direct, e.g. cuda_ipc). Must
  // outlive the communicator. Every rank passes one or every rank null.
  device_kernels* device = nullptr;
  // Which of 15 tags (1..15) this communicator's tokens and notifications
  // carry (tokens.hpp, notify.hpp). A domain used by more than the
  // communicator is shared through a completion_router
  // (communicator::create(router, ...)): the communicator then polls only
  // what has its tag, so two communicators on one domain need two tags,
  // and other code on it must keep its write_with_imm immediates below
  // 1 << 28 and its tokens' top byte below 0xf0. Every rank passes the same.
  std::uint32_t tag = 1;
};

// The scratch a communicator registers: a send and a receive area of
// `slots` chunks for each other rank.
constexpr std::size_t scratch_bytes(const options& o, int ranks) noexcept {
  return ranks > 1 ? std::size_t{2} * static_cast<std::size_t>(ranks - 1) * o.slots * o.chunk_bytes : 0;
}

}  // namespace fabrix::coll
