// Dynamic peers: a server process that clients join and leave at run time,
// without a job-wide bootstrap (issue 19 item 4). The server opens a
// domain, registers one 4 KiB slot per client and publishes its offer (its
// address blob and the region's remote_buffer) in a file readable by its
// user only; it never connects to a client. Client processes (this program
// again, --client) each run cycles of: open a domain, connect to the
// server from their side only, write a pattern into their slot, read it
// back, flush, close everything. Some are killed (SIGKILL) mid-run.
//
// Checked: every client that was not killed exits 0 (each of its writes
// and reads completed ok, every byte compared); the server's open
// descriptors and resident memory after the last cycle are within a bound
// of what they were after the first round of clients (flat: nothing kept
// per departed client); the server keeps serving throughout (it polls and
// never sees an error). Prints what it measured.
//
//   fabrix-churn --provider ucx|ofi|verbs [--transport T] [--clients 100]
//                [--cycles 10] [--parallel 8] [--kill-every 10]
#include <fabrix/fabrix.hpp>
#ifdef FABRIX_HAVE_UCX
#include <fabrix/ucx.hpp>
#endif
#ifdef FABRIX_HAVE_OFI
#include <fabrix/ofi.hpp>
#endif
#ifdef FABRIX_HAVE_VERBS
#include <fabrix/verbs.hpp>
#endif

#include "process_usage.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr std::size_t slot_bytes = 4096;
using clock_type = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& who, const std::string& what) {
  std::fprintf(stderr, "fabrix-churn %s: %s\n", who.c_str(), what.c_str());
  std::exit(1);
}

template <class R>
auto must(R&& r, const std::string& who, const char* what) {
  if (!r) fail(who, std::string(what) + ": " + r.error().describe());
  return std::move(*r);
}

std::byte pattern(std::uint64_t slot, std::uint64_t cycle, std::size_t i) {
  std::uint64_t x = (slot * 1000003u + cycle + 1) * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  return static_cast<std::byte>(x & 0xff);
}

struct options {
  std::string provider = "ucx", transport, offer;
  int clients = 100, cycles = 10, parallel = 8, kill_every = 10, slot = -1;
  bool client = false;
};

// The offer file: u32 address length, address blob, then the encoded
// remote_buffer of the slots' region.
void write_offer(const std::string& path, const std::vector<std::byte>& address, const fabrix::remote_buffer& rb) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) fail("server", "cannot create " + path + ": " + std::strerror(errno));
  const auto n = static_cast<std::uint32_t>(address.size());
  const auto blob = rb.encode();
  std::vector<std::byte> out(sizeof n);
  std::memcpy(out.data(), &n, sizeof n);
  out.insert(out.end(), address.begin(), address.end());
  out.insert(out.end(), blob.begin(), blob.end());
  if (::write(fd, out.data(), out.size()) != static_cast<ssize_t>(out.size()))
    fail("server", "short write of the offer");
  ::close(fd);
}

