// bootstrap::from_callbacks: fabrix's collectives on a user's fixed-size
// allgather (bootstrap_callbacks in bootstrap.hpp).
//
// Every collective first gathers a 24-byte header from each rank {kind,
// number, blob bytes}; a rank that called another collective (kind or
// number) fails the call on every rank, before any blob moves. An
// allgather then gathers the blobs padded to the largest. A request that
// fabrix gives up on (timeout, error) keeps its buffers for the life of the
// process: the user's transport may still write into them after release.
// Each call allocates its buffers (a bootstrap is not a hot path).
#include "state.hpp"
#include "wire.hpp"

#include <fabrix/detail/little_endian.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

namespace fabrix {

namespace detail::boot {
namespace {

using clock = std::chrono::steady_clock;

constexpr std::size_t header_bytes = 24;

// The name of a header's collective kind, which came from a peer (boot::op's values).
std::string kind_name(std::uint64_t kind) {
  return kind == static_cast<std::uint64_t>(op::allgather) || kind == static_cast<std::uint64_t>(op::barrier)
             ? std::string(to_string(static_cast<op>(kind)))
             : "?";
}

class callbacks_engine final : public bootstrap_engine {
 public:
  callbacks_engine(bootstrap_callbacks cb, const bootstrap_options& opts) : cb_(std::move(cb)), opts_(opts) {}

  int rank() const noexcept override { return cb_.rank; }
  int size() const noexcept override { return cb_.size; }
  std::string describe() const override {
    return cb_.name + " (rank " + std::to_string(cb_.rank) + " of " + std::to_string(cb_.size) + ")";
  }
  const std::function<void()>* default_progress() const noexcept override { return &opts_.progress; }

  result<std::vector<std::vector<std::byte>>> allgather(std::span<const std::byte> mine,
                                                        const std::function<void()>* progress) override {
    return run(op::allgather, mine, progress);
  }
  result<void> barrier(const std::function<void()>* progress) override {
    auto r = run(op::barrier, {}, progress);
    if (!r) return unexpected(r.error());
    return {};
  }

 private:
  result<std::vector<std::vector<std::byte>>> run(op kind, std::span<const std::byte> mine,
                                                  const std::function<void()>* progress) {
    if (in_call_)
      return fail(status::invalid_argument,
                  "bootstrap (" + cb_.name + "): called from its own progress callback, which must not use it");
    if (broken_) return unexpected(*broken_);
    if (mine.size() > bootstrap::max_blob_size)
      return fail(status::invalid_argument, "bootstrap (" + cb_.name + "): a blob of " + std::to_string(mine.size()) +
                                                " bytes is over the limit of " +
                                                std::to_string(bootstrap::max_blob_size));
    in_call_ = true;
    const std::uint64_t number = ++count_[kind == op::allgather ? 0 : 1];
    auto r = collective(kind, number, mine, progress);
    in_call_ = false;
    if (!r) broken_ = r.error();
    return r;
  }

  result<std::vector<std::vector<std::byte>>> collective(op kind, std::uint64_t number, std::span<const std::byte> mine,
                                                         const std::function<void()>* progress) {
    const auto until = clock::now() + opts_.op_timeout;
    const std::string what = std::string(to_string(kind)) + " #" + std::to_string(number);
    const auto n = static_cast<std::size_t>(cb_.size);
    if (n == 1) {
      std::vector<std::vector<std::byte>> one(1);
      if (kind == op::allgather) one[0].assign(mine.begin(), mine.end());
      return one;
    }
    auto send = keep(header_bytes);
    auto recv = keep(header_bytes * n);
    store_le<std::uint64_t>(send->data(), static_cast<std::uint64_t>(kind));
    store_le<std::uint64_t>(send->data() + 8, number);
    store_le<std::uint64_t>(send->data() + 16, mine.size());
    if (auto ok = exchange(send, recv, header_bytes, progress, until, what); !ok) return unexpected(ok.error());

    std::size_t largest = 0;
    std::vector<std::size_t> sizes(n);
    for (std::size_t r = 0; r < n; ++r) {
      const std::byte* h = recv->data() + r * header_bytes;
      const auto k = load_le<std::uint64_t>(h), num = load_le<std::uint64_t>(h + 8),
                 bytes = load_le<std::uint64_t>(h + 16);
      if (k != static_cast<std::uint64_t>(kind) || num != number)
        return fail(status::invalid_argument,
                    "bootstrap (" + cb_.name + "): collective mismatch: rank " + std::to_string(cb_.rank) + " called " +
                        what + ", rank " + std::to_string(r) + " called " + kind_name(k) + " #" + std::to_string(num));
      if (bytes > bootstrap::max_blob_size)
        return fail(status::invalid_argument, "bootstrap (" + cb_.name + "): rank " + std::to_string(r) +
                                                  " announced a blob of " + std::to_string(bytes) + " bytes in " +
                                                  what + ", over the limit");
      sizes[r] = static_cast<std::size_t>(bytes);
      largest = std::max(largest, sizes[r]);
    }
    std::vector<std::vector<std::byte>> out(n);
    if (kind != op::allgather || largest == 0) return out;

    auto blob = keep(largest);
    std::copy(mine.begin(), mine.end(), blob->begin());
    auto all = keep(largest * n);
    if (auto ok = exchange(blob, all, largest, progress, until, what); !ok) return unexpected(ok.error());
    for (std::size_t r = 0; r < n; ++r) {
      const auto* from = all->data() + r * largest;
      out[r].assign(from, from + sizes[r]);
    }
    return out;
  }

