// Sockets for the bootstrap (internal): an owning fd, deadlines, and the few
// blocking-with-deadline operations the protocol needs. Every socket here is
// non-blocking and close-on-exec; every wait is a poll() bounded by a
// deadline; sends use MSG_NOSIGNAL so a dead peer never raises SIGPIPE.
#pragma once

#include "address.hpp"
#include "wire.hpp"

#include <fabrix/bootstrap_engine.hpp>
#include <fabrix/result.hpp>

#include <poll.h>
#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace fabrix::detail::boot {

using clock = std::chrono::steady_clock;

// The caller's progress callback (bootstrap_options::progress), run by every
// wait at least every `every` while it would otherwise sleep in poll().
struct progress_hook {
  const std::function<void()>* fn = nullptr;
  std::chrono::milliseconds every{2};
  clock::time_point last{};

  bool active() const noexcept { return fn != nullptr && static_cast<bool>(*fn); }
  // Runs the callback when it is due; returns the ms until it is due again.
  int run_if_due();
};

// A point in time on the steady clock that a wait must not pass, and the
// progress callback to run while waiting for it (none when null).
class deadline {
 public:
  explicit deadline(clock::time_point at, progress_hook* hook = nullptr) noexcept : at_(at), hook_(hook) {}
  static deadline after(std::chrono::milliseconds d, progress_hook* hook = nullptr) noexcept {
    return deadline(clock::now() + d, hook);
  }
  progress_hook* hook() const noexcept { return hook_; }
  bool expired() const noexcept { return clock::now() >= at_; }
  // Milliseconds left, rounded up, for poll(); 0 once expired.
  int poll_ms() const noexcept;
  // The earlier of this deadline and now + d (same hook).
  deadline capped(std::chrono::milliseconds d) const noexcept;

 private:
  clock::time_point at_;
  progress_hook* hook_ = nullptr;
};

// poll(2) until an event or `until`, running until's progress hook every
// few ms meanwhile. Returns like poll(); 0 only once `until` has expired.
int poll_until(pollfd* fds, std::size_t n, const deadline& until);

class unique_fd {
 public:
  unique_fd() noexcept = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(o.release()) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

enum class io_status { ok, timed_out, closed, failed, malformed };

struct io_result {
  io_status status = io_status::ok;
  int err = 0;         // errno when failed
  std::string detail;  // parser message when malformed
  bool ok() const noexcept { return status == io_status::ok; }
};

// "timed out", "connection closed by the other side", strerror, ...
std::string describe(const io_result& r);
std::string errno_text(int err);

// A message sent piece by piece without blocking: pump() sends what the
// socket takes now (ok unless the connection failed), done() once all went.
// The pieces must outlive it. send_all() waits on it; links.cpp pumps it
// while it also receives.
class partial_send {
 public:
  explicit partial_send(std::span<const std::span<const std::byte>> pieces);
  bool done() const noexcept { return first_ == iov_.size(); }
  io_result pump(int fd);

 private:
  std::vector<iovec> iov_;
  std::size_t first_ = 0;
};

// Sends every byte of every piece, in order.
io_result send_all(int fd, std::span<const std::span<const std::byte>> pieces, deadline until);
// Receives one whole frame into `parser`.
io_result recv_frame(int fd, frame_parser& parser, deadline until);
// Reads what is available now into `parser` without waiting; ok means no
// error (the frame may still be incomplete: check parser.done()).
io_result recv_available(int fd, frame_parser& parser);

// Waits without busy-looping until `until` (or `d`, whichever is earlier).
void sleep_for(std::chrono::milliseconds d, deadline until);

void set_nodelay(int fd) noexcept;
// Bytes a TCP socket has sent (and had acknowledged) and received so far
// (TCP_INFO; zeros when unavailable). traffic.cpp.
bootstrap_traffic socket_traffic(int fd) noexcept;
// "addr:port" of the other end of a connected socket ("?" when unknown).
std::string peer_name(int fd);
// The numeric local address of a socket ("" when unknown).
std::string local_host(int fd);

struct listener {
  unique_fd fd;
  std::string host;  // numeric address bound
  std::uint16_t port = 0;
};
// Binds (SO_REUSEADDR) and listens on `where`; retries while the port is in
// use until `until`. Errors name the address.
result<listener> listen_on(const host_port& where, deadline until);

struct connect_attempt {
  unique_fd fd;        // valid on success
  std::string error;   // why not, for the final message
  bool fatal = false;  // retrying cannot help (the host name does not resolve)
};
// One attempt at every address `where` resolves to, each bounded by `until`.
connect_attempt connect_once(const host_port& where, deadline until);

}  // namespace fabrix::detail::boot
