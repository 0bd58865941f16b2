// The socket raw_ofi and raw_ucx meet over, and the bound on every wait.
//
// Contracts:
// - The socket binds and connects to 127.0.0.1 only. It carries setup
//   (options, addresses, keys) and the untimed step handshakes, and from
//   inside a bandwidth loop only the client's heartbeat: 8 bytes at most
//   every quarter of --timeout (1 s at most), as fabrix-perf's loop writes
//   its heartbeat word (perf/heartbeat.hpp). Blocking receives give up after
//   --timeout; the target's wait for the end of a loop gives up after
//   --timeout without a heartbeat, so a loop may run longer than that.
// - run_sides() runs the server, the client, or both (--loopback forks the
//   server before any library is initialised) and returns the exit status:
//   a failure's own (1 run-time, 2 usage), the client's before the server's.
#pragma once

#include "common.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <utility>

namespace fabrix::raw {

// Bounds a wait: passed() is true once `seconds` have gone by (it reads the
// clock every 4096th call only, so busy loops may call it every turn).
class deadline {
 public:
  explicit deadline(int seconds) : end_(std::chrono::steady_clock::now() + std::chrono::seconds(seconds)) {}
  bool passed() noexcept { return (++spin_ & 4095) == 0 && std::chrono::steady_clock::now() > end_; }

 private:
  std::chrono::steady_clock::time_point end_;
  std::uint64_t spin_ = 0;
};

// When the next heartbeat is due: every quarter of --timeout, 1 s at most.
class beat_timer {
 public:
  explicit beat_timer(int timeout_s)
      : every_(std::min(1000, 250 * timeout_s)), next_(std::chrono::steady_clock::now() + every_) {}
  bool due() noexcept {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_) return false;
    next_ = now + every_;
    return true;
  }

 private:
  std::chrono::milliseconds every_;
  std::chrono::steady_clock::time_point next_;
};

