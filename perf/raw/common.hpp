// What raw_ofi and raw_ucx share: the command line, the plan of measurements
// (fabrix-perf's sizes, iteration and warmup defaults), the loopback TCP
// socket both sides set up and synchronise over, and the JSON lines they print.
//
// Contracts:
// - The socket binds and connects to 127.0.0.1 only. It carries setup
//   (options, addresses, keys) and the untimed step handshakes; nothing on it
//   is inside a timed loop.
// - Both sides derive the same plan from the same options; the client sends
//   its options text first and the server refuses (exit 2, both) on any
//   difference.
// - stdout carries JSON lines only (one header, then one per measurement,
//   printed by the client once its data checks and the peer's passed);
//   messages go to stderr. Exit status: 0 measured and checked, 1 run-time
//   failure or wrong byte, 2 bad options.
#pragma once

#include "../failure.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace fabrix::raw {

using perf::fail;
using perf::fail_usage;
using perf::failure;

enum class test_kind { write, read, send };
enum class mode_kind { bw, lat };

inline const char* name(test_kind t) {
  return t == test_kind::write ? "write" : t == test_kind::read ? "read" : "send";
}
inline const char* name(mode_kind m) { return m == mode_kind::bw ? "bw" : "lat"; }

// One measurement, in the order both sides run them.
struct step {
  test_kind test;
  mode_kind mode;
  std::uint64_t size;
  std::uint64_t iters;
  std::uint64_t warmup;
};

struct options {
  std::vector<std::pair<test_kind, mode_kind>> tests;  // default: write:bw, read:bw, write:lat, send:lat
  std::vector<std::uint64_t> sizes{8, 4096, 65536};
  std::uint64_t iters = 0;         // 0: fabrix-perf's automatic count per size
  std::int64_t warmup = -1;        // -1: fabrix-perf's min(100, iters / 10)
  int tx_depth = 128;              // bw: operations in flight (fabrix-perf -t)
  int post_list = 1;               // bw: operations per post call (fabrix-perf -l)
  std::string provider;            // raw_ofi: libfabric provider name ("shm", "tcp;ofi_rxm")
  std::string transport;           // raw_ucx: UCX_TLS (empty: the environment's)
  std::string alloc = "provider";  // raw_ucx: ucp_mem_map ALLOCATE, or "user" (mmap + map)
  bool inject = true;              // raw_ofi: fi_inject* at or below inject_size in the latency loops
  bool delivery_complete = false;  // raw_ofi: writes and sends with FI_DELIVERY_COMPLETE (fabrix's semantics)
  bool loopback = false;
  bool server = false;  // neither: client of 127.0.0.1:port
  int port = 18516;
  int timeout_s = 60;
};

// fabrix-perf's iteration count when -n is not given (perf/options.cpp
// auto_iters; keep the two equal): perftest's 5000 bw / 1000 lat, fewer at
// large sizes.
inline std::uint64_t auto_iters(mode_kind m, std::uint64_t size) {
  const std::uint64_t base = m == mode_kind::bw ? 5000 : 1000;
  const std::uint64_t budget = m == mode_kind::bw ? (std::uint64_t{256} << 20) : (std::uint64_t{32} << 20);
  const std::uint64_t floor = m == mode_kind::bw ? 64 : 16;
  return std::clamp<std::uint64_t>(budget / std::max<std::uint64_t>(size, 1), floor, base);
}

inline std::vector<step> plan(const options& o) {
  std::vector<step> steps;
  for (auto [t, m] : o.tests)
    for (std::uint64_t s : o.sizes) {
      const std::uint64_t n = o.iters ? o.iters : auto_iters(m, s);
      const std::uint64_t w =
          o.warmup >= 0 ? static_cast<std::uint64_t>(o.warmup) : std::min<std::uint64_t>(100, n / 10);
      steps.push_back({t, m, s, n, w});
    }
  return steps;
}

// The options both sides must agree on.
inline std::string agreement(const options& o) {
  std::string s = "tests=";
  for (auto [t, m] : o.tests) s += std::string(name(t)) + ":" + name(m) + ",";
  s += " sizes=";
  for (auto z : o.sizes) s += std::to_string(z) + ",";
  s += " iters=" + std::to_string(o.iters) + " warmup=" + std::to_string(o.warmup) +
       " depth=" + std::to_string(o.tx_depth) + " list=" + std::to_string(o.post_list) + " provider=" + o.provider +
       " transport=" + o.transport + " alloc=" + o.alloc + " inject=" + std::to_string(o.inject) +
       " dc=" + std::to_string(o.delivery_complete);
  return s;
}

inline std::string common_usage() {
  return R"(  --loopback             run server and client here (forks the server)
  --server                the server side, on 127.0.0.1:PORT (the client runs without it)
  --tests LIST            write:bw,read:bw,write:lat,send:lat (default all four)
  -s, --sizes LIST        message sizes, comma-separated, K/M suffixes (default 8,4096,65536)
  -n, --iters N           iterations per size (default fabrix-perf's: 5000 bw / 1000 lat, fewer at large sizes)
      --iters-warmup N    untimed iterations first (default min(100, iters/10))
  -t, --tx-depth N        bw: operations in flight (default 128)
  -l, --post-list N       bw: operations per post (default 1)
  -p, --port PORT         the setup socket's port on 127.0.0.1 (default 18516)
      --timeout S         give up on a silent peer after S seconds (default 60)
  -h, --help
stdout: JSON lines (a header, then one per measurement with fabrix-perf's
result keys). Exit status: 0 measured and every checked byte right; 1 a
run-time failure or a wrong byte; 2 bad options or the sides disagree.
)";
}

