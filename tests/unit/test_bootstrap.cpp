// Tests of the embedded TCP bootstrap: environment parsing, the wire
// decoder's bounds, and real multi-process jobs on the loopback (forked
// children; a child reports by exit code and never returns into doctest).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <fabrix/bootstrap.hpp>

#include "../../src/bootstrap/address.hpp"
#include "../../src/bootstrap/wire.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace boot = fabrix::detail::boot;
using fabrix::bootstrap;
using fabrix::bootstrap_options;
using fabrix::status;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

// ---- environment ---------------------------------------------------------

const char* const all_vars[] = {"FABRIX_RANK",
                                "FABRIX_SIZE",
                                "FABRIX_BOOTSTRAP",
                                "FABRIX_JOB_TOKEN",
                                "OMPI_COMM_WORLD_RANK",
                                "OMPI_COMM_WORLD_SIZE",
                                "OMPI_COMM_WORLD_LOCAL_SIZE",
                                "OMPI_MCA_ess_base_jobid",
                                "PMIX_RANK",
                                "PMIX_SIZE",
                                "PMIX_NAMESPACE",
                                "PMI_RANK",
                                "PMI_SIZE",
                                "PMI_PORT",
                                "MPI_LOCALNRANKS",
                                "SLURM_PROCID",
                                "SLURM_NTASKS",
                                "SLURM_STEP_NUM_TASKS",
                                "SLURM_JOB_ID",
                                "SLURM_STEP_ID",
                                "SLURM_STEP_NUM_NODES"};

// Clears every variable the bootstrap reads; restores them on destruction.
class clean_env {
 public:
  clean_env() {
    for (const char* v : all_vars) {
      if (const char* old = std::getenv(v)) saved_[v] = old;
      ::unsetenv(v);
    }
  }
  ~clean_env() {
    for (const char* v : all_vars) ::unsetenv(v);
    for (auto& [k, v] : saved_) ::setenv(k.c_str(), v.c_str(), 1);
  }
  clean_env(const clean_env&) = delete;
  clean_env& operator=(const clean_env&) = delete;
  void set(const char* name, const char* value) { ::setenv(name, value, 1); }

 private:
  std::map<std::string, std::string> saved_;
};

bool contains(const std::string& s, std::string_view what) { return s.find(what) != std::string::npos; }

// Checks a root derived from a job id: loopback, port in 20000-29999.
int derived_port(const std::string& root) {
  auto hp = boot::parse_host_port(root, "test");
  REQUIRE(hp);
  CHECK(hp->host == "127.0.0.1");
  CHECK(hp->port >= 20000);
  CHECK(hp->port <= 29999);
  return hp->port;
}

// ---- processes -----------------------------------------------------------

// Runs `body` in a child process, which exits with its return value.
pid_t spawn(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int rc = 3;
    try {
      rc = body();
    } catch (...) {  // a doctest REQUIRE in a helper: never unwind into doctest's copy in this process
      std::fprintf(stderr, "child %d: failed (exception)\n", static_cast<int>(::getpid()));
    }
    ::_exit(rc);
  }
  return pid;
}

// The child's exit code; -1 when it did not exit normally (it is then killed
// and reaped after `limit`, so a hung child fails the test instead of hanging it).
int reap(pid_t pid, std::chrono::milliseconds limit = 15s) {
  const auto until = steady::now() + limit;
  for (;;) {
    int st = 0;
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (r < 0) return -2;
    if (steady::now() >= until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      return -3;
    }
    std::this_thread::sleep_for(5ms);
  }
}

#define CHILD_CHECK(rank, cond)                                                                            \
  do {                                                                                                     \
    if (!(cond)) {                                                                                         \
      std::fprintf(stderr, "child rank %d: %s:%d: check failed: %s\n", (rank), __FILE__, __LINE__, #cond); \
      return 1;                                                                                            \
    }                                                                                                      \
  } while (0)

template <class R>
bool report(int rank, const R& r, const char* what) {
  if (r) return true;
  std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, r.error().describe().c_str());
  return false;
}

double seconds_since(steady::time_point t0) { return std::chrono::duration<double>(steady::now() - t0).count(); }

// ---- the data a job exchanges --------------------------------------------

std::byte pattern(int rank, int round, std::size_t i) {
  return static_cast<std::byte>((rank * 131 + round * 71 + i * 13 + (i >> 8) * 7) & 0xff);
}

std::size_t blob_size(int rank, int round) {
  switch (round) {
    case 0: return 8;
    case 1: return std::size_t{0} + (rank == 0 ? 0 : rank == 1 ? 1 : rank == 2 ? 333 : 70000);
    case 2: return (std::size_t{1} << 20) + static_cast<std::size_t>(rank);  // ~1 MiB each
    case 3: return 0;                                                        // all empty
    case 4: return rank == 2 ? (std::size_t{1} << 20) : 17;
    default: return static_cast<std::size_t>(rank * 3 + round);
  }
}

std::vector<std::byte> make_blob(int rank, int round) {
  std::vector<std::byte> b(blob_size(rank, round));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = pattern(rank, round, i);
  return b;
}

