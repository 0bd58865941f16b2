// Multi-process test harness: each rank is a forked child with its own
// domain, connected to the others through the real bootstrap. The doctest
// process only supervises; it never opens a provider, so forking is safe.
// Which bootstrap engine the ranks use (the TCP store, user callbacks, or a
// launcher's job under mpirun, where this process is one rank and nothing is
// forked): FABRIX_TEST_BOOTSTRAP, rank_bootstrap.hpp.
//
// Inside a rank, FX_CHECK fails by printing the failed expression and
// exiting with code 1; the supervisor turns each rank's exit into a doctest
// check. A rank that exceeds the time limit is killed and fails the test.
//
// Ranks on simulated nodes (tests/nodes): FABRIX_TEST_NODES=ns1,ns2,...
// names network namespaces made with `ip netns add` (/var/run/netns/NAME),
// FABRIX_TEST_NODE_ADDRS the address of each node inside its namespace, in
// the same order. Rank r then runs on node r % k: right after fork it enters
// that namespace (setns), UTS and mount namespaces of its own (the
// namespace's name as host name, a /sys of that network namespace, as `ip
// netns exec` makes), and points the providers at the interface holding the
// node's address (UCX_NET_DEVICES, FI_TCP_IFACE). The bootstrap root listens
// on node 0's address inside node 0's namespace; every node reaches it over
// its links. Unset, ranks share this process's network stack, the root
// listens on 127.0.0.1 and the providers' tcp transports are pinned to the
// loopback interface (use_loopback_only), unless the run names a device.
#pragma once

#include <doctest/doctest.h>
#include <fabrix/fabrix.hpp>

#include "../support/current_case.hpp"
#include "../support/scoped_env.hpp"
#include "crash_report.hpp"
#include "hang_report.hpp"
#include "rank_bootstrap.hpp"

#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <vector>