inline std::optional<std::uint64_t> parse_size(std::string_view s) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p == s.data() || v == 0) return std::nullopt;
  const std::string_view rest(p, static_cast<std::size_t>(s.data() + s.size() - p));
  if (rest == "K" || rest == "k") return v << 10;
  if (rest == "M" || rest == "m") return v << 20;
  if (!rest.empty()) return std::nullopt;
  return v;
}

// Parses the shared options; `extra(arg, value_or_null)` handles the tool's
// own (returns the number of arguments it used: 0 unknown, 1 flag, 2 with
// value). Throws failure(2) on anything wrong; sets `help`.
inline options parse(int argc, char** argv, bool& help,
                     const std::function<int(std::string_view, const char*, options&)>& extra) {
  options o;
  auto number = [](std::string_view what, const char* v, long lo, long hi) {
    long n = 0;
    const std::string_view s = v ? v : "";
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc() || p != s.data() + s.size() || n < lo || n > hi)
      fail_usage("bad value for " + std::string(what) + ": '" + std::string(s) + "'");
    return n;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    auto value = [&] {
      if (!v) fail_usage(std::string(a) + " needs a value");
      ++i;
      return std::string_view(v);
    };
    if (a == "-h" || a == "--help") {
      help = true;
      return o;
    } else if (a == "--loopback") {
      o.loopback = true;
    } else if (a == "--server") {
      o.server = true;
    } else if (a == "--tests") {
      std::string_view list = value();
      o.tests.clear();
      while (!list.empty()) {
        const auto comma = list.find(',');
        const std::string_view one = list.substr(0, comma);
        if (one == "write:bw")
          o.tests.emplace_back(test_kind::write, mode_kind::bw);
        else if (one == "read:bw")
          o.tests.emplace_back(test_kind::read, mode_kind::bw);
        else if (one == "write:lat")
          o.tests.emplace_back(test_kind::write, mode_kind::lat);
        else if (one == "send:lat")
          o.tests.emplace_back(test_kind::send, mode_kind::lat);
        else
          fail_usage("unknown test '" + std::string(one) + "' (write:bw, read:bw, write:lat, send:lat)");
        list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
      }
    } else if (a == "-s" || a == "--sizes") {
      std::string_view list = value();
      o.sizes.clear();
      while (!list.empty()) {
        const auto comma = list.find(',');
        auto s = parse_size(list.substr(0, comma));
        if (!s || *s > (std::uint64_t{1} << 30)) fail_usage("bad size in '" + std::string(list) + "'");
        o.sizes.push_back(*s);
        list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
      }
    } else if (a == "-n" || a == "--iters") {
      o.iters = static_cast<std::uint64_t>(number(a, v, 1, 1L << 40));
      ++i;
    } else if (a == "--iters-warmup") {
      o.warmup = number(a, v, 0, 1L << 40);
      ++i;
    } else if (a == "-t" || a == "--tx-depth") {
      o.tx_depth = static_cast<int>(number(a, v, 1, 8192));
      ++i;
    } else if (a == "-l" || a == "--post-list") {
      o.post_list = static_cast<int>(number(a, v, 1, 1024));
      ++i;
    } else if (a == "-p" || a == "--port") {
      o.port = static_cast<int>(number(a, v, 1, 65535));
      ++i;
    } else if (a == "--timeout") {
      o.timeout_s = static_cast<int>(number(a, v, 1, 3600));
      ++i;
    } else if (int used = extra(a, v, o); used > 0) {
      i += used - 1;
    } else {
      fail_usage("unknown option '" + std::string(a) + "' (see --help)");
    }
  }
  if (o.tests.empty())
    o.tests = {{test_kind::write, mode_kind::bw},
               {test_kind::read, mode_kind::bw},
               {test_kind::write, mode_kind::lat},
               {test_kind::send, mode_kind::lat}};
  if (o.sizes.empty()) fail_usage("no sizes");
  if (o.post_list > o.tx_depth) fail_usage("-l (post list) must not exceed -t (tx depth)");
  if (o.loopback && o.server) fail_usage("--loopback runs both sides; --server is one of them");
  return o;
}

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
  template <class Progress>
  std::uint64_t recv_progressing(Progress&& progress, int timeout_s) {
    deadline until(timeout_s);
    for (std::uint64_t spin = 1;; ++spin) {
      progress();
      if ((spin & 63) == 0 && readable()) break;
      if (until.passed()) fail("no word from the peer for " + std::to_string(timeout_s) + " s");
    }
    std::uint64_t v = 0;
    recv(&v, sizeof v);
    return v;
  }
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

// JSON string (names and describe() texts: no control characters expected).
inline std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  return out + "\"";
}

inline std::string number(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

}  // namespace fabrix::raw