// Several allgathers and barriers; checks every byte of every rank's blob.
// Returns an empty string, or what went wrong.
std::string exercise(bootstrap& b, int rounds = 8) {
  const int rank = b.rank();
  for (int round = 0; round < rounds; ++round) {
    const auto mine = make_blob(rank, round);
    auto all = b.allgather(mine);
    if (!all) return "allgather round " + std::to_string(round) + ": " + all.error().describe();
    if (all->size() != static_cast<std::size_t>(b.size()))
      return "round " + std::to_string(round) + ": got " + std::to_string(all->size()) + " blobs";
    for (int r = 0; r < b.size(); ++r) {
      const auto& got = (*all)[static_cast<std::size_t>(r)];
      if (got.size() != blob_size(r, round))
        return "round " + std::to_string(round) + ": blob of rank " + std::to_string(r) + " has " +
               std::to_string(got.size()) + " bytes";
      for (std::size_t i = 0; i < got.size(); ++i)
        if (got[i] != pattern(r, round, i))
          return "round " + std::to_string(round) + ": rank " + std::to_string(r) + " byte " + std::to_string(i) +
                 " differs";
    }
    if (round % 2 == 1) {
      if (auto ok = b.barrier(); !ok) return "barrier round " + std::to_string(round) + ": " + ok.error().describe();
    }
  }
  if (auto ok = b.barrier(); !ok) return "final barrier: " + ok.error().describe();
  return {};
}

int child_join_and_exercise(int rank, int size, const std::string& root, const std::string& token,
                            bootstrap_options opts = {10000ms, 10000ms}) {
  auto b = bootstrap::create(rank, size, root, token, opts);
  if (!report(rank, b, "create")) return 1;
  CHILD_CHECK(rank, b->rank() == rank && b->size() == size);
  const std::string err = exercise(*b);
  if (!err.empty()) {
    std::fprintf(stderr, "child rank %d: %s\n", rank, err.c_str());
    return 1;
  }
  return 0;
}

// ---- raw sockets (strangers) -----------------------------------------------

int raw_connect(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

void raw_send(int fd, const void* p, std::size_t n) {
  REQUIRE(::send(fd, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n));
}
void raw_send(int fd, const std::vector<std::byte>& v) { raw_send(fd, v.data(), v.size()); }

// Everything the other side sends until it closes; nullopt when it does not
// close within `limit`.
std::optional<std::vector<std::byte>> read_until_eof(int fd, std::chrono::milliseconds limit) {
  std::vector<std::byte> out;
  const auto until = steady::now() + limit;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - steady::now()).count();
    if (left <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    std::byte buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return out;
    if (n < 0) return std::nullopt;
    out.insert(out.end(), buf, buf + n);
  }
}

std::optional<boot::reject_reason> reject_in(const std::vector<std::byte>& bytes) {
  if (bytes.size() != boot::frame_header_bytes) return std::nullopt;
  boot::frame_parser p(0);
  auto w = p.want();
  std::memcpy(w.data(), bytes.data(), bytes.size());
  if (!p.commit(bytes.size()) || !p.done() || p.header().kind != boot::kind::reject) return std::nullopt;
  return static_cast<boot::reject_reason>(p.header().aux);
}

std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string loopback(std::uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

}  // namespace

// ===========================================================================
// Environment

TEST_CASE("env: no variables means rank 0 of a job of size 1, which needs no socket") {
  clean_env env;
  auto cfg = bootstrap::config_from_env();
  REQUIRE(cfg);
  CHECK(cfg->rank == 0);
  CHECK(cfg->size == 1);
  CHECK(cfg->root.empty());
  CHECK(cfg->job_token == "fabrix");
  CHECK(cfg->source == "none");

  auto b = bootstrap::from_env({1000ms, 1000ms});
  REQUIRE(b);
  CHECK(b->rank() == 0);
  CHECK(b->size() == 1);
  const std::vector<std::byte> mine{std::byte{1}, std::byte{2}, std::byte{3}};
  auto all = b->allgather(mine);
  REQUIRE(all);
  REQUIRE(all->size() == 1);
  CHECK((*all)[0] == mine);
  CHECK(b->barrier());
}

TEST_CASE("env: FABRIX_* variables") {
  clean_env env;
  env.set("FABRIX_RANK", "2");
  env.set("FABRIX_SIZE", "4");
  env.set("FABRIX_BOOTSTRAP", "node17.cluster:29500");
  env.set("FABRIX_JOB_TOKEN", "s3cret");
  auto cfg = bootstrap::config_from_env();
  REQUIRE(cfg);
  CHECK(cfg->rank == 2);
  CHECK(cfg->size == 4);
  CHECK(cfg->root == "node17.cluster:29500");
  CHECK(cfg->job_token == "s3cret");
  CHECK(cfg->source == "FABRIX");

  env.set("FABRIX_BOOTSTRAP", "[fe80::1]:1234");
  cfg = bootstrap::config_from_env();
  REQUIRE(cfg);
  CHECK(cfg->root == "[fe80::1]:1234");
}

