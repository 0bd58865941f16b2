// fabrix::bootstrap_engine — what a fabrix::bootstrap runs on.
//
// A bootstrap is one handle (rank, size, allgather, barrier) over one of
// these engines:
//   - the built-in TCP store hosted by rank 0 (bootstrap::create, from_env,
//     listen; bootstrap.hpp has its trust model);
//   - a user's out-of-band allgather, the UCC `oob` pattern
//     (bootstrap::from_callbacks, for frameworks with a store of their own);
//   - an MPI communicator (fabrix::mpi::bootstrap in <fabrix/mpi.hpp>).
// Another engine (a launcher's key-value store, a service) implements this
// class and is wrapped with bootstrap(std::unique_ptr<bootstrap_engine>).
//
// Contract for an implementation:
//   - rank() and size() are fixed for the engine's life; 0 <= rank < size.
//   - allgather() and barrier() are collective: every rank calls the same
//     sequence of them. allgather returns every rank's blob, indexed by rank
//     (sizes may differ; up to bootstrap::max_blob_size each).
//   - `progress` (null or empty: none) is called on the calling thread while
//     the call waits, about every bootstrap_options::progress_interval, so a
//     rank blocked here still drives its domain. It must not call the
//     bootstrap; an engine refuses such a call with invalid_argument.
//   - Every wait is bounded; errors are returned, never thrown. After an
//     error the engine stays failed: later calls return that error.
//   - One thread at a time uses an engine.
#pragma once

#include <fabrix/result.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fabrix {

struct bootstrap_traffic {
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
};

class bootstrap_engine {
 public:
  virtual ~bootstrap_engine() = default;

  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  // One line: which engine, and where (e.g. "tcp store, rank 0 at 10.0.0.1:4000").
  virtual std::string describe() const = 0;

  virtual result<std::vector<std::vector<std::byte>>> allgather(std::span<const std::byte> mine,
                                                                const std::function<void()>* progress) = 0;
  virtual result<void> barrier(const std::function<void()>* progress) = 0;

  // Bytes this rank's engine has sent and received so far, for benchmarks
  // and diagnostics; nullopt when the engine cannot tell (an external
  // runtime moves the bytes).
  virtual std::optional<bootstrap_traffic> traffic() const { return std::nullopt; }

  // The progress callback that bootstrap::allgather()/barrier() without one
  // pass (bootstrap_options::progress); null: none.
  virtual const std::function<void()>* default_progress() const noexcept { return nullptr; }
};

}  // namespace fabrix
