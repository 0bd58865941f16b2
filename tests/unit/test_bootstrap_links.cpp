// The TCP store's peer-to-peer exchange (bootstrap_exchange::peer_to_peer):
// jobs of forked ranks on the loopback whose collectives run over direct
// links (Bruck allgather, dissemination barrier) instead of through rank 0.
#include "../../src/bootstrap/wire.hpp"
#include "child_process.hpp"

#include <fabrix/bootstrap.hpp>

#include <doctest/doctest.h>

#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

using fabrix::bootstrap;
using fabrix::bootstrap_exchange;
using fabrix::bootstrap_options;
using fabrix::status;
using fxt_child::reap;
using fxt_child::report;
using fxt_child::spawn;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

constexpr double sched_slack_s = 6.0;  // forked ranks beside other suites on two cores

std::string loopback(std::uint16_t port) { return "127.0.0.1:" + std::to_string(port); }
bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }
double seconds_since(steady::time_point t0) { return std::chrono::duration<double>(steady::now() - t0).count(); }

// Rank r's blob in round i: its size varies (0 B included), every byte
// depends on (r, i, position).
std::vector<std::byte> blob_of(int r, int i, std::size_t scale) {
  const std::size_t n = (static_cast<std::size_t>(r) * 7919 + static_cast<std::size_t>(i) * 101) % (scale + 1);
  std::vector<std::byte> b(n);
  for (std::size_t k = 0; k < n; ++k) b[k] = std::byte(static_cast<unsigned>(r * 31 + i * 7 + k * 13) & 0xff);
  return b;
}

// Forks `n` ranks (rank 0 accepts on a root listened here) running `body`;
// returns each rank's exit code.
std::vector<int> run_job(int n, const bootstrap_options& opts, const std::function<int(int, bootstrap&)>& body,
                         std::chrono::milliseconds limit = 60s) {
  auto root = bootstrap::listen(n, "127.0.0.1:0", "links", opts);
  REQUIRE(root);
  const std::uint16_t port = root->port();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pids.push_back(spawn([&, r] {
      if (r != 0) auto closed = std::move(*root);  // not this rank's: its copy of rank 0's listener closes
      auto b = r == 0 ? root->accept() : bootstrap::create(r, n, loopback(port), "links", opts);
      if (!report(r, b, "bootstrap")) return 10;
      return body(r, *b);
    }));
  }
  std::vector<int> codes;
  for (pid_t p : pids) codes.push_back(reap(p, limit));
  return codes;
}

// This process's open sockets, and the port of the one listening (0: none).
struct sockets {
  int count = 0;
  std::uint16_t listening_port = 0;
};
sockets my_sockets() {
  sockets out;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == ::dirfd(d)) continue;
    int listening = 0;
    socklen_t len = sizeof listening;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0) continue;  // not a socket
    ++out.count;
    sockaddr_in a{};
    socklen_t alen = sizeof a;
    if (listening != 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &alen) == 0)
      out.listening_port = ntohs(a.sin_port);
  }
  ::closedir(d);
  return out;
}

bootstrap_options p2p(std::chrono::milliseconds op_timeout = 20000ms) {
  bootstrap_options o{20000ms, op_timeout};
  o.exchange = bootstrap_exchange::peer_to_peer;
  return o;
}

// Allgathers of `rounds` varying blobs and barriers, every byte checked.
int exchange_and_check(int r, bootstrap& b, int rounds, std::size_t scale) {
  CHILD_CHECK(r, contains(b.describe(), "peer-to-peer exchange"));
  for (int i = 0; i < rounds; ++i) {
    auto all = b.allgather(blob_of(r, i, scale));
    if (!report(r, all, "allgather")) return 1;
    CHILD_CHECK(r, all->size() == static_cast<std::size_t>(b.size()));
    for (int s = 0; s < b.size(); ++s) CHILD_CHECK(r, (*all)[static_cast<std::size_t>(s)] == blob_of(s, i, scale));
    if (!report(r, b.barrier(), "barrier")) return 1;
  }
  return 0;
}

}  // namespace

TEST_CASE("peer_to_peer: jobs of 2, 3, 5, 8 and 13 ranks, allgathers of 0 B to 64 KiB and barriers, every byte") {
  for (int n : {2, 3, 5, 8, 13}) {
    CAPTURE(n);
    const auto codes = run_job(n, p2p(), [](int r, bootstrap& b) { return exchange_and_check(r, b, 4, 65536); });
    for (int c : codes) CHECK(c == 0);
  }
}