TEST_CASE("env: OpenMPI, with the port and token derived from the job id") {
  clean_env env;
  env.set("OMPI_COMM_WORLD_RANK", "1");
  env.set("OMPI_COMM_WORLD_SIZE", "3");
  env.set("OMPI_MCA_ess_base_jobid", "3190489089");
  auto cfg = bootstrap::config_from_env();
  REQUIRE(cfg);
  CHECK(cfg->rank == 1);
  CHECK(cfg->size == 3);
  CHECK(cfg->source == "OpenMPI");
  derived_port(cfg->root);
  CHECK(contains(cfg->job_token, "3190489089"));

  // Deterministic: another rank of the same job computes the same.
  env.set("OMPI_COMM_WORLD_RANK", "2");
  auto again = bootstrap::config_from_env();
  REQUIRE(again);
  CHECK(again->root == cfg->root);
  CHECK(again->job_token == cfg->job_token);

  // Another job gets another token.
  env.set("OMPI_MCA_ess_base_jobid", "3190489090");
  auto other = bootstrap::config_from_env();
  REQUIRE(other);
  CHECK(other->job_token != cfg->job_token);

  // FABRIX_* override the launcher.
  env.set("FABRIX_RANK", "0");
  env.set("FABRIX_JOB_TOKEN", "mine");
  env.set("FABRIX_BOOTSTRAP", "10.0.0.1:5000");
  auto over = bootstrap::config_from_env();
  REQUIRE(over);
  CHECK(over->rank == 0);
  CHECK(over->size == 3);
  CHECK(over->job_token == "mine");
  CHECK(over->root == "10.0.0.1:5000");
}

TEST_CASE("env: Slurm") {
  clean_env env;
  env.set("SLURM_PROCID", "3");
  env.set("SLURM_NTASKS", "8");
  env.set("SLURM_JOB_ID", "4242");
  env.set("SLURM_STEP_ID", "0");
  auto cfg = bootstrap::config_from_env();
  REQUIRE(cfg);
  CHECK(cfg->rank == 3);
  CHECK(cfg->size == 8);
  CHECK(cfg->source == "Slurm");
  derived_port(cfg->root);
  CHECK(contains(cfg->job_token, "4242.0"));

  // The step's task count wins over the allocation's.
  env.set("SLURM_STEP_NUM_TASKS", "4");
  cfg = bootstrap::config_from_env();
  REQUIRE(cfg);
  CHECK(cfg->size == 4);

  // A step over several nodes cannot use the 127.0.0.1 default...
  env.set("SLURM_STEP_NUM_NODES", "2");
  auto multi = bootstrap::config_from_env();
  REQUIRE_FALSE(multi);
  CHECK(multi.code() == status::invalid_argument);
  CHECK(contains(multi.error().message, "FABRIX_BOOTSTRAP"));
  // ...but works with FABRIX_BOOTSTRAP.
  env.set("FABRIX_BOOTSTRAP", "head-node:7000");
  multi = bootstrap::config_from_env();
  REQUIRE(multi);
  CHECK(multi->root == "head-node:7000");
}

TEST_CASE("env: PMI and PMIx") {
  clean_env env;
  env.set("PMI_RANK", "1");
  env.set("PMI_SIZE", "2");
  env.set("FABRIX_BOOTSTRAP", "127.0.0.1:4000");
  auto cfg = bootstrap::config_from_env();
  REQUIRE(cfg);
  CHECK(cfg->rank == 1);
  CHECK(cfg->size == 2);
  CHECK(cfg->source == "PMI");
  CHECK(cfg->job_token == "fabrix");  // no job id anywhere

  // PMI with neither FABRIX_BOOTSTRAP nor a job id: refuses to guess a port.
  ::unsetenv("FABRIX_BOOTSTRAP");
  auto noroot = bootstrap::config_from_env();
  REQUIRE_FALSE(noroot);
  CHECK(noroot.code() == status::invalid_argument);
  CHECK(contains(noroot.error().message, "FABRIX_BOOTSTRAP"));

  ::unsetenv("PMI_RANK");
  ::unsetenv("PMI_SIZE");
  env.set("PMIX_RANK", "2");
  env.set("PMIX_NAMESPACE", "prterun-host-1234@1");
  auto nosize = bootstrap::config_from_env();
  REQUIRE_FALSE(nosize);
  CHECK(nosize.code() == status::invalid_argument);
  CHECK(contains(nosize.error().message, "PMIX_RANK"));
  CHECK(contains(nosize.error().message, "FABRIX_SIZE"));

  env.set("SLURM_NTASKS", "5");
  cfg = bootstrap::config_from_env();
  REQUIRE(cfg);
  CHECK(cfg->rank == 2);
  CHECK(cfg->size == 5);
  CHECK(cfg->source == "PMIx");
  CHECK(contains(cfg->job_token, "prterun-host-1234@1"));
  derived_port(cfg->root);
}

