// Unix SOCK_SEQPACKET sockets in the abstract namespace: one packet per
// message, reliable, ordered, and able to carry a file descriptor
// (SCM_RIGHTS) — the VMM export path needs that. Needs no CUDA headers.
// Abstract names are per network namespace: peers in different network
// namespaces cannot connect (connect() then fails with a clear error).
#pragma once

#include <fabrix/cuda/ipc/detail/wire.hpp>
#include <fabrix/result.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <span>
#include <string>
#include <utility>

namespace fabrix::cuda::ipc {

// An owned fd, closed on destruction.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }
  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  explicit operator bool() const noexcept { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

inline unexpected errno_fail(const std::string& what, int err = errno) {
  const status s = err == ECONNREFUSED || err == ENOENT || err == EPIPE || err == ECONNRESET ? status::peer_unreachable
                                                                                             : status::provider_error;
  return unexpected(s, what + ": " + std::strerror(err), "cuda_ipc", err);
}

inline socklen_t abstract_address(const std::string& name, sockaddr_un& sa) noexcept {
  std::memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  const std::size_t n = name.size() < sizeof(sa.sun_path) - 1 ? name.size() : sizeof(sa.sun_path) - 1;
  std::memcpy(sa.sun_path + 1, name.data(), n);  // sun_path[0] == 0: abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

// A non-blocking listening socket bound to the abstract `name`.
inline result<unique_fd> listen_abstract(const std::string& name) {
  unique_fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return errno_fail("socket(AF_UNIX, SOCK_SEQPACKET)");
  sockaddr_un sa;
  const socklen_t len = abstract_address(name, sa);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), len) != 0) return errno_fail("bind @" + name);
  if (::listen(fd.get(), 128) != 0) return errno_fail("listen @" + name);
  return fd;
}

// A non-blocking connection to the abstract `name`.
inline result<unique_fd> connect_abstract(const std::string& name) {
  unique_fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return errno_fail("socket(AF_UNIX, SOCK_SEQPACKET)");
  sockaddr_un sa;
  const socklen_t len = abstract_address(name, sa);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), len) != 0)
    return errno_fail("connect to the peer's socket @" + name + " (is the peer alive and in this network namespace?)");
  if (::fcntl(fd.get(), F_SETFL, O_NONBLOCK) != 0) return errno_fail("fcntl(O_NONBLOCK)");
  return fd;
}

// Sends one packet (header + payload), with `pass_fd` as SCM_RIGHTS when >= 0.
// ok, again (socket buffer full), or peer_unreachable / provider_error.
inline status send_packet(int fd, packet_type t, std::uint64_t a, std::uint64_t b,
                          std::span<const std::byte> payload = {}, int pass_fd = -1) noexcept {
  std::byte header[packet_header];
  encode_header(std::span<std::byte, packet_header>(header), t, a, b);
  iovec iov[2] = {{header, packet_header}, {const_cast<std::byte*>(payload.data()), payload.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = payload.empty() ? 1 : 2;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  for (;;) {
    if (::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) return status::ok;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return status::again;
    return errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN ? status::peer_unreachable
                                                                      : status::provider_error;
  }
}

// What one receive produced.
struct received {
  enum kind_t { packet_ready, nothing, closed, error } kind = nothing;
  std::size_t size = 0;  // bytes of the packet in the buffer
  bool truncated = false;
  unique_fd fd;  // an SCM_RIGHTS fd that came with it, if any
};

// Receives one packet into `buf` without blocking. A packet longer than
// `buf` is reported truncated (its tail is lost); extra fds are closed.
inline received receive_packet(int fd, std::span<std::byte> buf) noexcept {
  received out;
  iovec iov{buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    out.kind = errno == EAGAIN || errno == EWOULDBLOCK ? received::nothing
               : errno == ECONNRESET                   ? received::closed
                                                       : received::error;
    return out;
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int passed = -1;
      std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (!out.fd)
        out.fd.reset(passed);
      else
        ::close(passed);
    }
  }
  if (n == 0) {
    out.kind = received::closed;  // orderly shutdown (SEQPACKET has no empty packets from us)
    return out;
  }
  out.kind = received::packet_ready;
  out.size = static_cast<std::size_t>(n);
  out.truncated = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  return out;
}

// Blocks up to `timeout_ms` until `fd` is readable (or hung up); false on timeout.
inline bool wait_readable(int fd, int timeout_ms) noexcept {
  pollfd p{fd, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  return r > 0;
}

}  // namespace fabrix::cuda::ipc