TEST_CASE("peer_to_peer: once the job formed no rank holds a connection per rank (the table came down the tree)") {
  // 13 ranks: rank 0 admits 12 and passes the table to 4 children (1, 2, 4,
  // 8), rank 1 to 3, 5, 9, ... After create() every rank holds its link
  // listener and at most the 4 links whose sources had the table first
  // (rank 0 admitted 12 ranks: it would hold 12 on the star); after the
  // first collective the 2 * ceil(log2 13) = 8 links and no listener.
  const int n = 13;
  const auto codes = run_job(n, p2p(), [](int r, bootstrap& b) {
    const sockets formed = my_sockets();
    std::fprintf(stderr, "rank %d holds %d socket(s) after create()\n", r, formed.count);
    CHILD_CHECK(r, formed.count >= 1 && formed.count <= 1 + 4);
    CHILD_CHECK(r, formed.listening_port != 0);
    if (!report(r, b.barrier(), "barrier")) return 1;
    const sockets linked = my_sockets();
    CHILD_CHECK(r, linked.count == 8);
    CHILD_CHECK(r, linked.listening_port == 0);
    return exchange_and_check(r, b, 2, 1000);
  });
  for (int c : codes) CHECK(c == 0);
}

TEST_CASE("peer_to_peer: strays on a rank's link listener are closed and the job completes") {
  // Each rank sends a stray at its own listener before the first
  // collective: one that sends nothing, one that sends garbage, one with a
  // well-formed link hello of the right source and round made with another
  // token. None holds up the links; the collectives move every byte.
  const int n = 5;
  const auto codes = run_job(n, p2p(), [](int r, bootstrap& b) {
    const std::uint16_t port = my_sockets().listening_port;
    CHILD_CHECK(r, port != 0);
    std::vector<int> strays;
    for (int kind = 0; kind < 3; ++kind) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      CHILD_CHECK(r, ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
      if (kind == 1) {
        const std::vector<std::byte> junk(64, std::byte{0x5a});
        CHILD_CHECK(r, ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL) == 64);
      } else if (kind == 2) {
        fabrix::detail::boot::nonce nonce{};
        const int source = (r + 1) % n;  // round 0's source
        const auto hello = fabrix::detail::boot::encode_link_hello("not-the-token", n, source, 0, nonce);
        CHILD_CHECK(r, ::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) == 64);
      }
      strays.push_back(fd);
    }
    const int code = exchange_and_check(r, b, 2, 1000);
    for (int fd : strays) {  // each was closed by the rank, never answered
      const timeval wait{5, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
      std::byte got[256];
      // EOF, or a reset where the rank closed with some of the stray's bytes
      // still unread (the kernel then sends RST, not FIN); not a timeout
      // (EAGAIN: left open) and no bytes.
      const ssize_t n_got = ::recv(fd, got, sizeof got, 0);
      CHILD_CHECK(r, n_got == 0 || (n_got < 0 && errno == ECONNRESET));
      ::close(fd);
    }
    return code;
  });
  for (int c : codes) CHECK(c == 0);
}

TEST_CASE("peer_to_peer: 4 MiB per rank over 5 ranks (both directions of a link busy at once) completes") {
  const auto codes = run_job(5, p2p(), [](int r, bootstrap& b) {
    std::vector<std::byte> mine(4u << 20, std::byte(r + 1));
    auto all = b.allgather(mine);
    if (!report(r, all, "allgather")) return 1;
    for (int s = 0; s < 5; ++s) {
      const auto& got = (*all)[static_cast<std::size_t>(s)];
      CHILD_CHECK(r, got.size() == (4u << 20));
      CHILD_CHECK(r, got.front() == std::byte(s + 1) && got.back() == std::byte(s + 1));
    }
    return 0;
  });
  for (int c : codes) CHECK(c == 0);
}