TEST_CASE("env: bad values are invalid_argument naming the variable") {
  struct bad_case {
    std::map<std::string, std::string> vars;
    const char* named;
  };
  const std::vector<bad_case> cases = {
      {{{"FABRIX_RANK", "abc"}, {"FABRIX_SIZE", "4"}}, "FABRIX_RANK"},
      {{{"FABRIX_RANK", "-1"}, {"FABRIX_SIZE", "4"}}, "FABRIX_RANK"},
      {{{"FABRIX_RANK", "4"}, {"FABRIX_SIZE", "4"}}, "FABRIX_RANK"},
      {{{"FABRIX_RANK", "0"}, {"FABRIX_SIZE", "0"}}, "FABRIX_SIZE"},
      {{{"FABRIX_RANK", "0"}, {"FABRIX_SIZE", "99999999999"}}, "FABRIX_SIZE"},
      {{{"FABRIX_SIZE", "4"}}, "FABRIX_RANK"},
      {{{"FABRIX_RANK", "1"}}, "FABRIX_SIZE"},
      {{{"FABRIX_RANK", "1"}, {"FABRIX_SIZE", "2"}, {"FABRIX_BOOTSTRAP", "nocolon"}}, "FABRIX_BOOTSTRAP"},
      {{{"FABRIX_RANK", "1"}, {"FABRIX_SIZE", "2"}, {"FABRIX_BOOTSTRAP", "host:99999"}}, "FABRIX_BOOTSTRAP"},
      {{{"FABRIX_RANK", "1"}, {"FABRIX_SIZE", "2"}, {"FABRIX_BOOTSTRAP", "host:12x"}}, "FABRIX_BOOTSTRAP"},
      {{{"FABRIX_RANK", "1"}, {"FABRIX_SIZE", "2"}, {"FABRIX_BOOTSTRAP", ":80"}}, "FABRIX_BOOTSTRAP"},
      {{{"FABRIX_RANK", "1"}, {"FABRIX_SIZE", "2"}, {"FABRIX_BOOTSTRAP", "::1:80"}}, "FABRIX_BOOTSTRAP"},
      {{{"FABRIX_RANK", "1"}, {"FABRIX_SIZE", "2"}, {"FABRIX_BOOTSTRAP", "[::1:80"}}, "FABRIX_BOOTSTRAP"},
      {{{"FABRIX_RANK", "1"}, {"FABRIX_SIZE", "2"}, {"FABRIX_BOOTSTRAP", "host:0"}}, "FABRIX_BOOTSTRAP"},
      {{{"FABRIX_RANK", "1"}, {"FABRIX_SIZE", "2"}}, "FABRIX_BOOTSTRAP"},
      {{{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "3"}}, "OMPI_COMM_WORLD_RANK"},
      {{{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "3"}}, "OMPI_COMM_WORLD_RANK"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}}, "OMPI_COMM_WORLD_RANK"},
      {{{"OMPI_COMM_WORLD_RANK", "1"},
        {"OMPI_COMM_WORLD_SIZE", "4"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
        {"OMPI_MCA_ess_base_jobid", "7"}},
       "FABRIX_BOOTSTRAP"},
      {{{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "8"}}, "SLURM_PROCID"},
      {{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "zero"}}, "SLURM_NTASKS"},
      {{{"PMI_RANK", "1"}, {"PMI_SIZE", "0"}}, "PMI_SIZE"},
      {{{"FABRIX_JOB_TOKEN", std::string(5000, 'x')}}, "FABRIX_JOB_TOKEN"},
  };
  for (const auto& c : cases) {
    clean_env env;
    std::string shown;
    for (const auto& [k, v] : c.vars) {
      env.set(k.c_str(), v.c_str());
      shown += k + "=" + v.substr(0, 20) + " ";
    }
    CAPTURE(shown);
    auto cfg = bootstrap::config_from_env();
    REQUIRE_FALSE(cfg);
    CHECK(cfg.code() == status::invalid_argument);
    CHECK(cfg.error().provider == "bootstrap");
    CAPTURE(cfg.error().message);
    CHECK(contains(cfg.error().message, c.named));
    // from_env fails the same way, without touching the network.
    auto b = bootstrap::from_env({100ms, 100ms});
    CHECK(b.code() == status::invalid_argument);
  }
}

TEST_CASE("create/listen: argument checks") {
  const bootstrap_options quick{200ms, 200ms};
  CHECK(bootstrap::create(0, 0, "127.0.0.1:1", "t", quick).code() == status::invalid_argument);
  CHECK(bootstrap::create(2, 2, "127.0.0.1:1", "t", quick).code() == status::invalid_argument);
  CHECK(bootstrap::create(-1, 2, "127.0.0.1:1", "t", quick).code() == status::invalid_argument);
  CHECK(bootstrap::create(1, 2, "127.0.0.1", "t", quick).code() == status::invalid_argument);
  CHECK(bootstrap::create(1, 2, "127.0.0.1:0", "t", quick).code() == status::invalid_argument);
  CHECK(bootstrap::create(0, 2, "127.0.0.1:0", "t", quick).code() == status::invalid_argument);
  CHECK(bootstrap::create(1, 2, "127.0.0.1:5", std::string(5000, 't'), quick).code() == status::invalid_argument);
  CHECK(bootstrap::listen(0, "127.0.0.1:0", "t", quick).code() == status::invalid_argument);
  CHECK(bootstrap::listen(2, "127.0.0.1", "t", quick).code() == status::invalid_argument);

  // A job of one: no socket, the root address is not even looked at.
  auto solo = bootstrap::create(0, 1, "", "t", quick);
  REQUIRE(solo);
  auto all = solo->allgather({});
  REQUIRE(all);
  CHECK(all->size() == 1);
  CHECK((*all)[0].empty());
  // Over the blob limit: refused, and the object is then unusable.
  std::vector<std::byte> huge(bootstrap::max_blob_size + 1);
  CHECK(solo->allgather(huge).code() == status::invalid_argument);
  CHECK(solo->barrier().code() == status::invalid_argument);

  // Moved-from objects answer instead of crashing.
  auto one = bootstrap::create(0, 1, "", "t", quick);
  REQUIRE(one);
  bootstrap moved = std::move(*one);
  CHECK(moved.barrier());
  CHECK(one->barrier().code() == status::invalid_argument);

  auto root = bootstrap::listen(1, "127.0.0.1:0", "t", quick);
  REQUIRE(root);
  CHECK(root->port() != 0);
  auto b = root->accept();
  REQUIRE(b);
  CHECK(b->size() == 1);
  CHECK(root->port() == 0);
  CHECK(root->accept().code() == status::invalid_argument);
}

