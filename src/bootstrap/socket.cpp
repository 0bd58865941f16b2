#include "socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <memory>
#include <vector>

namespace fabrix::detail::boot {

int deadline::poll_ms() const noexcept {
  const auto left = at_ - clock::now();
  if (left <= clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

deadline deadline::capped(std::chrono::milliseconds d) const noexcept {
  const auto other = clock::now() + d;
  return deadline(std::min(at_, other), hook_);
}

int progress_hook::run_if_due() {
  const auto every_ms = std::max<std::chrono::milliseconds::rep>(every.count(), 1);
  auto now = clock::now();
  if (now - last >= std::chrono::milliseconds(every_ms)) {
    (*fn)();
    now = clock::now();
    last = now;
  }
  const auto due = std::chrono::ceil<std::chrono::milliseconds>(last + std::chrono::milliseconds(every_ms) - now);
  return static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(due.count(), 0, every_ms));
}

int poll_until(pollfd* fds, std::size_t n, const deadline& until) {
  progress_hook* hook = until.hook();
  if (hook == nullptr || !hook->active()) {
    for (;;) {
      const int r = ::poll(fds, static_cast<nfds_t>(n), until.poll_ms());
      if (r != 0 || until.expired()) return r;  // poll may wake a hair early
    }
  }
  for (;;) {
    const int slice = std::min(until.poll_ms(), hook->run_if_due());
    const int r = ::poll(fds, static_cast<nfds_t>(n), slice);
    if (r != 0) return r;
    if (until.expired()) return 0;
  }
}

void unique_fd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);  // Linux: the fd is released even when close() reports EINTR
  fd_ = fd;
}

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns the message (maybe not in buf).
  const char* msg = strerror_r(err, buf, sizeof buf);
  return msg;
}

std::string describe(const io_result& r) {
  switch (r.status) {
    case io_status::ok: return "ok";
    case io_status::timed_out: return "timed out";
    case io_status::closed: return "connection closed by the other side";
    case io_status::failed: return errno_text(r.err);
    case io_status::malformed: return "malformed data: " + r.detail;
  }
  return "unknown";
}

namespace {

// Waits for `events` on fd; false on timeout (errno-style failures are
// reported by the following send/recv).
bool wait_for(int fd, short events, deadline until) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = poll_until(&p, 1, until);
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return true;
  }
}

io_status classify_recv_error(int err) { return err == ECONNRESET ? io_status::closed : io_status::failed; }

}  // namespace

partial_send::partial_send(std::span<const std::span<const std::byte>> pieces) {
  iov_.reserve(pieces.size());
  for (auto p : pieces)
    if (!p.empty()) iov_.push_back(iovec{const_cast<std::byte*>(p.data()), p.size()});
}

io_result partial_send::pump(int fd) {
  while (!done()) {
    msghdr msg{};
    msg.msg_iov = iov_.data() + first_;
    msg.msg_iovlen = std::min<std::size_t>(iov_.size() - first_, IOV_MAX);
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
      const int err = errno;
      return {err == EPIPE || err == ECONNRESET ? io_status::closed : io_status::failed, err, {}};
    }
    auto left = static_cast<std::size_t>(n);
    while (first_ < iov_.size() && left >= iov_[first_].iov_len) left -= iov_[first_++].iov_len;
    if (left > 0) {
      iov_[first_].iov_base = static_cast<char*>(iov_[first_].iov_base) + left;
      iov_[first_].iov_len -= left;
    }
  }
  return {};
}

io_result send_all(int fd, std::span<const std::span<const std::byte>> pieces, deadline until) {
  partial_send message(pieces);
  for (;;) {
    const auto io = message.pump(fd);
    if (!io.ok() || message.done()) return io;
    if (!wait_for(fd, POLLOUT, until)) return {io_status::timed_out, 0, {}};
  }
}

io_result recv_available(int fd, frame_parser& parser) {
  while (!parser.done()) {
    const auto want = parser.want();
    const ssize_t n = ::recv(fd, want.data(), want.size(), 0);
    if (n > 0) {
      if (!parser.commit(static_cast<std::size_t>(n))) return {io_status::malformed, 0, parser.error()};
      continue;
    }
    if (n == 0) return {io_status::closed, 0, {}};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
    const int err = errno;
    return {classify_recv_error(err), err, {}};
  }
  return {};
}

io_result recv_frame(int fd, frame_parser& parser, deadline until) {
  for (;;) {
    auto r = recv_available(fd, parser);
    if (!r.ok() || parser.done()) return r;
    if (!wait_for(fd, POLLIN, until)) return {io_status::timed_out, 0, {}};
  }
}