TEST_CASE("exchange: star up to 8 ranks, peer_to_peer above; FABRIX_BOOTSTRAP_EXCHANGE on rank 0 decides") {
  const auto star_of_4 = run_job(4, bootstrap_options{20000ms, 20000ms}, [](int r, bootstrap& b) {
    CHILD_CHECK(r, contains(b.describe(), "star exchange"));
    return b.barrier() ? 0 : 1;
  });
  for (int c : star_of_4) CHECK(c == 0);
  const auto p2p_of_9 = run_job(9, bootstrap_options{20000ms, 20000ms}, [](int r, bootstrap& b) {
    CHILD_CHECK(r, contains(b.describe(), "peer-to-peer exchange"));
    return exchange_and_check(r, b, 1, 1000);
  });
  for (int c : p2p_of_9) CHECK(c == 0);
  // Only rank 0 reads the variable (it is set in the parent, so every fork
  // inherits it: the other ranks ignore it and follow the welcome).
  ::setenv("FABRIX_BOOTSTRAP_EXCHANGE", "peer_to_peer", 1);
  const auto forced = run_job(3, bootstrap_options{20000ms, 20000ms},
                              [](int r, bootstrap& b) { return exchange_and_check(r, b, 2, 5000); });
  ::setenv("FABRIX_BOOTSTRAP_EXCHANGE", "ring", 1);
  auto root = bootstrap::listen(2, "127.0.0.1:0", "links", bootstrap_options{2000ms, 2000ms});
  REQUIRE(root);
  auto bad = root->accept();
  ::unsetenv("FABRIX_BOOTSTRAP_EXCHANGE");
  for (int c : forced) CHECK(c == 0);
  REQUIRE_FALSE(bad);
  CHECK(bad.code() == status::invalid_argument);
  CHECK(contains(bad.error().message, "FABRIX_BOOTSTRAP_EXCHANGE=ring"));
}

TEST_CASE("peer_to_peer: a rank killed after the links formed fails every other rank fast, none times out") {
  const int n = 6, victim = 3;
  const auto codes = run_job(n, p2p(10000ms), [](int r, bootstrap& b) {
    if (!report(r, b.barrier(), "barrier")) return 1;  // the links are up
    if (r == victim) ::kill(::getpid(), SIGKILL);
    const auto t0 = steady::now();
    auto all = b.allgather(blob_of(r, 0, 100));
    CHILD_CHECK(r, !all);
    std::fprintf(stderr, "rank %d (expected failure): %s\n", r, all.error().describe().c_str());
    CHILD_CHECK(r, all.code() == status::peer_unreachable);
    CHILD_CHECK(r, seconds_since(t0) < sched_slack_s);               // found, not the 10 s timeout
    CHILD_CHECK(r, b.barrier().code() == status::peer_unreachable);  // stays failed
    return 0;
  });
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(codes[static_cast<std::size_t>(r)] == (r == victim ? -1 : 0));
  }
}

TEST_CASE("peer_to_peer: a rank killed before the links formed fails every other rank fast") {
  // No rank holds a connection to rank 0 any more: the ranks linked to the
  // victim find it gone, the others see their links close as the failure
  // spreads. Exit code 2: the message names the victim.
  const int n = 5, victim = 2;
  const auto codes = run_job(n, p2p(10000ms), [](int r, bootstrap& b) {
    if (r == victim) ::kill(::getpid(), SIGKILL);
    const auto t0 = steady::now();
    auto all = b.allgather(blob_of(r, 0, 100));
    CHILD_CHECK(r, !all);
    std::fprintf(stderr, "rank %d (expected failure): %s\n", r, all.error().describe().c_str());
    CHILD_CHECK(r, all.code() == status::peer_unreachable);
    CHILD_CHECK(r, seconds_since(t0) < sched_slack_s);
    return contains(all.error().message, "rank 2 ") ? 2 : 0;
  });
  int named = 0;
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    const int c = codes[static_cast<std::size_t>(r)];
    CHECK(c == (r == victim ? -1 : c == 2 ? 2 : 0));
    named += c == 2;
  }
  // At least the first rank to find it gone names rank 2. Ranks 3 and 4
  // both link to it, but a rank that first tries a neighbour which has
  // already left (having failed on rank 2) names that neighbour: seen here,
  // rank 3 named rank 2 and exited, then ranks 0 and 4 found rank 3 gone.
  CHECK(named >= 1);
}