// ===========================================================================
// Wire format

TEST_CASE("wire: little-endian, bounded, never trusts a length") {
  std::byte b[8];
  boot::store_le<std::uint64_t>(b, 0x0102030405060708ull);
  CHECK(b[0] == std::byte{0x08});
  CHECK(b[7] == std::byte{0x01});
  CHECK(boot::load_le<std::uint64_t>(b) == 0x0102030405060708ull);
  boot::store_le<std::uint32_t>(b, 0xa1b2c3d4u);
  CHECK(b[0] == std::byte{0xd4});
  CHECK(boot::load_le<std::uint32_t>(b) == 0xa1b2c3d4u);

  CHECK(boot::tokens_equal("abc", "abc"));
  CHECK_FALSE(boot::tokens_equal("abc", "abd"));
  CHECK_FALSE(boot::tokens_equal("abc", "abcd"));
  CHECK_FALSE(boot::tokens_equal("abcd", "abc"));
  CHECK_FALSE(boot::tokens_equal("", "a"));
  CHECK(boot::tokens_equal("", ""));

  const auto feed = [](boot::frame_parser& p, std::span<const std::byte> bytes) {
    std::size_t at = 0;
    while (at < bytes.size() && !p.done() && !p.failed()) {
      auto w = p.want();
      const std::size_t n = std::min(w.size(), bytes.size() - at);
      std::memcpy(w.data(), bytes.data() + at, n);
      at += n;
      p.commit(n);
    }
  };

  SUBCASE("a well-formed result frame round-trips") {
    const auto h = boot::encode_frame_header({boot::kind::result, boot::op::allgather, 0, 42, 2});
    std::vector<std::byte> bytes(h.begin(), h.end());
    for (std::size_t len : {std::size_t{3}, std::size_t{0}}) {
      const auto l = boot::encode_length(len);
      bytes.insert(bytes.end(), l.begin(), l.end());
      for (std::size_t i = 0; i < len; ++i) bytes.push_back(std::byte{0x5a});
    }
    boot::frame_parser p(2);
    feed(p, bytes);
    REQUIRE(p.done());
    CHECK(p.header().seq == 42);
    REQUIRE(p.blobs().size() == 2);
    CHECK(p.blobs()[0] == std::vector<std::byte>(3, std::byte{0x5a}));
    CHECK(p.blobs()[1].empty());
  }
  SUBCASE("a 1 TiB length is refused before any allocation") {
    const auto h = boot::encode_frame_header({boot::kind::contribute, boot::op::allgather, 0, 1, 1});
    std::vector<std::byte> bytes(h.begin(), h.end());
    const auto l = boot::encode_length(std::uint64_t{1} << 40);
    bytes.insert(bytes.end(), l.begin(), l.end());
    boot::frame_parser p(1);
    feed(p, bytes);
    CHECK(p.failed());
    CHECK(contains(p.error(), "limit"));
  }
  SUBCASE("too many blobs, bad magic, unknown kinds") {
    boot::frame_parser many(1);
    const auto h = boot::encode_frame_header({boot::kind::result, boot::op::allgather, 0, 1, 1000000});
    feed(many, h);
    CHECK(many.failed());

    auto bad = boot::encode_frame_header({boot::kind::result, boot::op::barrier, 0, 1, 0});
    bad[0] = std::byte{'G'};
    boot::frame_parser magic(4);
    feed(magic, bad);
    CHECK(magic.failed());

    auto unknown = boot::encode_frame_header({boot::kind::result, boot::op::barrier, 0, 1, 0});
    unknown[4] = std::byte{99};
    boot::frame_parser k(4);
    feed(k, unknown);
    CHECK(k.failed());
  }
  SUBCASE("random bytes never crash the parser") {
    std::mt19937_64 rng(12345);
    int inconsistent = 0;
    for (int trial = 0; trial < 20000; ++trial) {
      std::vector<std::byte> bytes(rng() % 96);
      for (auto& x : bytes) x = static_cast<std::byte>(rng());
      if (trial % 2 == 0 && bytes.size() >= 8) boot::store_le<std::uint32_t>(bytes.data(), boot::wire_magic);
      if (trial % 4 == 0 && bytes.size() >= 8) bytes[4] = static_cast<std::byte>(1 + rng() % 6);
      boot::frame_parser p(static_cast<std::uint32_t>(rng() % 8), 64);
      feed(p, bytes);
      inconsistent += p.done() && p.failed() ? 1 : 0;
    }
    CHECK(inconsistent == 0);
  }
}

// ===========================================================================
// Real jobs