// The setup and handshake socket to the peer, on 127.0.0.1.
class channel {
 public:
  // The server's listening socket on 127.0.0.1:port (0: any free port).
  static int listen_on(int port, int& bound) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail(std::string("socket: ") + std::strerror(errno));
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a = loopback(port);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 1) != 0)
      fail("listen on 127.0.0.1:" + std::to_string(port) + ": " + std::strerror(errno));
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    bound = ntohs(a.sin_port);
    return fd;
  }
  static channel accept_on(int listener, int timeout_s) {
    pollfd p{listener, POLLIN, 0};
    if (::poll(&p, 1, timeout_s * 1000) != 1) fail("no client connected in " + std::to_string(timeout_s) + " s");
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) fail(std::string("accept: ") + std::strerror(errno));
    ::close(listener);
    return channel(fd);
  }
  // Retries a refused connection until the server listens or timeout_s passes.
  static channel connect_to(int port, int timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    for (;;) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a = loopback(port);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return channel(fd);
      ::close(fd);
      if (std::chrono::steady_clock::now() > deadline)
        fail("cannot connect to 127.0.0.1:" + std::to_string(port) + ": " + std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  channel(channel&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  channel(const channel&) = delete;
  channel& operator=(const channel&) = delete;
  ~channel() {
    if (fd_ >= 0) ::close(fd_);
  }

  // Blocking receives give up after `seconds` (a peer that hangs or died).
  void set_timeout(int seconds) {
    timeval tv{seconds, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }

  void send(const void* p, std::size_t n) {
    const auto* b = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t k = ::send(fd_, b, n, MSG_NOSIGNAL);
      if (k <= 0) fail(std::string("setup socket: the peer is gone (") + std::strerror(errno) + ")");
      b += k;
      n -= static_cast<std::size_t>(k);
    }
  }
  // Blocks until n bytes came (the peer needs none of our progress meanwhile).
  void recv(void* p, std::size_t n) {
    auto* b = static_cast<char*>(p);
    while (n > 0) {
      const ssize_t k = ::recv(fd_, b, n, 0);
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) fail("setup socket: the peer is silent");
      if (k <= 0) fail("setup socket: the peer is gone (its messages say why)");
      b += k;
      n -= static_cast<std::size_t>(k);
    }
  }
  void send_blob(const std::string& s) {
    const std::uint64_t n = s.size();
    send(&n, sizeof n);
    send(s.data(), s.size());
  }
  std::string recv_blob() {
    std::uint64_t n = 0;
    recv(&n, sizeof n);
    if (n > (1u << 20)) fail("setup socket: a blob of " + std::to_string(n) + " bytes");
    std::string s(n, '\0');
    recv(s.data(), n);
    return s;
  }
  // Sends ours, returns theirs (both sides call it in the same order).
  std::string exchange(const std::string& mine) {
    send_blob(mine);
    return recv_blob();
  }
  // Whether bytes are waiting (no wait).
  bool readable() {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }
  // Receives one u64 while calling `progress()` between looks, so a provider
  // that needs this side's progress (UCX over tcp, libfabric shm) keeps going.
  // Heartbeats (beat()) are consumed and restart the wait.
  template <class Progress>
  std::uint64_t recv_progressing(Progress&& progress, int timeout_s) {
    deadline until(timeout_s);
    for (std::uint64_t spin = 1;; ++spin) {
      progress();
      if ((spin & 63) == 0 && readable()) {
        const std::uint64_t v = recv_u64();
        if (v != heartbeat_word) return v;
        until = deadline(timeout_s);
      }
      if (until.passed()) fail("no word from the peer for " + std::to_string(timeout_s) + " s");
    }
  }
  // The client is alive and inside its loop (never a value a step sends).
  void beat() { send_u64(heartbeat_word); }
  void send_u64(std::uint64_t v) { send(&v, sizeof v); }
  std::uint64_t recv_u64() {
    std::uint64_t v = 0;
    recv(&v, sizeof v);
    return v;
  }

 private:
  explicit channel(int fd) : fd_(fd) {
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  static sockaddr_in loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
  }
  static constexpr std::uint64_t heartbeat_word = ~std::uint64_t{0};
  int fd_ = -1;
};

// Runs `side(channel, is_server)` as the server, the client, or both
// (--loopback forks the server before any library is initialised; its
// listening port goes over a pipe). Returns the exit status.
template <class Side>
int run_sides(const char* tool, const options& o, Side&& side) {
  auto guarded = [&](const char* who, auto&& body) {
    try {
      return body();
    } catch (const failure& f) {
      std::fflush(stdout);
      std::fprintf(stderr, "%s%s: %s\n", tool, who, f.what());
      return f.exit_code;
    } catch (const std::exception& e) {
      std::fflush(stdout);
      std::fprintf(stderr, "%s%s: %s\n", tool, who, e.what());
      return 1;
    }
  };
  if (!o.loopback) {
    if (o.server)
      return guarded(" (server)", [&] {
        int port = 0;
        const int l = channel::listen_on(o.port, port);
        channel ch = channel::accept_on(l, 3600);
        ch.set_timeout(o.timeout_s);
        return side(std::move(ch), true);
      });
    return guarded("", [&] {
      channel ch = channel::connect_to(o.port, o.timeout_s);
      ch.set_timeout(o.timeout_s);
      return side(std::move(ch), false);
    });
  }
  int fds[2];
  if (::pipe(fds) != 0) return 1;
  std::fflush(stdout);
  const pid_t child = ::fork();
  if (child < 0) return 1;
  if (child == 0) {
    ::close(fds[0]);
    const int code = guarded(" (server)", [&] {
      int port = 0;
      const int l = channel::listen_on(0, port);
      if (::write(fds[1], &port, sizeof port) != sizeof port) fail("cannot hand the port over");
      ::close(fds[1]);
      channel ch = channel::accept_on(l, o.timeout_s);
      ch.set_timeout(o.timeout_s);
      return side(std::move(ch), true);
    });
    std::fflush(stdout);
    std::_Exit(code);
  }
  ::close(fds[1]);
  int port = 0;
  const bool got = ::read(fds[0], &port, sizeof port) == sizeof port && port > 0;
  ::close(fds[0]);
  const int code = got ? guarded("",
                                 [&] {
                                   channel ch = channel::connect_to(port, o.timeout_s);
                                   ch.set_timeout(o.timeout_s);
                                   return side(std::move(ch), false);
                                 })
                       : 1;
  int st = 0;
  if (::waitpid(child, &st, 0) != child) return code ? code : 1;
  const int server_code = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
  return code != 0 ? code : server_code;
}

}  // namespace fabrix::raw