TEST_CASE("peer_to_peer: a link partner dying after its link formed fails the rank still forming others") {
  // Three ranks: rank 0 links to 2 (round 0) and 1 (round 1); rank 2 welcomes
  // rank 0's link, then dies while everyone waits for rank 1, which sleeps.
  // Rank 0 must learn it from the formed link itself: when rank 1 wakes, it
  // fails on rank 2 and only drops a link rank 0 was still forming.
  const int n = 3, victim = 2;
  const auto codes = run_job(n, p2p(10000ms), [](int r, bootstrap& b) {
    if (r == victim) {
      const itimerval in_300ms{{0, 0}, {0, 300'000}};
      ::signal(SIGALRM, SIG_DFL);
      ::setitimer(ITIMER_REAL, &in_300ms, nullptr);  // dies inside the allgather below
    }
    if (r == 1) std::this_thread::sleep_for(2s);
    auto all = b.allgather(blob_of(r, 0, 100));
    CHILD_CHECK(r, !all);
    std::fprintf(stderr, "rank %d (expected failure): %s\n", r, all.error().describe().c_str());
    CHILD_CHECK(r, all.code() == status::peer_unreachable);
    return contains(all.error().message, "rank 2 ") ? 2 : 0;
  });
  CHECK(codes[0] == 2);                     // named the victim, not rank 1 (nor a timeout)
  CHECK((codes[1] == 0 || codes[1] == 2));  // failed on rank 0 (gone by then) or on the victim
  CHECK(codes[2] == -1);
}

TEST_CASE("peer_to_peer: ranks calling different collectives are detected") {
  const auto codes = run_job(4, p2p(5000ms), [](int r, bootstrap& b) {
    if (!report(r, b.barrier(), "barrier")) return 1;
    const std::vector<std::byte> mine(8, std::byte{1});
    // Rank 1 calls a barrier where the others call an allgather.
    std::string message;
    status code = status::ok;
    if (r == 1) {
      auto ok = b.barrier();
      CHILD_CHECK(r, !ok);
      code = ok.code();
      message = ok.error().message;
    } else {
      auto all = b.allgather(mine);
      CHILD_CHECK(r, !all);
      code = all.code();
      message = all.error().message;
    }
    // The ranks linked to rank 1 in the first round see the mismatch; the
    // rest see their links close.
    if (contains(message, "mismatch")) return code == status::invalid_argument ? 2 : 1;
    return code == status::peer_unreachable ? 0 : 1;
  });
  int saw_mismatch = 0;
  for (int c : codes) {
    CHECK((c == 0 || c == 2));
    saw_mismatch += c == 2;
  }
  CHECK(saw_mismatch >= 1);
}

TEST_CASE(
    "traffic: peer_to_peer sends about N - 1 blobs per rank, rank 0 included; the star sends N (N - 1) from rank 0") {
  constexpr int n = 9;
  constexpr std::size_t blob = 32768;
  // Each rank exits with 0 when its bytes sent by one allgather are within
  // the bounds of its exchange, else 1 (the numbers go to stderr).
  const auto measure = [](bootstrap_exchange e) {
    bootstrap_options o{20000ms, 20000ms};
    o.exchange = e;
    return run_job(n, o, [e](int r, bootstrap& b) {
      if (!report(r, b.barrier(), "barrier")) return 1;  // links formed, handshakes counted before
      std::this_thread::sleep_for(100ms);                // the last frames acknowledged
      const auto before = b.traffic();
      CHILD_CHECK(r, before.has_value());
      if (!report(r, b.allgather(std::vector<std::byte>(blob, std::byte(r))), "allgather")) return 1;
      if (!report(r, b.barrier(), "barrier")) return 1;  // every rank has received every blob
      std::this_thread::sleep_for(100ms);
      const auto sent = b.traffic()->bytes_sent - before->bytes_sent;
      std::fprintf(stderr, "%s rank %d sent %llu bytes\n", e == bootstrap_exchange::star ? "star" : "p2p", r,
                   static_cast<unsigned long long>(sent));
      const std::size_t blobs = e == bootstrap_exchange::peer_to_peer ? n - 1 : (r == 0 ? n * (n - 1) : 1);
      CHILD_CHECK(r, sent >= blobs * blob);
      CHILD_CHECK(r, sent < blobs * blob + 16384);  // framing, MACs, the barrier
      return 0;
    });
  };
  for (int c : measure(bootstrap_exchange::peer_to_peer)) CHECK(c == 0);
  for (int c : measure(bootstrap_exchange::star)) CHECK(c == 0);
}