// One client process: `cycles` joins and departures, every byte checked.
int run_client(const options& o) {
  const std::string who = "client " + std::to_string(o.slot);
  std::ifstream f(o.offer, std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::uint32_t n = 0;
  if (raw.size() < sizeof n) fail(who, "offer too short");
  std::memcpy(&n, raw.data(), sizeof n);
  if (raw.size() < sizeof n + n) fail(who, "offer too short for its address");
  const auto* bytes = reinterpret_cast<const std::byte*>(raw.data());
  const std::vector<std::byte> address(bytes + sizeof n, bytes + sizeof n + n);
  const auto rb = must(fabrix::remote_buffer::decode({bytes + sizeof n + n, raw.size() - sizeof n - n}), who,
                       "decode the offer's remote_buffer");
  fabrix::domain_options dopts;
  dopts.transport = o.transport;
  const auto slot = static_cast<std::uint64_t>(o.slot);
  for (int cycle = 0; cycle < o.cycles; ++cycle) {
    auto dom = must(fabrix::open(o.provider, dopts), who, "open");
    std::vector<std::byte> src(slot_bytes), back(slot_bytes);
    for (std::size_t i = 0; i < slot_bytes; ++i) src[i] = pattern(slot, static_cast<std::uint64_t>(cycle), i);
    auto ms = must(dom.register_memory(src, fabrix::access::local), who, "register");
    auto mb = must(dom.register_memory(back, fabrix::access::local), who, "register");
    auto qp = must(dom.connect(address), who, "connect");
    auto await = [&](std::uint64_t token) {
      fabrix::completion c[8];
      const auto until = clock_type::now() + std::chrono::seconds(30);
      while (clock_type::now() < until) {
        const std::size_t k = dom.poll(c);
        for (std::size_t i = 0; i < k; ++i) {
          if (c[i].token != token) continue;
          if (c[i].status != fabrix::status::ok)
            fail(who, "operation " + std::to_string(token) + " completed with " +
                          std::string(fabrix::to_string(c[i].status)));
          return;
        }
      }
      fail(who, "operation " + std::to_string(token) + " did not complete in 30 s");
    };
    const auto target = rb.slice(slot * slot_bytes, slot_bytes);
    if (qp.write(ms.slice(0, slot_bytes), target, 1) != fabrix::status::ok) fail(who, "write refused");
    await(1);
    if (qp.read(mb.slice(0, slot_bytes), target, 2) != fabrix::status::ok) fail(who, "read refused");
    await(2);
    if (std::memcmp(src.data(), back.data(), slot_bytes) != 0) fail(who, "read back differs from what was written");
    if (qp.flush(3) != fabrix::status::ok) fail(who, "flush refused");
    await(3);
  }
  return 0;
}

struct child {
  int slot;
  bool doomed;          // to be killed mid-run, at kill_at
  bool killed = false;  // SIGKILL sent
  clock_type::time_point kill_at;
};

int run_server(const options& o, const char* self) {
  fabrix::domain_options dopts;
  dopts.transport = o.transport;
  auto dom = must(fabrix::open(o.provider, dopts), "server", "open");
  std::vector<std::byte> slots(slot_bytes * static_cast<std::size_t>(o.clients));
  auto region = must(dom.register_memory(slots, fabrix::access::remote_write | fabrix::access::remote_read), "server",
                     "register");
  const std::string offer = "/tmp/fabrix-churn-" + std::to_string(::getpid()) + ".offer";
  write_offer(offer, must(dom.address(), "server", "address"), region.remote());

  std::map<pid_t, child> alive;
  int started = 0, exited_ok = 0, killed = 0;
  long rss_warm = -1;
  int fds_warm = -1;
  std::vector<std::string> errors;
  auto spawn = [&](int slot) {
    const bool doomed = o.kill_every > 0 && slot % o.kill_every == o.kill_every - 1;
    const pid_t pid = ::fork();
    if (pid < 0) fail("server", "fork failed");
    if (pid == 0) {
      const std::string s = std::to_string(slot), c = std::to_string(o.cycles);
      ::execl(self, self, "--client", "--offer", offer.c_str(), "--slot", s.c_str(), "--cycles", c.c_str(),
              "--provider", o.provider.c_str(), "--transport", o.transport.c_str(), nullptr);
      std::_Exit(127);
    }
    // A doomed client dies somewhere inside its run (about a cycle in).
    alive[pid] = child{slot, doomed, false, clock_type::now() + std::chrono::milliseconds(40 + 37 * (slot % 7))};
  };
  fabrix::completion c[16];
  const auto limit = clock_type::now() + std::chrono::seconds(600);
  while (started < o.clients || !alive.empty()) {
    if (clock_type::now() > limit) fail("server", "the run took longer than 600 s");
    while (started < o.clients && static_cast<int>(alive.size()) < o.parallel) spawn(started++);
    const std::size_t n = dom.poll(c);
    for (std::size_t i = 0; i < n; ++i)
      errors.push_back("server polled a completion: " + std::string(fabrix::to_string(c[i].status)));
    const auto now = clock_type::now();
    for (auto& [pid, ch] : alive)
      if (ch.doomed && !ch.killed && now >= ch.kill_at) {
        ::kill(pid, SIGKILL);
        ch.killed = true;
      }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      auto it = alive.find(pid);
      if (it != alive.end()) {
        const child& ch = it->second;
        if (ch.killed && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
          ++killed;
        else if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
          ++exited_ok;  // also a doomed one that finished before its kill came
        else
          errors.push_back("client " + std::to_string(ch.slot) + " ended with status " + std::to_string(status));
        alive.erase(it);
        // The server's footprint once the first round of clients is gone.
        if (rss_warm < 0 && exited_ok + killed >= o.parallel) {
          rss_warm = fabrix::scaling::rss_kib();
          fds_warm = fabrix::scaling::open_fds();
        }
      }
    }
  }
  // Serve a little longer: departures still being noticed by the provider.
  const auto settle = clock_type::now() + std::chrono::milliseconds(500);
  while (clock_type::now() < settle) (void)dom.poll(c);
  const long rss_end = fabrix::scaling::rss_kib();
  const int fds_end = fabrix::scaling::open_fds();
  ::unlink(offer.c_str());
  std::printf(
      "fabrix-churn: provider %s transport '%s': %d clients x %d cycles, %d in parallel: %d ended ok, %d killed; "
      "server after the first round: %ld KiB resident, %d fds; at the end: %ld KiB, %d fds\n",
      o.provider.c_str(), o.transport.c_str(), o.clients, o.cycles, o.parallel, exited_ok, killed, rss_warm, fds_warm,
      rss_end, fds_end);
  for (const auto& e : errors) std::fprintf(stderr, "fabrix-churn: %s\n", e.c_str());
  bool ok = errors.empty();
  if (exited_ok + killed != o.clients) ok = false;
  if (rss_warm < 0) {
    std::fprintf(stderr, "fabrix-churn: fewer clients than one round of --parallel: nothing to compare\n");
    return 1;
  }
  // Flat: nothing kept per departed client. The bounds leave room for
  // allocator growth, not for per-client state (a client's connection costs
  // the server hundreds of KiB and, over tcp, descriptors:
  // perf/scaling/README.md).
  if (fds_end > fds_warm + 2) {
    std::fprintf(stderr, "fabrix-churn: descriptors grew from %d to %d\n", fds_warm, fds_end);
    ok = false;
  }
  if (rss_end > rss_warm + 4096) {
    std::fprintf(stderr, "fabrix-churn: resident memory grew from %ld to %ld KiB\n", rss_warm, rss_end);
    ok = false;
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail("", "missing value after " + a);
      return argv[++i];
    };
    if (a == "--client")
      o.client = true;
    else if (a == "--provider")
      o.provider = value();
    else if (a == "--transport")
      o.transport = value();
    else if (a == "--offer")
      o.offer = value();
    else if (a == "--slot")
      o.slot = std::atoi(value().c_str());
    else if (a == "--clients")
      o.clients = std::atoi(value().c_str());
    else if (a == "--cycles")
      o.cycles = std::atoi(value().c_str());
    else if (a == "--parallel")
      o.parallel = std::atoi(value().c_str());
    else if (a == "--kill-every")
      o.kill_every = std::atoi(value().c_str());
    else
      fail("", "unknown option " + a);
  }
  if (o.clients < 1 || o.cycles < 1 || o.parallel < 1) fail("", "--clients, --cycles and --parallel take 1 or more");
  return o.client ? run_client(o) : run_server(o, "/proc/self/exe");
}