TEST_CASE("job of 4 processes: allgathers of 0 B to ~1 MiB and barriers, every byte checked") {
  const std::string token = "job-4-token";
  const bootstrap_options opts{10000ms, 10000ms};
  auto root = bootstrap::listen(4, "127.0.0.1:0", token, opts);
  REQUIRE(root);
  const std::uint16_t port = root->port();
  REQUIRE(port != 0);
  CHECK(root->address() == loopback(port));

  std::vector<pid_t> kids;
  for (int r = 1; r < 4; ++r)
    kids.push_back(spawn([&, r] { return child_join_and_exercise(r, 4, loopback(port), token); }));

  const auto t0 = steady::now();
  auto b = root->accept();
  if (b) {
    CHECK(b->rank() == 0);
    CHECK(b->size() == 4);
    CHECK(exercise(*b) == "");
  } else {
    FAIL_CHECK(b.error().describe());
  }
  for (pid_t k : kids) CHECK(reap(k) == 0);
  MESSAGE("4-rank job took " << seconds_since(t0) << " s");
}

TEST_CASE("one-step create: peers retry until rank 0 listens; host names resolve") {
  const std::string token = "late-root";
  const std::uint16_t port = free_port();
  // The peers start first, and name the root "localhost" (which may resolve
  // to ::1 first: that address is refused and 127.0.0.1 is tried next).
  std::vector<pid_t> kids;
  for (int r = 1; r < 3; ++r)
    kids.push_back(spawn([&, r] { return child_join_and_exercise(r, 3, "localhost:" + std::to_string(port), token); }));
  std::this_thread::sleep_for(300ms);
  auto b = bootstrap::create(0, 3, loopback(port), token, {10000ms, 10000ms});
  if (b)
    CHECK(exercise(*b) == "");
  else
    FAIL_CHECK(b.error().describe());
  for (pid_t k : kids) CHECK(reap(k) == 0);
}

TEST_CASE("IPv6 loopback") {
  auto root = bootstrap::listen(2, "[::1]:0", "v6", {5000ms, 5000ms});
  if (!root) {
    MESSAGE("no IPv6 loopback here, skipped: " << root.error().describe());
    return;
  }
  const std::string where = "[::1]:" + std::to_string(root->port());
  CHECK(root->address() == where);
  const pid_t kid = spawn([&] { return child_join_and_exercise(1, 2, where, "v6"); });
  auto b = root->accept();
  if (b)
    CHECK(exercise(*b) == "");
  else
    FAIL_CHECK(b.error().describe());
  CHECK(reap(kid) == 0);
}

TEST_CASE("strangers on the port are refused and the real job completes") {
  const std::string token = "the-real-token";
  auto root = bootstrap::listen(3, "127.0.0.1:0", token, {10000ms, 10000ms});
  REQUIRE(root);
  const std::uint16_t port = root->port();

  struct stranger {
    const char* what;
    int fd;
    std::optional<boot::reject_reason> expect;  // nullopt: closed without a word
  };
  std::vector<stranger> strangers;
  const auto add = [&](const char* what, const std::vector<std::byte>& bytes,
                       std::optional<boot::reject_reason> expect) {
    const int fd = raw_connect(port);
    if (!bytes.empty()) raw_send(fd, bytes);
    strangers.push_back({what, fd, expect});
  };
  const std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  add("http",
      std::vector<std::byte>(reinterpret_cast<const std::byte*>(http.data()),
                             reinterpret_cast<const std::byte*>(http.data() + http.size())),
      std::nullopt);
  add("wrong token", boot::encode_hello(3, 1, "guess"), boot::reject_reason::token);
  add("empty token", boot::encode_hello(3, 2, ""), boot::reject_reason::token);
  add("wrong size", boot::encode_hello(5, 1, token), boot::reject_reason::size);
  add("rank 0", boot::encode_hello(3, 0, token), boot::reject_reason::rank);
  add("rank 7", boot::encode_hello(3, 7, token), boot::reject_reason::rank);
  add("wrong version", boot::encode_hello(3, 1, token, 99), boot::reject_reason::version);
  auto huge = boot::encode_hello(3, 1, "");
  boot::store_le<std::uint32_t>(huge.data() + 16, 0xffffffffu);  // token_len
  add("4 GiB token", huge, std::nullopt);
  auto partial = boot::encode_hello(3, 1, token);
  partial.resize(10);
  add("half a hello", partial, std::nullopt);
  add("silent", {}, std::nullopt);

  std::vector<pid_t> kids;
  for (int r = 1; r < 3; ++r)
    kids.push_back(spawn([&, r] { return child_join_and_exercise(r, 3, loopback(port), token); }));
  auto b = root->accept();
  if (b)
    CHECK(exercise(*b) == "");
  else
    FAIL_CHECK(b.error().describe());
  for (pid_t k : kids) CHECK(reap(k) == 0);

  for (auto& s : strangers) {
    CAPTURE(s.what);
    auto got = read_until_eof(s.fd, 2000ms);
    REQUIRE(got.has_value());  // the root closed it
    if (s.expect) {
      const auto why = reject_in(*got);
      REQUIRE(why.has_value());
      CHECK(static_cast<int>(*why) == static_cast<int>(*s.expect));
    } else {
      CHECK(got->empty());
    }
    ::close(s.fd);
  }
}