namespace fxt {

// Names the case too: the rank exits before doctest could say which it was.
[[noreturn]] inline void rank_fail(const char* what, const char* file, int line, const std::string& detail = {}) {
  std::fprintf(stderr, "rank %d: %s:%d: check failed: %s %s%s%s\n", static_cast<int>(::getpid()), file, line, what,
               detail.c_str(), current_case.empty() ? "" : " in case: ", current_case.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}
// The same, at a caller's line (helpers that wait on the caller's behalf).
[[noreturn]] inline void rank_fail(const char* what, std::source_location where, const std::string& detail = {}) {
  rank_fail(what, where.file_name(), static_cast<int>(where.line()), detail);
}

#define FX_CHECK(...)                                                       \
  do {                                                                      \
    if (!(__VA_ARGS__)) ::fxt::rank_fail(#__VA_ARGS__, __FILE__, __LINE__); \
  } while (0)

#define FX_CHECK_STATUS(expr, expected)                                          \
  do {                                                                           \
    const ::fabrix::status fx_s_ = (expr);                                       \
    if (fx_s_ != (expected))                                                     \
      ::fxt::rank_fail(#expr " == " #expected, __FILE__, __LINE__,               \
                       "(got " + std::string(::fabrix::to_string(fx_s_)) + ")"); \
  } while (0)

template <class R>
auto must(R&& r, const char* what) {
  if (!r) rank_fail(what, __FILE__, __LINE__, r.error().describe());
  return std::move(*r);
}

// How a rank is expected to end.
enum class ending { exit_ok, killed };

// The simulated nodes of FABRIX_TEST_NODES / FABRIX_TEST_NODE_ADDRS (see
// the top of this file); empty when unset.
struct test_nodes {
  std::vector<std::string> names;  // network namespaces, /var/run/netns/NAME
  std::vector<std::string> addrs;  // each node's IPv4 address there

  bool empty() const { return names.empty(); }
  std::size_t of(int rank) const { return static_cast<std::size_t>(rank) % names.size(); }

  static std::vector<std::string> split(const char* list) {
    std::vector<std::string> out;
    std::string item;
    for (const char* p = list ? list : ""; *p; ++p) {
      if (*p == ',') {
        out.push_back(item);
        item.clear();
      } else {
        item += *p;
      }
    }
    if (!item.empty()) out.push_back(item);
    return out;
  }
  static test_nodes from_env() {
    test_nodes t;
    t.names = split(std::getenv("FABRIX_TEST_NODES"));
    t.addrs = split(std::getenv("FABRIX_TEST_NODE_ADDRS"));
    return t;
  }
};

// Enters network namespace `name` (this thread); false with errno set when it cannot.
inline bool enter_netns(const std::string& name) {
  const int fd = ::open(("/var/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const int rc = ::setns(fd, CLONE_NEWNET);
  const int e = errno;
  ::close(fd);
  errno = e;
  return rc == 0;
}

// The interface that holds IPv4 address `addr` in this network namespace; empty when none.
inline std::string interface_of(const std::string& addr) {
  in_addr want{};
  if (::inet_pton(AF_INET, addr.c_str(), &want) != 1) return {};
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  std::string name;
  for (ifaddrs* i = list; i && name.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if (reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == want.s_addr) name = i->ifa_name;
  }
  ::freeifaddrs(list);
  return name;
}

// In a forked rank: move onto its simulated node (see the top of this file).
inline void enter_node(const test_nodes& nodes, int rank) {
  const std::string& ns = nodes.names[nodes.of(rank)];
  const std::string& addr = nodes.addrs[nodes.of(rank)];
  if (!enter_netns(ns))
    rank_fail("setns into the node's network namespace", __FILE__, __LINE__, ns + ": " + std::strerror(errno));
  // /sys/class/net shows the interfaces of the namespace /sys was mounted
  // in (UCX lists devices there): a mount namespace of its own with a fresh
  // sysfs, as `ip netns exec` does.
  if (::unshare(CLONE_NEWUTS | CLONE_NEWNS) != 0)
    rank_fail("unshare(CLONE_NEWUTS | CLONE_NEWNS)", __FILE__, __LINE__, std::strerror(errno));
  if (::mount(nullptr, "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0)
    rank_fail("mount --make-rslave /", __FILE__, __LINE__, std::strerror(errno));
  ::umount2("/sys", MNT_DETACH);
  if (::mount("sysfs", "/sys", "sysfs", 0, nullptr) != 0)
    rank_fail("mount sysfs on /sys", __FILE__, __LINE__, std::strerror(errno));
  if (::sethostname(ns.data(), ns.size()) != 0) rank_fail("sethostname", __FILE__, __LINE__, std::strerror(errno));
  const std::string iface = interface_of(addr);
  if (iface.empty()) rank_fail("the node's address is on an interface", __FILE__, __LINE__, addr + " in " + ns);
  // Only the node's link: loopback would reach this node's own ranks under
  // an address that means another process on every other node. A routed
  // run whose route names its devices (rails: "net=ofi:tcp@fxr0,fxr1")
  // opens exactly those, and a variable naming one interface would hide
  // the others from the provider.
  const char* route = std::getenv("FABRIX_TEST_TRANSPORT");
  if (route != nullptr && std::strchr(route, '@') != nullptr) return;
  ::setenv("UCX_NET_DEVICES", iface.c_str(), 1);
  ::setenv("FI_TCP_IFACE", iface.c_str(), 1);
}

// Ranks on one node talk over the loopback interface only: without this,
// UCX's tcp and libfabric's tcp pick the host's first network interface
// (eth0), whose address the kernel delivers locally too, but a test must
// not depend on (or send to) any address it did not make. A variable the
// run already sets (the VM suites name rxe0) is left as it is.
inline void use_loopback_only() {
  ::setenv("UCX_NET_DEVICES", "lo", 0);
  ::setenv("FI_TCP_IFACE", "lo", 0);
}

// FABRIX_TEST_SPLIT_NODES=k: rank r counts as node r % k (FABRIX_NODE_ID,
// process_identity.hpp), so that a routed domain on one host has node-mates
// and peers on other nodes. Unset or empty: nothing changes.
inline void split_node_ids(int rank) {
  const char* k = std::getenv("FABRIX_TEST_SPLIT_NODES");
  if (k == nullptr || *k == '\0') return;
  const int nodes = std::atoi(k);
  if (nodes < 1) rank_fail("FABRIX_TEST_SPLIT_NODES", __FILE__, __LINE__, std::string("not a count: ") + k);
  ::setenv("FABRIX_NODE_ID", ("fxt-node-" + std::to_string(rank % nodes)).c_str(), 1);
}

// rank 0's listening socket: on 127.0.0.1, or on node 0's address inside its
// network namespace (the socket stays there; this process goes back).
inline fabrix::result<fabrix::bootstrap_root> listen_root(int n, const test_nodes& nodes) {
  if (nodes.empty()) return fabrix::bootstrap::listen(n, "127.0.0.1:0", "fabrix-test");
  const int home = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  REQUIRE_MESSAGE(home >= 0, "open /proc/self/ns/net: " << std::strerror(errno));
  if (!enter_netns(nodes.names[0])) {
    const int e = errno;
    ::close(home);
    FAIL("setns into " << nodes.names[0] << ": " << std::strerror(e));
  }
  auto root = fabrix::bootstrap::listen(n, nodes.addrs[0] + ":0", "fabrix-test");
  const int back = ::setns(home, CLONE_NEWNET);
  ::close(home);
  REQUIRE_MESSAGE(back == 0, "setns back: " << std::strerror(errno));
  return root;
}

// Under a launcher (rank_bootstrap.hpp): this process runs its rank of an
// n-rank case, or stands by. A rank that fails exits (rank_fail), which
// fails the launcher's job. Cases that kill a rank need forked ranks.
inline void run_in_job(int n, const std::function<void(int, fabrix::bootstrap&)>& body,
                       const std::function<ending(int)>& expected) {
  for (int r = 0; expected && r < n; ++r)
    REQUIRE_MESSAGE(expected(r) == ending::exit_ok,
                    "this case kills rank " << r << ": it needs forked ranks (FABRIX_TEST_BOOTSTRAP tcp or callbacks)");
  fabrix::bootstrap& job = launcher_job();
  REQUIRE_MESSAGE(n <= job.size(), "the case needs " << n << " ranks; the launcher's job has " << job.size());
  std::fflush(stdout);
  if (job.rank() >= n) {
    if (auto s = subset_view::stand_by(job, n); !s) rank_fail("standing by", __FILE__, __LINE__, s.error().describe());
    return;
  }
  report_crashes(job.rank());
  auto engine = std::make_unique<subset_view>(job, n);
  subset_view* view = engine.get();
  fabrix::bootstrap boot(std::move(engine));
  body(job.rank(), boot);
  if (auto f = view->finish(); !f) rank_fail("finishing the case", __FILE__, __LINE__, f.error().describe());
  std::fflush(stdout);
}

// Forks `n` ranks running body(rank, bootstrap) and checks how each ended;
// under a launcher, runs this process's rank instead (run_in_job).
inline void run_ranks(int n, const std::function<void(int, fabrix::bootstrap&)>& body,
                      std::chrono::seconds limit = std::chrono::seconds(90),
                      const std::function<ending(int)>& expected = {}) {
  std::string why;
  const auto start = rank_start_from_env(why);
  REQUIRE_MESSAGE(start.has_value(), why);
  if (*start == rank_start::launcher) return run_in_job(n, body, expected);
  const test_nodes nodes = test_nodes::from_env();
  REQUIRE_MESSAGE(nodes.names.size() == nodes.addrs.size(), "FABRIX_TEST_NODES and FABRIX_TEST_NODE_ADDRS name "
                                                                << nodes.names.size() << " and " << nodes.addrs.size()
                                                                << " nodes");
  const bool by_callbacks = *start == rank_start::callbacks;
  REQUIRE_MESSAGE((!by_callbacks || nodes.empty()), "FABRIX_TEST_BOOTSTRAP=callbacks runs on one node only");
  file_store store(by_callbacks ? n : 0);
  REQUIRE_MESSAGE((!by_callbacks || store.ok()), "file store: mkdtemp failed: " << std::strerror(errno));
  struct cleanup {
    file_store& s;
    ~cleanup() { s.remove(); }
  } remove_store{store};
  std::optional<fabrix::bootstrap_root> root;
  std::string where;
  if (!by_callbacks) {
    auto listening = listen_root(n, nodes);
    REQUIRE_MESSAGE(listening.has_value(), (listening ? "" : listening.error().describe()));
    where = (nodes.empty() ? std::string("127.0.0.1") : nodes.addrs[0]) + ":" + std::to_string(listening->port());
    root.emplace(std::move(*listening));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      report_crashes(rank);
      if (!nodes.empty())
        enter_node(nodes, rank);
      else
        use_loopback_only();
      split_node_ids(rank);
      auto boot = by_callbacks ? fabrix::bootstrap::from_callbacks(store.callbacks_for(rank))
                  : rank == 0  ? root->accept()
                               : fabrix::bootstrap::create(rank, n, where, "fabrix-test");
      if (!boot) rank_fail("bootstrap", __FILE__, __LINE__, boot.error().describe());
      body(rank, *boot);
      std::fflush(stdout);
      std::_Exit(0);
    }
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<int> statuses(n, -1);
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (statuses[r] != -1) continue;
      int st = 0;
      if (::waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        statuses[r] = st;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::string hung;
      for (int r = 0; r < n; ++r) {
        if (statuses[r] != -1) continue;
        hung += "rank " + std::to_string(r) + " was at:\n" + stack_of(pids[r]);
        ::kill(pids[r], SIGKILL);
      }
      FAIL_CHECK("ranks did not finish within " << limit.count() << " s (killed)\n" << hung);
      for (int r = 0; r < n; ++r)
        if (statuses[r] == -1) ::waitpid(pids[r], &statuses[r], 0);
      return;
    }
    ::usleep(2000);
  }
  for (int r = 0; r < n; ++r) {
    const ending want = expected ? expected(r) : ending::exit_ok;
    const int st = statuses[r];
    if (want == ending::exit_ok) {
      CHECK_MESSAGE((WIFEXITED(st) && WEXITSTATUS(st) == 0), "rank " << r << " failed: " << describe_ending(st));
    } else {
      CHECK_MESSAGE((WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL),
                    "rank " << r << " should have been killed, but " << describe_ending(st));
    }
  }
}

// Which transport the suite runs on: FABRIX_TEST_TRANSPORT, in the provider's
// own terms (a UCX_TLS list, a libfabric provider name, ...).
inline fabrix::domain_options test_options() {
  fabrix::domain_options o;
  if (const char* t = std::getenv("FABRIX_TEST_TRANSPORT")) o.transport = t;
  return o;
}

// One rank's view of a job: its domain, a queue pair per rank, and a
// backlog so that waiting for one kind of completion never drops another.
template <class P>
struct rank_env {
  int rank;
  int size;
  fabrix::bootstrap& boot;
  fabrix::domain<P> dom;
  std::vector<fabrix::queue_pair<P>> qps;
  std::deque<fabrix::completion> backlog;

  rank_env(int r, fabrix::bootstrap& b, fabrix::domain<P> d)
      : rank(r), size(b.size()), boot(b), dom(std::move(d)), qps(must(fabrix::connect_all(dom, boot), "connect_all")) {}

  fabrix::memory_region<P> reg(std::vector<std::byte>& buf, fabrix::access rights = fabrix::access::all_remote) {
    return must(dom.register_memory(buf, rights), "register_memory");
  }
  std::vector<fabrix::remote_buffer> share(const fabrix::memory_region<P>& mr) {
    return must(fabrix::exchange(boot, mr.remote()), "exchange");
  }
  // share() for many regions in one allgather (a launcher's engine pays per
  // collective): result[i][r] is rank r's remote_buffer of regions[i].
  std::vector<std::vector<fabrix::remote_buffer>> share_all(const std::vector<fabrix::memory_region<P>>& regions) {
    std::vector<std::byte> mine;
    for (const auto& mr : regions) {
      const auto blob = mr.remote().encode();
      const auto n = static_cast<std::uint32_t>(blob.size());
      const auto* len = reinterpret_cast<const std::byte*>(&n);
      mine.insert(mine.end(), len, len + sizeof n);
      mine.insert(mine.end(), blob.begin(), blob.end());
    }
    const auto all = must(boot.allgather(mine), "allgather of remote buffers");
    std::vector<std::vector<fabrix::remote_buffer>> out(regions.size(), std::vector<fabrix::remote_buffer>(size));
    for (int r = 0; r < size; ++r) {
      std::span<const std::byte> rest(all[static_cast<std::size_t>(r)]);
      for (auto& per_region : out) {
        std::uint32_t n = 0;
        FX_CHECK(rest.size() >= sizeof n);
        std::memcpy(&n, rest.data(), sizeof n);
        FX_CHECK(rest.size() - sizeof n >= n);
        per_region[static_cast<std::size_t>(r)] =
            must(fabrix::remote_buffer::decode(rest.subspan(sizeof n, n)), "decode a remote buffer");
        rest = rest.subspan(sizeof n + n);
      }
      FX_CHECK(rest.empty());
    }
    return out;
  }

  // How long next() and its helpers wait for one completion.
  static constexpr std::chrono::milliseconds completion_wait{20000};
  // The next completion matching `pred`, polling up to `limit`; others wait
  // in the backlog. A miss fails the rank at `where`, the caller's line.
  template <class Pred>
  fabrix::completion next(Pred pred, std::chrono::milliseconds limit = completion_wait,
                          std::source_location where = std::source_location::current()) {
    for (auto it = backlog.begin(); it != backlog.end(); ++it) {
      if (pred(*it)) {
        fabrix::completion c = *it;
        backlog.erase(it);
        return c;
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + limit;
    fabrix::completion buf[32];
    while (std::chrono::steady_clock::now() < deadline) {
      const std::size_t n = dom.poll(buf);
      std::size_t found = n;
      for (std::size_t i = 0; i < n; ++i) {
        if (found == n && pred(buf[i]))
          found = i;
        else
          backlog.push_back(buf[i]);
      }
      if (found != n) return buf[found];
    }
    rank_fail("completion did not arrive in time", where, "(waited " + std::to_string(limit.count()) + " ms)");
  }
  fabrix::completion next_token(std::uint64_t token, std::source_location where = std::source_location::current()) {
    return next(
        [token](const fabrix::completion& c) { return c.op != fabrix::opcode::remote_write_imm && c.token == token; },
        completion_wait, where);
  }
  fabrix::completion next_notify(std::source_location where = std::source_location::current()) {
    return next([](const fabrix::completion& c) { return c.op == fabrix::opcode::remote_write_imm; }, completion_wait,
                where);
  }
  // Posts and waits for the operation's successful completion.
  void complete_ok(fabrix::status posted, std::uint64_t token,
                   std::source_location where = std::source_location::current()) {
    if (posted != fabrix::status::ok)
      rank_fail("posted == status::ok", where, "(got " + std::string(fabrix::to_string(posted)) + ")");
    const auto c = next_token(token, where);
    if (c.status != fabrix::status::ok)
      rank_fail("completion status ok", where,
                std::string(fabrix::to_string(c.status)) + " (token " + std::to_string(token) + ")");
  }
  // Polls (serving one-sided traffic aimed at us) for `d`.
  void serve_for(std::chrono::milliseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    fabrix::completion buf[32];
    while (std::chrono::steady_clock::now() < until) {
      const std::size_t n = dom.poll(buf);
      backlog.insert(backlog.end(), buf, buf + n);
    }
  }
  // A barrier that keeps serving one-sided traffic: ranks exchange a
  // notification on their loopback-free path before the bootstrap barrier.
  void sync(fabrix::memory_region<P>& scratch, const std::vector<fabrix::remote_buffer>& peers, std::uint32_t tag) {
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      FX_CHECK_STATUS(qps[r].write_with_imm(scratch.slice(0, 0), peers[r].slice(0, 0), tag, 0xfeed0000u + tag),
                      fabrix::status::ok);
    }
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      next([tag](const fabrix::completion& c) { return c.op == fabrix::opcode::remote_write_imm && c.imm == tag; });
      next_token(0xfeed0000u + tag);
    }
  }
};

// Deterministic test bytes: different for every (seed, index).
inline std::byte pattern(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  return static_cast<std::byte>(x & 0xff);
}
inline void fill(std::byte* p, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = pattern(seed, i);
}
// Index of the first wrong byte, or n when all match.
inline std::size_t first_mismatch(const std::byte* p, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != pattern(seed, i)) return i;
  return n;
}

// The completion of `token`, polling `dom` (a fabrix::domain of any
// provider) for at most `limit`; nullopt when it did not come. Other
// completions polled meanwhile are dropped.
template <class Domain>
std::optional<fabrix::completion> await_token(Domain& dom, std::uint64_t token,
                                              std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  fabrix::completion c[8];
  while (std::chrono::steady_clock::now() < until) {
    const std::size_t n = dom.poll(c);
    for (std::size_t i = 0; i < n; ++i)
      if (c[i].token == token) return c[i];
  }
  return std::nullopt;
}

// Polls `dom` for `limit`, dropping what completes: the target of a test
// serving its peer (libfabric progresses a target only while it polls) for
// as long as the initiator may wait.
template <class Domain>
void serve_for(Domain& dom, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  fabrix::completion c[8];
  while (std::chrono::steady_clock::now() < until) (void)dom.poll(c);
}

// Each of `bad`, as the value of `name`, makes `open()` (a domain's create)
// fail with invalid_argument. Runs in the doctest process (no ranks).
template <class Open>
void check_env_refused(const char* name, std::initializer_list<const char*> bad, Open open) {
  for (const char* value : bad) {
    const scoped_env set(name, value);
    auto dom = open();
    CHECK_MESSAGE(!dom, name << "=" << value);
    if (!dom) CHECK(dom.code() == fabrix::status::invalid_argument);
  }
}

}  // namespace fxt
