// Tests of the embedded TCP bootstrap: environment parsing, the wire
// decoder's bounds, and real multi-process jobs on the loopback (forked
// children; a child reports by exit code and never returns into doctest).
#include <doctest/doctest.h>

#include <fabrix/bootstrap.hpp>

#include "child_process.hpp"

#include "../../src/bootstrap/address.hpp"
#include "../../src/bootstrap/wire.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
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
bool env_is(const char* name, std::string_view value) {
  const char* v = std::getenv(name);
  return v != nullptr && value == v;
}

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

using fxt_child::report;
using fxt_child::spawn;
int reap(pid_t pid, std::chrono::milliseconds limit = 15s) { return fxt_child::reap(pid, limit); }

double seconds_since(steady::time_point t0) { return std::chrono::duration<double>(steady::now() - t0).count(); }

// Upper bounds on "it gave up after its timeout" are the timeout plus this:
// CI runs these tests beside forked conformance ranks on two cores, where a
// process can wait seconds to be scheduled. The checks are about bounded
// waits and the right status, not speed; a hang still fails.
constexpr double sched_slack_s = 6.0;

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

// ---- the handshake, played by hand -----------------------------------------

boot::nonce fresh_nonce() {
  boot::nonce n{};
  REQUIRE(boot::random_bytes(n));
  return n;
}

// Receives one whole frame into `p`; false on EOF, error, malformed or timeout.
bool raw_recv_frame(int fd, boot::frame_parser& p, std::chrono::milliseconds limit = 3000ms) {
  const auto until = steady::now() + limit;
  while (!p.done()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - steady::now()).count();
    if (left <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left)) <= 0) continue;
    auto w = p.want();
    const ssize_t n = ::recv(fd, w.data(), w.size(), 0);
    if (n <= 0) return false;
    if (!p.commit(static_cast<std::size_t>(n))) return false;
  }
  return true;
}

// A rank's side of the handshake, by hand: hello, challenge (checked against
// `token`), proof made with `token`. `root_proved`: the challenge verified.
struct hand_shake {
  int fd = -1;
  boot::transcript t{};
  boot::session s{};
  bool got_challenge = false;
  bool root_proved = false;
};

hand_shake shake_hands(std::uint16_t port, std::uint32_t size, std::uint32_t rank, std::string_view token) {
  hand_shake h;
  h.fd = raw_connect(port);
  h.t.size = size;
  h.t.rank = rank;
  h.t.rank_nonce = fresh_nonce();
  const auto hello = boot::encode_hello(token, size, rank, h.t.rank_nonce);
  raw_send(h.fd, hello.data(), hello.size());
  boot::frame_parser ch(2, boot::mac_bytes);
  if (!raw_recv_frame(h.fd, ch) || ch.header().kind != boot::kind::challenge || ch.blobs().size() != 2) return h;
  h.got_challenge = true;
  std::memcpy(h.t.root_nonce.data(), ch.blobs()[0].data(), boot::nonce_bytes);
  const auto want = boot::challenge_mac(token, h.t);
  h.root_proved = std::memcmp(want.data(), ch.blobs()[1].data(), boot::mac_bytes) == 0;
  const auto proof = boot::proof_mac(token, h.t);
  const auto head = boot::encode_frame_header({boot::kind::proof, boot::op::none, 0, 0, 1});
  const auto len = boot::encode_length(boot::mac_bytes);
  raw_send(h.fd, head.data(), head.size());
  raw_send(h.fd, len.data(), len.size());
  raw_send(h.fd, proof.data(), proof.size());
  h.s.key = boot::session_key(token, h.t);
  h.s.outgoing = boot::direction::rank_to_root;
  return h;
}