TEST_CASE("a second process claiming a rank already joined is refused") {
  const std::string token = "dup";
  auto root = bootstrap::listen(3, "127.0.0.1:0", token, {10000ms, 10000ms});
  REQUIRE(root);
  const std::uint16_t port = root->port();
  const pid_t real1 = spawn([&] { return child_join_and_exercise(1, 3, loopback(port), token); });
  const pid_t dup = spawn([&] {
    std::this_thread::sleep_for(300ms);  // after rank 1 joined, before rank 2 does
    auto r = bootstrap::create(1, 3, loopback(port), token, {3000ms, 3000ms});
    CHILD_CHECK(9, !r);
    CHILD_CHECK(9, r.code() == status::invalid_argument);
    CHILD_CHECK(9, contains(r.error().message, "already joined"));
    return 0;
  });
  const pid_t real2 = spawn([&] {
    std::this_thread::sleep_for(700ms);
    return child_join_and_exercise(2, 3, loopback(port), token);
  });
  auto b = root->accept();
  if (b)
    CHECK(exercise(*b) == "");
  else
    FAIL_CHECK(b.error().describe());
  CHECK(reap(real1) == 0);
  CHECK(reap(dup) == 0);
  CHECK(reap(real2) == 0);
}

TEST_CASE("a peer that never connects: accept() times out, naming the missing rank") {
  const std::string token = "missing";
  auto root = bootstrap::listen(3, "127.0.0.1:0", token, {1000ms, 1000ms});
  REQUIRE(root);
  const std::uint16_t port = root->port();
  // Rank 1 comes; rank 2 never does. Rank 1 learns the job failed when rank 0 gives up.
  const pid_t kid = spawn([&] {
    const auto t0 = steady::now();
    auto r = bootstrap::create(1, 3, loopback(port), token, {5000ms, 5000ms});
    CHILD_CHECK(1, !r);
    CHILD_CHECK(1, r.code() == status::peer_unreachable);
    CHILD_CHECK(1, seconds_since(t0) < 4.0);
    return 0;
  });
  const auto t0 = steady::now();
  auto b = root->accept();
  const double took = seconds_since(t0);
  REQUIRE_FALSE(b);
  CHECK(b.code() == status::timed_out);
  CAPTURE(b.error().message);
  CHECK(contains(b.error().message, "rank(s) 2 "));
  CHECK(contains(b.error().message, loopback(port)));
  CHECK(took >= 0.9);
  CHECK(took < 3.0);
  CHECK(reap(kid) == 0);
}

TEST_CASE("a root that does not exist or never answers: create() fails within connect_timeout") {
  SUBCASE("nothing listens") {
    const std::uint16_t port = free_port();
    const auto t0 = steady::now();
    auto b = bootstrap::create(1, 2, loopback(port), "t", {1000ms, 1000ms});
    const double took = seconds_since(t0);
    REQUIRE_FALSE(b);
    CHECK((b.code() == status::timed_out || b.code() == status::peer_unreachable));
    CAPTURE(b.error().message);
    CHECK(contains(b.error().message, loopback(port)));
    CHECK(contains(b.error().message, "rank 1"));
    CHECK(took >= 0.9);
    CHECK(took < 3.0);
  }
  SUBCASE("something listens but never speaks") {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 4) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    const auto t0 = steady::now();
    auto b = bootstrap::create(1, 2, loopback(ntohs(a.sin_port)), "t", {1000ms, 1000ms});
    const double took = seconds_since(t0);
    ::close(fd);
    REQUIRE_FALSE(b);
    CHECK(b.code() == status::timed_out);
    CHECK(took >= 0.9);
    CHECK(took < 3.0);
  }
}

TEST_CASE("a peer killed before a collective: rank 0's allgather fails fast, the others are told") {
  const std::string token = "kill";
  const bootstrap_options opts{5000ms, 3000ms};
  auto root = bootstrap::listen(3, "127.0.0.1:0", token, opts);
  REQUIRE(root);
  const std::uint16_t port = root->port();
  const pid_t survivor = spawn([&] {
    auto b = bootstrap::create(1, 3, loopback(port), token, opts);
    if (!report(1, b, "create")) return 1;
    const std::vector<std::byte> mine(100, std::byte{1});
    auto all = b->allgather(mine);
    CHILD_CHECK(1, !all);
    CHILD_CHECK(1, all.code() == status::peer_unreachable);
    CHILD_CHECK(1, contains(all.error().message, "rank 2"));
    // The object stays failed.
    CHILD_CHECK(1, b->barrier().code() == status::peer_unreachable);
    return 0;
  });
  const pid_t victim = spawn([&] {
    auto b = bootstrap::create(2, 3, loopback(port), token, opts);
    if (!report(2, b, "create")) return 1;
    for (;;) ::pause();
  });
  auto b = root->accept();
  REQUIRE(b);
  ::kill(victim, SIGKILL);
  CHECK(reap(victim) == -1);

  const auto t0 = steady::now();
  const std::vector<std::byte> mine(10, std::byte{0});
  auto all = b->allgather(mine);
  const double took = seconds_since(t0);
  REQUIRE_FALSE(all);
  CHECK(all.code() == status::peer_unreachable);
  CAPTURE(all.error().message);
  CHECK(contains(all.error().message, "rank 2 (127.0.0.1:"));
  CHECK(took < 3.0);
  CHECK(b->barrier().code() == status::peer_unreachable);
  CHECK(reap(survivor) == 0);
}