  using buffer = std::shared_ptr<std::vector<std::byte>>;

  // A zeroed buffer for one request.
  static buffer keep(std::size_t bytes) { return std::make_shared<std::vector<std::byte>>(bytes); }

  // One user allgather of `bytes` per rank, polled to completion or `until`.
  result<void> exchange(const buffer& mine, const buffer& out, std::size_t bytes, const std::function<void()>* progress,
                        clock::time_point until, const std::string& what) {
    auto req = cb_.allgather_start(mine->data(), out->data(), bytes);
    if (!req) return failed_in("allgather_start", req.error(), what);
    auto next_progress = clock::now();
    for (;;) {
      auto done = cb_.test(*req);
      if (!done) {
        abandon(*req, mine, out);
        return failed_in("test", done.error(), what);
      }
      if (*done) {
        if (cb_.release) cb_.release(*req, true);
        return {};
      }
      const auto now = clock::now();
      if (now >= until) {
        abandon(*req, mine, out);
        return fail(status::timed_out, "bootstrap (" + cb_.name + "): " + what + " did not finish within " +
                                           std::to_string(opts_.op_timeout.count()) +
                                           " ms (op_timeout): is a rank missing, or calling another collective?");
      }
      if (progress && *progress && now >= next_progress) {
        (*progress)();
        next_progress = now + opts_.progress_interval;
      } else {
        std::this_thread::yield();
      }
    }
  }

  // Gives up on a request: the user releases it unfinished, and its buffers
  // stay allocated until the process exits, since the user's transport may
  // still write into them.
  void abandon(void* request, const buffer& mine, const buffer& out) {
    if (cb_.release) cb_.release(request, false);
    static std::mutex lock;
    static std::vector<buffer> kept;
    const std::lock_guard<std::mutex> hold(lock);
    kept.push_back(mine);
    kept.push_back(out);
  }

  unexpected failed_in(const char* callback, const error& e, const std::string& what) const {
    return fail(e.code, "bootstrap (" + cb_.name + "): " + callback + " failed in " + what + ": " + e.describe());
  }

  bootstrap_callbacks cb_;
  bootstrap_options opts_;
  std::array<std::uint64_t, 2> count_{};  // collectives started, by kind
  bool in_call_ = false;
  std::optional<error> broken_;
};

}  // namespace
}  // namespace detail::boot

result<bootstrap> bootstrap::from_callbacks(bootstrap_callbacks callbacks, const bootstrap_options& opts) {
  namespace boot = detail::boot;
  if (callbacks.size < 1 || callbacks.rank < 0 || callbacks.rank >= callbacks.size)
    return boot::fail(status::invalid_argument, "bootstrap::from_callbacks: rank " + std::to_string(callbacks.rank) +
                                                    " of size " + std::to_string(callbacks.size) + " is out of range");
  if (callbacks.size > 1 && (!callbacks.allgather_start || !callbacks.test))
    return boot::fail(status::invalid_argument,
                      "bootstrap::from_callbacks: allgather_start and test are required for a job of several ranks");
  if (opts.op_timeout.count() <= 0)
    return boot::fail(status::invalid_argument, "bootstrap::from_callbacks: op_timeout must be positive");
  return bootstrap(std::make_unique<boot::callbacks_engine>(std::move(callbacks), opts));
}

}  // namespace fabrix