bool has_bytes(const std::vector<std::byte>& hay, std::string_view needle) {
  const auto* b = reinterpret_cast<const std::byte*>(needle.data());
  return std::search(hay.begin(), hay.end(), b, b + needle.size()) != hay.end();
}

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

  boot::nonce n{};
  for (std::size_t i = 0; i < n.size(); ++i) n[i] = static_cast<std::byte>(0xa0 + i);
  const auto hello = boot::encode_hello("tok", 4, 3, n);
  const auto h = boot::decode_hello(hello);
  CHECK(h.magic == boot::wire_magic);
  CHECK(h.kind == static_cast<std::uint8_t>(boot::kind::hello));
  CHECK(h.version == boot::wire_version);
  CHECK(h.size == 4);
  CHECK(h.rank == 3);
  CHECK(h.rank_nonce == n);
  CHECK(boot::decode_hello(std::span(hello).first(5)).magic == 0);  // short: nothing read
  // hello_mac: made with the job's token, over every byte before it.
  CHECK(std::equal(h.mac.begin(), h.mac.end(), hello.begin() + boot::hello_body_bytes));
  CHECK(boot::hello_vouched("tok", hello));
  CHECK_FALSE(boot::hello_vouched("tok2", hello));
  for (std::size_t i : {std::size_t{5}, std::size_t{8}, std::size_t{12}, std::size_t{31}, boot::hello_bytes - 1}) {
    auto altered = hello;
    altered[i] ^= std::byte{1};
    CAPTURE(i);
    CHECK_FALSE(boot::hello_vouched("tok", altered));
  }
  const auto link = boot::encode_link_hello("tok", 4, 3, 2, n);  // same body but kind and round: another MAC
  CHECK(boot::hello_vouched("tok", link));
  CHECK(boot::decode_hello(link).round == 2);
  CHECK_FALSE(std::equal(link.begin() + boot::hello_body_bytes, link.end(), hello.begin() + boot::hello_body_bytes));

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

  // One-shot strangers: they send something (or nothing) and wait.
  enum class expect { nothing, version_reject, challenge_only };
  struct stranger {
    const char* what;
    int fd;
    expect answer;
  };
  std::vector<stranger> strangers;
  const auto add = [&](const char* what, std::span<const std::byte> bytes, expect answer) {
    const int fd = raw_connect(port);
    if (!bytes.empty()) raw_send(fd, bytes.data(), bytes.size());
    strangers.push_back({what, fd, answer});
  };
  const std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  add("http", std::as_bytes(std::span(http)), expect::nothing);
  add("wrong version", boot::encode_hello("not the job's token", 3, 1, fresh_nonce(), 99), expect::version_reject);
  // What a version 1 rank sent: the token in clear. Refused on the version.
  std::vector<std::byte> v1(20);
  boot::store_le<std::uint32_t>(v1.data(), boot::wire_magic);
  v1[4] = std::byte{1};
  boot::store_le<std::uint16_t>(v1.data() + 6, 1);
  boot::store_le<std::uint32_t>(v1.data() + 8, 3);
  boot::store_le<std::uint32_t>(v1.data() + 12, 1);
  boot::store_le<std::uint32_t>(v1.data() + 16, 5);
  for (char c : std::string_view("token")) v1.push_back(static_cast<std::byte>(c));
  add("version 1 hello", v1, expect::version_reject);
  const auto hello = boot::encode_hello("not the job's token", 3, 1, fresh_nonce());
  add("half a hello", std::span(hello).first(10), expect::nothing);
  add("hello, never a proof", hello, expect::challenge_only);
  add("silent", {}, expect::nothing);

  // Strangers that go through the handshake, in a child (rank 0 answers them
  // from inside accept()); the real ranks start once they are done.
  int gate[2];
  REQUIRE(::pipe(gate) == 0);
  const pid_t interactive = spawn([&] {
    ::close(gate[0]);
    struct attempt {
      const char* what;
      std::uint32_t size, rank;
      const char* token;
      std::optional<boot::reject_reason> expect;  // nullopt: closed without a word
    };
    const attempt attempts[] = {
        {"wrong token", 3, 1, "guess", std::nullopt},
        {"empty token", 3, 2, "", std::nullopt},
        {"wrong size", 5, 1, token.c_str(), boot::reject_reason::size},
        {"rank 0", 3, 0, token.c_str(), boot::reject_reason::rank},
        {"rank 7", 3, 7, token.c_str(), boot::reject_reason::rank},
    };
    int failures = 0;
    for (const auto& a : attempts) {
      auto h = shake_hands(port, a.size, a.rank, a.token);
      const bool token_right = std::string_view(a.token) == token;
      if (!h.got_challenge || h.root_proved != token_right) {
        std::fprintf(stderr, "%s: challenge %d, root proved %d\n", a.what, h.got_challenge, h.root_proved);
        ++failures;
      }
      boot::frame_parser answer(0, 0, true);
      const bool got = raw_recv_frame(h.fd, answer);
      if (!a.expect) {
        if (got) {
          std::fprintf(stderr, "%s: answered, expected a close\n", a.what);
          ++failures;
        }
      } else if (!got || answer.header().kind != boot::kind::reject || !answer.authentic(h.s) ||
                 answer.header().aux != static_cast<std::uint16_t>(*a.expect)) {
        std::fprintf(stderr, "%s: no authentic reject %d\n", a.what, static_cast<int>(*a.expect));
        ++failures;
      }
      ::close(h.fd);
    }
    const char go[2] = {'g', 'g'};
    (void)!::write(gate[1], go, 2);
    return failures == 0 ? 0 : 1;
  });
  ::close(gate[1]);
  std::vector<pid_t> kids;
  for (int r = 1; r < 3; ++r)
    kids.push_back(spawn([&, r] {
      char c = 0;
      (void)!::read(gate[0], &c, 1);
      return child_join_and_exercise(r, 3, loopback(port), token);
    }));
  ::close(gate[0]);
  auto b = root->accept();
  if (b)
    CHECK(exercise(*b) == "");
  else
    FAIL_CHECK(b.error().describe());
  CHECK(reap(interactive) == 0);
  for (pid_t k : kids) CHECK(reap(k) == 0);

  for (auto& st : strangers) {
    CAPTURE(st.what);
    auto got = read_until_eof(st.fd, 2000ms);
    REQUIRE(got.has_value());  // the root closed it
    switch (st.answer) {
      case expect::nothing: CHECK(got->empty()); break;
      case expect::version_reject: {
        const auto why = reject_in(*got);
        REQUIRE(why.has_value());
        CHECK(static_cast<int>(*why) == static_cast<int>(boot::reject_reason::version));
        break;
      }
      case expect::challenge_only: {
        boot::frame_parser p(2, boot::mac_bytes);
        REQUIRE(got->size() == boot::frame_header_bytes + 2 * boot::length_bytes + boot::nonce_bytes + boot::mac_bytes);
        auto w = p.want();
        std::memcpy(w.data(), got->data(), boot::frame_header_bytes);
        p.commit(boot::frame_header_bytes);
        CHECK(p.header().kind == boot::kind::challenge);
        break;
      }
    }
    ::close(st.fd);
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
  auto root = bootstrap::listen(3, "127.0.0.1:0", token, {2000ms, 2000ms});
  REQUIRE(root);
  const std::uint16_t port = root->port();
  // Rank 1 comes (2 s is ample for a fork to connect, even on a loaded
  // machine); rank 2 never does. Rank 1 learns the job failed when rank 0 gives up.
  const pid_t kid = spawn([&] {
    const auto t0 = steady::now();
    auto r = bootstrap::create(1, 3, loopback(port), token, {5000ms, 5000ms});
    CHILD_CHECK(1, !r);
    CHILD_CHECK(1, r.code() == status::peer_unreachable);
    CHILD_CHECK(1, seconds_since(t0) < 2.0 + sched_slack_s);
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
  CHECK(took >= 1.9);
  CHECK(took < 2.0 + sched_slack_s);
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
    CHECK(took < 1.0 + sched_slack_s);
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
    CHECK(took < 1.0 + sched_slack_s);
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
  CHECK(took < 3.0 + sched_slack_s);  // peer_unreachable above: found, not timed out
  CHECK(b->barrier().code() == status::peer_unreachable);
  CHECK(reap(survivor) == 0);
}

TEST_CASE("a peer that hangs (SIGSTOP): the collective times out on every rank") {
  // Over the peer-to-peer exchange a rank may learn it sooner: a partner
  // that timed out first closes the link they had formed, and the rank fails
  // at once with peer_unreachable, its message naming the links it still
  // waited for (links.cpp).
  const bool p2p = env_is("FABRIX_BOOTSTRAP_EXCHANGE", "peer_to_peer");
  const auto failed_as_expected = [p2p](status code) {
    return code == status::timed_out || (p2p && code == status::peer_unreachable);
  };
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
    CHILD_CHECK(1, failed_as_expected(ok.code()));
    CHILD_CHECK(1, seconds_since(t0) < 1.0 + sched_slack_s);
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
  CAPTURE(ok.error().message);
  CHECK(failed_as_expected(ok.code()));
  CHECK(contains(ok.error().message, "rank 2"));
  if (ok.code() == status::timed_out) CHECK(took >= 0.9);
  CHECK(took < 1.0 + sched_slack_s);
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
  CHECK(seconds_since(t0) < 5.0 + sched_slack_s);
  CHECK(reap(kid) == 0);
}

TEST_CASE("a joined peer announcing a 1 TiB blob is refused without allocating it") {
  const std::string token = "liar";
  const bootstrap_options opts{5000ms, 5000ms};
  auto root = bootstrap::listen(2, "127.0.0.1:0", token, opts);
  REQUIRE(root);
  const std::uint16_t port = root->port();
  const pid_t liar = spawn([&] {
    auto hs = shake_hands(port, 2, 1, token);  // it knows the token: a joined rank that lies
    CHILD_CHECK(1, hs.root_proved);
    const int fd = hs.fd;
    boot::frame_parser welcome(0, 0, true);
    CHILD_CHECK(1, raw_recv_frame(fd, welcome));
    CHILD_CHECK(1, welcome.header().kind == boot::kind::welcome && welcome.authentic(hs.s));
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
  // Star: the lost connection to rank 0; peer to peer: rank 0's link.
  CHECK((contains(all.error().message, loopback(port)) || contains(all.error().message, "rank 0 (")));
  CHECK(seconds_since(t0) < 5.0 + sched_slack_s);
  CHECK(reap(root_proc) == -1);
}

// ===========================================================================
// Authentication and attacks (hardening items 4 and 5). Everything on the
// loopback, every wait bounded.

namespace {

int raw_listener(std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 64) == 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

// Children watched by a test that serves sockets meanwhile: their exit codes
// (-1: killed by a signal, -3: still running at the limit, then killed).
struct watched {
  std::vector<pid_t> pids;
  std::map<pid_t, int> codes;
  bool all_done() {
    for (pid_t p : pids) {
      if (codes.count(p)) continue;
      int st = 0;
      if (::waitpid(p, &st, WNOHANG) == p) codes[p] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    }
    return codes.size() == pids.size();
  }
  void kill_rest() {
    for (pid_t p : pids) {
      if (codes.count(p)) continue;
      std::fprintf(stderr, "child %d still running, killed; it was at:\n%s", static_cast<int>(p),
                   fxt::stack_of(p).c_str());
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
      codes[p] = -3;
    }
  }
};

// A man in the middle: relays every connection made to `listen_fd` to rank
// 0's port, recording both directions; `tamper` may change a byte in flight
// (down: rank 0 -> rank; offsets count per connection and direction).
using tamper_fn = std::function<std::byte(bool down, std::size_t offset, std::byte b)>;
struct relay_log {
  std::vector<std::byte> up, down;
  int connections = 0;
};

relay_log run_relay(int listen_fd, std::uint16_t upstream, watched& kids, const tamper_fn& tamper,
                    const std::function<void(relay_log&)>& tick = {}, std::chrono::milliseconds limit = 15s) {
  struct pair {
    int rank_fd, root_fd;
    std::size_t up = 0, down = 0;
  };
  relay_log log;
  std::vector<pair> pairs;
  const auto until = steady::now() + limit;
  while (!kids.all_done()) {
    if (steady::now() >= until) {
      kids.kill_rest();
      break;
    }
    if (tick) tick(log);
    std::vector<pollfd> fds{{listen_fd, POLLIN, 0}};
    for (auto& p : pairs) {
      fds.push_back({p.rank_fd, POLLIN, 0});
      fds.push_back({p.root_fd, POLLIN, 0});
    }
    if (::poll(fds.data(), fds.size(), 10) <= 0) continue;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      for (int side = 0; side < 2; ++side) {
        if (fds[1 + 2 * i + static_cast<std::size_t>(side)].revents == 0) continue;
        auto& p = pairs[i];
        if (p.rank_fd < 0) continue;
        const bool down = side == 1;
        std::byte buf[65536];
        const ssize_t n = ::recv(down ? p.root_fd : p.rank_fd, buf, sizeof buf, 0);
        if (n <= 0) {
          ::close(p.rank_fd);
          ::close(p.root_fd);
          p.rank_fd = p.root_fd = -1;
          continue;
        }
        std::size_t& at = down ? p.down : p.up;
        for (ssize_t k = 0; k < n; ++k)
          buf[k] = tamper ? tamper(down, at + static_cast<std::size_t>(k), buf[k]) : buf[k];
        at += static_cast<std::size_t>(n);
        auto& rec = down ? log.down : log.up;
        rec.insert(rec.end(), buf, buf + n);
        (void)::send(down ? p.rank_fd : p.root_fd, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL);
      }
    }
    std::erase_if(pairs, [](const pair& p) { return p.rank_fd < 0; });
    if (fds[0].revents != 0) {
      const int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) {
        pairs.push_back({c, raw_connect(upstream)});
        ++log.connections;
      }
    }
  }
  for (auto& p : pairs) {
    ::close(p.rank_fd);
    ::close(p.root_fd);
  }
  return log;
}

// Offsets in a connection's streams, from the wire format.
constexpr std::size_t challenge_frame_bytes =
    boot::frame_header_bytes + 2 * boot::length_bytes + boot::nonce_bytes + boot::mac_bytes;                // 84
constexpr std::size_t proof_frame_bytes = boot::frame_header_bytes + boot::length_bytes + boot::mac_bytes;  // 60
constexpr std::size_t welcome_frame_bytes = boot::frame_header_bytes + boot::mac_bytes;                     // 52

}  // namespace

TEST_CASE("hmac: SHA-256 and HMAC-SHA256 match the FIPS 180-4 and RFC 4231 vectors") {
  const auto hex = [](const boot::digest& d) {
    std::string out;
    char b[3];
    for (std::byte x : d) {
      std::snprintf(b, sizeof b, "%02x", std::to_integer<unsigned>(x));
      out += b;
    }
    return out;
  };
  const auto str = [](std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); };
  CHECK(hex(boot::sha256_of({})) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(hex(boot::sha256_of(str("abc"))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hex(boot::sha256_of(str("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  {  // one million 'a', fed in uneven pieces
    boot::sha256 h;
    const std::string a(997, 'a');
    std::size_t left = 1000000;
    while (left > 0) {
      const std::size_t n = std::min(left, a.size() - left % 13);
      h.update(std::string_view(a.data(), n));
      left -= n;
    }
    CHECK(hex(h.finish()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
  const auto hmac = [&](std::span<const std::byte> key, std::span<const std::byte> msg) {
    boot::hmac_sha256 m(key);
    m.update(msg);
    return hex(m.finish());
  };
  const std::vector<std::byte> key1(20, std::byte{0x0b});
  CHECK(hmac(key1, str("Hi There")) == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hmac(str("Jefe"), str("what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  const std::vector<std::byte> key131(131, std::byte{0xaa});  // longer than a block: hashed first
  CHECK(hmac(key131, str("Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("auth: the MACs bind the token, both nonces, size, rank, version and direction") {
  boot::transcript t;
  t.size = 4;
  t.rank = 2;
  t.rank_nonce = fresh_nonce();
  t.root_nonce = fresh_nonce();
  const auto base = boot::challenge_mac("tok", t);
  CHECK(base != boot::proof_mac("tok", t));  // a root's MAC is no rank's proof (and back)
  CHECK(base != boot::session_key("tok", t));
  CHECK(base != boot::challenge_mac("tok2", t));
  auto v = t;
  v.size = 5;
  CHECK(base != boot::challenge_mac("tok", v));
  v = t;
  v.rank = 3;
  CHECK(base != boot::challenge_mac("tok", v));
  v = t;
  v.version = 1;
  CHECK(base != boot::challenge_mac("tok", v));
  v = t;
  v.rank_nonce[0] ^= std::byte{1};
  CHECK(base != boot::challenge_mac("tok", v));
  v = t;
  v.root_nonce[15] ^= std::byte{1};
  CHECK(base != boot::challenge_mac("tok", v));
  CHECK(fresh_nonce() != fresh_nonce());

  // Frames: a MAC made for one direction or position does not open another.
  boot::session root, rank;
  root.key = rank.key = boot::session_key("tok", t);
  root.outgoing = boot::direction::root_to_rank;
  rank.outgoing = boot::direction::rank_to_root;
  const auto h = boot::encode_frame_header({boot::kind::result, boot::op::barrier, 0, 1, 0});
  const auto empty = boot::payload_digest({});
  const auto m0 = root.seal(h, empty);
  boot::session reflect = root;  // the root receiving its own frame back
  reflect.received = 0;
  CHECK_FALSE(reflect.open(h, empty, m0));
  CHECK(rank.open(h, empty, m0));
  CHECK_FALSE(rank.open(h, empty, m0));  // replayed: it is frame #1 now
  const auto m1 = root.seal(h, empty);
  auto other = h;
  other[8] = std::byte{2};  // seq 2
  CHECK_FALSE(rank.open(other, empty, m1));
  CHECK(rank.open(h, empty, m1));
}

TEST_CASE("attack: a fake rank 0 that binds the port first learns neither the token nor a MAC; the rank refuses it") {
  const std::string token = "tok-3c9e1f-fake-root-never-sees-it";
  // A challenge the real rank 0 made for another connection, for the fake to replay.
  std::vector<std::byte> real_challenge;
  {
    pid_t real_root = 0;
    std::uint16_t real_port = 0;
    {
      auto root = bootstrap::listen(2, "127.0.0.1:0", token, {600ms, 600ms});
      REQUIRE(root);
      real_port = root->port();
      real_root = spawn([&] {
        auto b = root->accept();
        return !b && b.code() == status::timed_out ? 0 : 1;
      });
    }
    const int fd = raw_connect(real_port);
    raw_send(fd, boot::encode_hello("a guess", 2, 1, fresh_nonce()).data(), boot::hello_bytes);
    boot::frame_parser p(2, boot::mac_bytes);
    REQUIRE(raw_recv_frame(fd, p));
    const auto hb = p.raw_header();
    real_challenge.assign(hb.begin(), hb.end());
    for (const auto& b : p.blobs()) {
      const auto l = boot::encode_length(b.size());
      real_challenge.insert(real_challenge.end(), l.begin(), l.end());
      real_challenge.insert(real_challenge.end(), b.begin(), b.end());
    }
    ::close(fd);
    CHECK(reap(real_root) == 0);
  }
  REQUIRE(real_challenge.size() == challenge_frame_bytes);

  std::uint16_t port = 0;
  const int lfd = raw_listener(port);
  const auto t0 = steady::now();
  watched kids;
  kids.pids.push_back(spawn([&] {
    auto b = bootstrap::create(1, 2, loopback(port), token, {1500ms, 1500ms});
    CHILD_CHECK(1, !b);
    std::fprintf(stderr, "rank 1 refused the fake root: %s\n", b.error().describe().c_str());
    CHILD_CHECK(1, b.code() == status::access_denied);
    CHILD_CHECK(1, contains(b.error().message, "failed authentication"));
    CHILD_CHECK(1, contains(b.error().message, loopback(port)));
    return 0;
  }));
  // The fake: reads each hello, answers with a made-up challenge (MAC under a
  // guessed token) or with the real rank 0's challenge replayed, then records
  // whatever else comes.
  struct conn {
    int fd;
    std::vector<std::byte> got;
    bool answered = false;
  };
  std::vector<conn> conns;
  const auto until = steady::now() + 10s;
  while (!kids.all_done() && steady::now() < until) {
    std::vector<pollfd> fds{{lfd, POLLIN, 0}};
    for (auto& c : conns) fds.push_back({c.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 10) <= 0) continue;
    for (std::size_t i = 0; i < conns.size(); ++i) {
      if (fds[1 + i].revents == 0 || conns[i].fd < 0) continue;
      std::byte buf[4096];
      const ssize_t n = ::recv(conns[i].fd, buf, sizeof buf, 0);
      if (n <= 0) {
        ::close(conns[i].fd);
        conns[i].fd = -1;
        continue;
      }
      auto& c = conns[i];
      c.got.insert(c.got.end(), buf, buf + n);
      if (!c.answered && c.got.size() >= boot::hello_bytes) {
        c.answered = true;
        if (i % 2 == 1) {
          raw_send(c.fd, real_challenge);
        } else {
          const auto h = boot::decode_hello(c.got);
          boot::transcript t{boot::wire_version, h.size, h.rank, h.rank_nonce, fresh_nonce()};
          const auto mac = boot::challenge_mac("fabrix", t);  // the default token, guessed
          const auto head = boot::encode_frame_header({boot::kind::challenge, boot::op::none, 0, 0, 2});
          std::vector<std::byte> ch(head.begin(), head.end());
          for (std::span<const std::byte> b :
               {std::span<const std::byte>(t.root_nonce), std::span<const std::byte>(mac)}) {
            const auto l = boot::encode_length(b.size());
            ch.insert(ch.end(), l.begin(), l.end());
            ch.insert(ch.end(), b.begin(), b.end());
          }
          raw_send(c.fd, ch);
        }
      }
    }
    if (fds[0].revents != 0) {
      const int c = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) conns.push_back({c, {}, false});
    }
  }
  kids.kill_rest();
  ::close(lfd);
  CHECK(kids.codes[kids.pids[0]] == 0);
  MESSAGE("rank 1 refused the fake root in " << seconds_since(t0) << " s, over " << conns.size() << " connection(s)");
  REQUIRE(conns.size() >= 2);  // the made-up challenge and the replayed one were both tried
  std::vector<boot::nonce> nonces;
  for (auto& c : conns) {
    CAPTURE(c.got.size());
    // All the fake ever received: one hello per connection. No proof (nothing
    // to replay but the hello, which rank 0 challenges afresh), and never the
    // token; the hello's MAC is over public values, like the challenge the
    // real rank 0 gives anyone.
    CHECK(c.got.size() == boot::hello_bytes);
    CHECK_FALSE(has_bytes(c.got, token));
    nonces.push_back(boot::decode_hello(c.got).rank_nonce);
    if (c.fd >= 0) ::close(c.fd);
  }
  std::sort(nonces.begin(), nonces.end());
  CHECK(std::adjacent_find(nonces.begin(), nonces.end()) == nonces.end());  // fresh nonce every time
}

TEST_CASE("attack: the token never travels; a recorded handshake replayed to rank 0 is refused") {
  const std::string token = "tok-8d2b77-not-on-the-wire";
  const bootstrap_options opts{10000ms, 10000ms};
  std::uint16_t root_port = 0;
  watched kids;
  {
    auto root = bootstrap::listen(3, "127.0.0.1:0", token, opts);
    REQUIRE(root);
    root_port = root->port();
    kids.pids.push_back(spawn([&] {
      auto b = root->accept();
      if (!report(0, b, "accept")) return 1;
      const std::string err = exercise(*b);
      if (!err.empty()) std::fprintf(stderr, "rank 0: %s\n", err.c_str());
      return err.empty() ? 0 : 1;
    }));
  }
  std::uint16_t relay_port = 0;
  const int lfd = raw_listener(relay_port);
  int gate[2];
  REQUIRE(::pipe(gate) == 0);
  kids.pids.push_back(spawn([&] { return child_join_and_exercise(1, 3, loopback(relay_port), token, opts); }));
  kids.pids.push_back(spawn([&] {
    ::close(gate[1]);
    char c = 0;
    (void)!::read(gate[0], &c, 1);
    return child_join_and_exercise(2, 3, loopback(root_port), token, opts);
  }));
  ::close(gate[0]);

  // Once rank 1's hello and proof went through, replay them to rank 0 on a
  // new connection: rank 0 challenges with a fresh nonce, the old proof fails.
  std::optional<std::vector<std::byte>> replay_answer;
  const auto tick = [&](relay_log& log) {
    if (replay_answer || log.up.size() < boot::hello_bytes + proof_frame_bytes) return;
    const int fd = raw_connect(root_port);
    raw_send(fd, log.up.data(), boot::hello_bytes + proof_frame_bytes);
    replay_answer = read_until_eof(fd, 4000ms);
    ::close(fd);
    (void)!::write(gate[1], "g", 1);  // now rank 2 may join
  };
  const auto log = run_relay(lfd, root_port, kids, {}, tick);
  ::close(lfd);
  ::close(gate[1]);
  for (pid_t p : kids.pids) CHECK(kids.codes[p] == 0);
  REQUIRE(replay_answer.has_value());
  // The challenge, then the close: no welcome, no reject (nothing authenticated it).
  CHECK(replay_answer->size() == challenge_frame_bytes);
  CHECK(log.connections == 1);
  CHECK(log.up.size() > (1u << 20));  // the whole exercise (rank 1 sends ~1 MiB) went through the relay
  CHECK_FALSE(has_bytes(log.up, token));
  CHECK_FALSE(has_bytes(log.down, token));
}

TEST_CASE("attack: forged or altered frames between rank 0 and a rank are refused") {
  const std::string token = "tok-forgery";
  const bootstrap_options opts{5000ms, 5000ms};
  const std::string root_blob = "ROOTBLOB-from-rank-0";
  const std::string rank_blob = "RANKBLOB-from-rank-1";
  struct scenario {
    const char* what;
    bool down;
    std::size_t offset;
    int root_outcome;  // 0: allgather ok, 1: access_denied, 2: another error
    int rank_outcome;  // 0: ok, 1: create refused (access_denied), 2: allgather refused (access_denied)
  };
  // down stream: challenge | welcome | result (header, length, rank 0's blob, ...)
  // up stream:   hello | proof | contribute (header, length, rank 1's blob)
  const scenario scenarios[] = {
      {"welcome", true, challenge_frame_bytes + 16, 2, 1},
      {"welcome trailer", true, challenge_frame_bytes + welcome_frame_bytes - 1, 2, 1},
      {"allgather result blob", true,
       challenge_frame_bytes + welcome_frame_bytes + boot::frame_header_bytes + boot::length_bytes, 0, 2},
      {"allgather contribution", false,
       boot::hello_bytes + proof_frame_bytes + boot::frame_header_bytes + boot::length_bytes, 1, 2},
  };
  for (const auto& sc : scenarios) {
    CAPTURE(sc.what);
    std::uint16_t root_port = 0;
    watched kids;
    {
      auto root = bootstrap::listen(2, "127.0.0.1:0", token, opts);
      REQUIRE(root);
      root_port = root->port();
      kids.pids.push_back(spawn([&] {
        auto b = root->accept();
        if (!report(0, b, "accept")) return 3;
        auto all = b->allgather(std::as_bytes(std::span(root_blob)));
        if (all) return 0;
        std::fprintf(stderr, "rank 0 (%s): %s\n", sc.what, all.error().describe().c_str());
        return all.code() == status::access_denied && contains(all.error().message, "failed authentication") ? 1 : 2;
      }));
    }
    std::uint16_t relay_port = 0;
    const int lfd = raw_listener(relay_port);
    kids.pids.push_back(spawn([&] {
      auto b = bootstrap::create(1, 2, loopback(relay_port), token, opts);
      if (!b) {
        std::fprintf(stderr, "rank 1 (%s): %s\n", sc.what, b.error().describe().c_str());
        return b.code() == status::access_denied && contains(b.error().message, "failed authentication") ? 1 : 3;
      }
      auto all = b->allgather(std::as_bytes(std::span(rank_blob)));
      if (all) {
        const auto& got = (*all)[0];
        const bool same = std::equal(got.begin(), got.end(), reinterpret_cast<const std::byte*>(root_blob.data()),
                                     reinterpret_cast<const std::byte*>(root_blob.data() + root_blob.size()));
        return same ? 0 : 4;  // 4: a forged blob was accepted
      }
      std::fprintf(stderr, "rank 1 (%s): %s\n", sc.what, all.error().describe().c_str());
      return all.code() == status::access_denied ? 2 : 3;
    }));
    const auto flip = [&](bool down, std::size_t at, std::byte b) {
      return down == sc.down && at == sc.offset ? b ^ std::byte{0x20} : b;
    };
    const auto log = run_relay(lfd, root_port, kids, flip);
    ::close(lfd);
    CHECK(kids.codes[kids.pids[0]] == sc.root_outcome);
    CHECK(kids.codes[kids.pids[1]] == sc.rank_outcome);
    CHECK_FALSE(has_bytes(log.up, token));
    CHECK_FALSE(has_bytes(log.down, token));
  }
}

TEST_CASE("flood: a job forms while strangers keep opening connections that never authenticate") {
  const std::string token = "tok-flood";
  const bootstrap_options opts{15000ms, 15000ms};
  auto root = bootstrap::listen(3, "127.0.0.1:0", token, opts);
  REQUIRE(root);
  const std::uint16_t port = root->port();
  // The flooder: up to 300 connections open at once, replaced as fast as it
  // can: silent ones, ones that send a well-formed hello (its hello_mac not
  // made with the job's token) and never prove anything, and garbage. All
  // from 127.0.0.1, like the real ranks: only the vouched hellos of the real
  // ranks keep them from being dropped with the flood (root.cpp).
  const pid_t flooder = spawn([&] {
    std::deque<int> open;
    std::uint64_t made = 0;
    const auto until = steady::now() + 20s;
    while (steady::now() < until) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) break;
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      (void)::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
      pollfd p{fd, POLLOUT, 0};
      (void)::poll(&p, 1, 50);
      if (made % 3 == 1) {
        const auto hello =
            boot::encode_hello("not the job's token", 3, 1 + static_cast<std::uint32_t>(made % 2), fresh_nonce());
        (void)::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      } else if (made % 3 == 2) {
        const char junk[] = "\x46\x42\x58\x42\x01\x00\x02\x00garbage garbage";
        (void)::send(fd, junk, sizeof junk, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      ++made;
      open.push_back(fd);
      if (open.size() > 300) {
        ::close(open.front());
        open.pop_front();
      }
    }
    return 0;
  });
  std::this_thread::sleep_for(300ms);  // the flood is on before the real ranks come
  std::vector<pid_t> kids;
  for (int r = 1; r < 3; ++r)
    kids.push_back(spawn([&, r] { return child_join_and_exercise(r, 3, loopback(port), token, opts); }));
  const auto t0 = steady::now();
  auto b = root->accept();
  const double took = seconds_since(t0);
  if (b)
    CHECK(exercise(*b) == "");
  else
    FAIL_CHECK(b.error().describe());
  for (pid_t k : kids) CHECK(reap(k, 30s) == 0);
  ::kill(flooder, SIGKILL);
  reap(flooder);
  MESSAGE("job formed under the flood in " << took << " s");
  CHECK(took < 10.0);
}

TEST_CASE("a rank that rank 0 drops before the handshake finishes retries, and says so when it gives up") {
  // A "rank 0" that accepts and closes every connection, as one evicting under load would.
  std::uint16_t port = 0;
  const int lfd = raw_listener(port);
  watched kids;
  kids.pids.push_back(spawn([&] {
    const auto t0 = steady::now();
    auto b = bootstrap::create(1, 2, loopback(port), "t", {1000ms, 1000ms});
    CHILD_CHECK(1, !b);
    std::fprintf(stderr, "rank 1: %s\n", b.error().describe().c_str());
    CHILD_CHECK(1, b.code() == status::peer_unreachable);
    CHILD_CHECK(1, contains(b.error().message, "closed the connection before the handshake finished"));
    CHILD_CHECK(1, contains(b.error().message, "evicted under load?"));
    CHILD_CHECK(1, contains(b.error().message, "retried"));
    CHILD_CHECK(1, seconds_since(t0) >= 0.9 && seconds_since(t0) < 1.0 + sched_slack_s);
    return 0;
  }));
  int dropped = 0;
  const auto until = steady::now() + 5s;
  while (!kids.all_done() && steady::now() < until) {
    pollfd p{lfd, POLLIN, 0};
    if (::poll(&p, 1, 10) <= 0) continue;
    const int c = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    ++dropped;
    ::close(c);
  }
  kids.kill_rest();
  ::close(lfd);
  CHECK(kids.codes[kids.pids[0]] == 0);
  CHECK(dropped >= 3);  // it came back
}