TEST_CASE("a peer that hangs (SIGSTOP): the collective times out on every rank") {
  const std::string token = "stop";
  const bootstrap_options opts{5000ms, 1000ms};
  auto root = bootstrap::listen(3, "127.0.0.1:0", token, opts);
  REQUIRE(root);
  const std::uint16_t port = root->port();
  const pid_t survivor = spawn([&] {
    auto b = bootstrap::create(1, 3, loopback(port), token, opts);
    if (!report(1, b, "create")) return 1;
    const auto t0 = steady::now();
    auto ok = b->barrier();
    CHILD_CHECK(1, !ok);
    CHILD_CHECK(1, ok.code() == status::timed_out);
    CHILD_CHECK(1, seconds_since(t0) < 3.0);
    return 0;
  });
  const pid_t sleeper = spawn([&] {
    auto b = bootstrap::create(2, 3, loopback(port), token, opts);
    if (!report(2, b, "create")) return 1;
    ::raise(SIGSTOP);
    return 0;
  });
  auto b = root->accept();
  REQUIRE(b);
  const auto t0 = steady::now();
  auto ok = b->barrier();
  const double took = seconds_since(t0);
  REQUIRE_FALSE(ok);
  CHECK(ok.code() == status::timed_out);
  CAPTURE(ok.error().message);
  CHECK(contains(ok.error().message, "rank 2"));
  CHECK(took >= 0.9);
  CHECK(took < 3.0);
  CHECK(reap(survivor) == 0);
  ::kill(sleeper, SIGKILL);
  reap(sleeper);
}

TEST_CASE("ranks calling different collectives are detected on both sides") {
  const std::string token = "mismatch";
  const bootstrap_options opts{5000ms, 5000ms};
  auto root = bootstrap::listen(2, "127.0.0.1:0", token, opts);
  REQUIRE(root);
  const std::uint16_t port = root->port();
  const pid_t kid = spawn([&] {
    auto b = bootstrap::create(1, 2, loopback(port), token, opts);
    if (!report(1, b, "create")) return 1;
    auto ok = b->barrier();
    CHILD_CHECK(1, !ok);
    CHILD_CHECK(1, ok.code() == status::invalid_argument);
    CHILD_CHECK(1, contains(ok.error().message, "mismatch"));
    return 0;
  });
  auto b = root->accept();
  REQUIRE(b);
  const auto t0 = steady::now();
  auto all = b->allgather(std::vector<std::byte>(4));
  REQUIRE_FALSE(all);
  CHECK(all.code() == status::invalid_argument);
  CAPTURE(all.error().message);
  CHECK(contains(all.error().message, "rank 1"));
  CHECK(contains(all.error().message, "barrier #1"));
  CHECK(contains(all.error().message, "allgather #1"));
  CHECK(seconds_since(t0) < 2.0);
  CHECK(reap(kid) == 0);
}

TEST_CASE("a joined peer announcing a 1 TiB blob is refused without allocating it") {
  const std::string token = "liar";
  const bootstrap_options opts{5000ms, 5000ms};
  auto root = bootstrap::listen(2, "127.0.0.1:0", token, opts);
  REQUIRE(root);
  const std::uint16_t port = root->port();
  const pid_t liar = spawn([&] {
    const int fd = raw_connect(port);
    const auto hello = boot::encode_hello(2, 1, token);
    CHILD_CHECK(1, ::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(hello.size()));
    std::byte welcome[boot::frame_header_bytes];
    CHILD_CHECK(1, ::recv(fd, welcome, sizeof welcome, MSG_WAITALL) == static_cast<ssize_t>(sizeof welcome));
    const auto h = boot::encode_frame_header({boot::kind::contribute, boot::op::allgather, 0, 1, 1});
    const auto l = boot::encode_length(std::uint64_t{1} << 40);
    CHILD_CHECK(1, ::send(fd, h.data(), h.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(h.size()));
    CHILD_CHECK(1, ::send(fd, l.data(), l.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(l.size()));
    auto rest = read_until_eof(fd, 3000ms);  // the abort, then the close
    CHILD_CHECK(1, rest.has_value());
    return 0;
  });
  auto b = root->accept();
  REQUIRE(b);
  auto all = b->allgather(std::vector<std::byte>(4));
  REQUIRE_FALSE(all);
  CHECK(all.code() == status::provider_error);
  CAPTURE(all.error().message);
  CHECK(contains(all.error().message, "limit"));
  CHECK(reap(liar) == 0);
}

TEST_CASE("rank 0 dies: a peer's collective fails instead of hanging") {
  const std::string token = "root-dies";
  const bootstrap_options opts{5000ms, 5000ms};
  std::uint16_t port = 0;
  pid_t root_proc = 0;
  {
    auto root = bootstrap::listen(2, "127.0.0.1:0", token, opts);
    REQUIRE(root);
    port = root->port();
    // The child owns rank 0 (its copy of the listener); it dies right after the job is assembled.
    root_proc = spawn([&] {
      auto b = root->accept();
      if (!report(0, b, "accept")) return 1;
      ::raise(SIGKILL);
      return 1;
    });
  }  // our copy of the listener closes here
  auto b = bootstrap::create(1, 2, loopback(port), token, opts);
  REQUIRE(b);
  const auto t0 = steady::now();
  auto all = b->allgather(std::vector<std::byte>(4));
  REQUIRE_FALSE(all);
  CHECK(all.code() == status::peer_unreachable);
  CAPTURE(all.error().message);
  CHECK(contains(all.error().message, loopback(port)));
  CHECK(seconds_since(t0) < 2.0);
  CHECK(reap(root_proc) == -1);
}