void sleep_for(std::chrono::milliseconds d, deadline until) {
  const deadline sooner = until.capped(d);
  while (!sooner.expired()) (void)poll_until(nullptr, 0, sooner);
}

void set_nodelay(int fd) noexcept {
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

namespace {

std::string numeric_host(const sockaddr* sa, socklen_t len, std::uint16_t* port) {
  char host[NI_MAXHOST] = "?";
  char serv[NI_MAXSERV] = "0";
  if (::getnameinfo(sa, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) return "?";
  if (port != nullptr) *port = static_cast<std::uint16_t>(std::atoi(serv));
  return host;
}

struct addrinfo_deleter {
  void operator()(addrinfo* ai) const noexcept { ::freeaddrinfo(ai); }
};
using addrinfo_ptr = std::unique_ptr<addrinfo, addrinfo_deleter>;

// getaddrinfo may block on DNS for host names; numeric addresses never do.
int resolve(const host_port& where, bool passive, addrinfo_ptr& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  const std::string port = std::to_string(where.port);
  const int rc = ::getaddrinfo(where.host.c_str(), port.c_str(), &hints, &res);
  out.reset(res);
  return rc;
}

std::string where_text(const host_port& where) { return format_host_port(where.host, where.port); }

}  // namespace

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  std::uint16_t port = 0;
  const std::string host = numeric_host(reinterpret_cast<sockaddr*>(&ss), len, &port);
  return format_host_port(host, port);
}

std::string local_host(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
  const std::string host = numeric_host(reinterpret_cast<sockaddr*>(&ss), len, nullptr);
  return host == "?" ? std::string() : host;
}

result<listener> listen_on(const host_port& where, deadline until) {
  addrinfo_ptr ai;
  if (const int rc = resolve(where, true, ai); rc != 0)
    return unexpected(status::invalid_argument,
                      "cannot resolve bootstrap address " + where_text(where) + ": " + ::gai_strerror(rc), "bootstrap");
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    int last_err = 0;
    bool in_use = false;
    for (addrinfo* a = ai.get(); a != nullptr; a = a->ai_next) {
      unique_fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
      if (!fd) {
        last_err = errno;
        continue;
      }
      const int one = 1;
      (void)::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (a->ai_family == AF_INET6) {
        const int zero = 0;  // "[::]:port" accepts IPv4 peers too
        (void)::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      }
      if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
        last_err = errno;
        in_use = in_use || last_err == EADDRINUSE;
        continue;
      }
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      listener l;
      if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0)
        l.host = numeric_host(reinterpret_cast<sockaddr*>(&ss), len, &l.port);
      l.fd = std::move(fd);
      return l;
    }
    if (!in_use || until.expired())
      return unexpected(status::provider_error,
                        "cannot listen on bootstrap address " + where_text(where) + ": " + errno_text(last_err) +
                            (in_use ? " (set FABRIX_BOOTSTRAP to another port?)" : ""),
                        "bootstrap", last_err);
    sleep_for(backoff, until);  // another process holds the port; it may be about to leave
    backoff = std::min(backoff * 2, std::chrono::milliseconds(250));
  }
}

connect_attempt connect_once(const host_port& where, deadline until) {
  connect_attempt out;
  addrinfo_ptr ai;
  if (const int rc = resolve(where, false, ai); rc != 0) {
    out.error = "cannot resolve " + where.host + ": " + ::gai_strerror(rc);
    out.fatal = rc == EAI_NONAME || rc == EAI_FAMILY || rc == EAI_SERVICE;
    return out;
  }
  for (addrinfo* a = ai.get(); a != nullptr; a = a->ai_next) {
    const std::string addr = numeric_host(a->ai_addr, a->ai_addrlen, nullptr);
    const std::string text = format_host_port(addr, where.port);
    unique_fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) {
      out.error = text + ": " + errno_text(errno);
      continue;
    }
    int err = 0;
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS || err == EINTR) {
        if (!wait_for(fd.get(), POLLOUT, until)) {
          out.error = text + ": connect timed out";
          continue;
        }
        socklen_t len = sizeof err;
        if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err != 0) {
      out.error = text + ": " + errno_text(err);
      continue;
    }
    set_nodelay(fd.get());
    out.fd = std::move(fd);
    out.error.clear();
    return out;
  }
  return out;
}

}  // namespace fabrix::detail::boot
