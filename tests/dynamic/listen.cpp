// Dynamic peers through fabrix::listener (listener.hpp): a server process
// listens; client processes (this program again, --client) come at any
// time, dial it with their own receive region as their offer, write their
// pattern into their slot of the server's region (the server's offer), read
// it back and flush; the server, for every client it accepts, writes a
// receipt into that client's receive region, which the client waits for
// and checks. Every few clients one is killed right after it starts (in or
// before its handshake).
//
// The server keeps each client's queue pair until that client has exited
// (as a server drops a peer that left), so that many come and go while it
// runs. Checked: every client that was not killed exits 0 (its writes, reads and
// the receipt all completed ok, every byte compared); every receipt to a
// client that was not killed completes ok; the server's slots of those
// clients hold their patterns at the end; the listener refused no client
// that had the token. Prints what it measured.
//
//   fabrix-listen --provider ucx|ofi|verbs [--transport T] [--clients 24]
//                 [--parallel 6] [--kill-every 6]
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

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
constexpr std::size_t slot_bytes = 4096;
constexpr const char* token = "fabrix-listen-test";

[[noreturn]] void fail(const std::string& who, const std::string& what) {
  std::fprintf(stderr, "fabrix-listen %s: %s\n", who.c_str(), what.c_str());
  std::exit(1);
}

template <class R>
auto must(R&& r, const std::string& who, const char* what) {
  if (!r) fail(who, std::string(what) + ": " + r.error().describe());
  return std::move(*r);
}

std::byte pattern(std::uint64_t slot, std::uint64_t salt, std::size_t i) {
  std::uint64_t x = (slot * 1000003u + salt + 1) * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  return static_cast<std::byte>(x & 0xff);
}

struct options {
  std::string provider = "ucx", transport, where;
  int clients = 24, parallel = 6, kill_every = 6, slot = -1;
  bool client = false;
};

// An offer: u32 slot, then an encoded remote_buffer.
std::vector<std::byte> make_offer(std::uint32_t slot, const fabrix::remote_buffer& rb) {
  std::vector<std::byte> out(4);
  std::memcpy(out.data(), &slot, 4);
  const auto enc = rb.encode();
  out.insert(out.end(), enc.begin(), enc.end());
  return out;
}
std::pair<std::uint32_t, fabrix::remote_buffer> read_offer(const std::vector<std::byte>& offer,
                                                           const std::string& who) {
  if (offer.size() < 4) fail(who, "an offer shorter than its slot number");
  std::uint32_t slot = 0;
  std::memcpy(&slot, offer.data(), 4);
  auto rb = must(fabrix::remote_buffer::decode(std::span(offer).subspan(4)), who, "decode the offer");
  return {slot, rb};
}

// Polls until the operation with `token` completes; its status.
fabrix::status await(fabrix::any_domain& dom, std::uint64_t token_id, const std::string& who) {
  fabrix::completion c[8];
  const auto until = clock_type::now() + 30s;
  while (clock_type::now() < until) {
    const std::size_t k = dom.poll(c);
    for (std::size_t i = 0; i < k; ++i)
      if (c[i].token == token_id) return c[i].status;
  }
  fail(who, "operation " + std::to_string(token_id) + " did not complete in 30 s");
}

int run_client(const options& o) {
  const std::string who = "client " + std::to_string(o.slot);
  fabrix::domain_options dopts;
  dopts.transport = o.transport;
  auto dom = must(fabrix::open(o.provider, dopts), who, "open");
  std::vector<std::byte> src(slot_bytes), back(slot_bytes), receipt(slot_bytes);
  const auto slot = static_cast<std::uint64_t>(o.slot);
  for (std::size_t i = 0; i < slot_bytes; ++i) src[i] = pattern(slot, 0, i);
  auto ms = must(dom.register_memory(src, fabrix::access::local), who, "register");
  auto mb = must(dom.register_memory(back, fabrix::access::local), who, "register");
  auto mr = must(dom.register_memory(receipt, fabrix::access::remote_write), who, "register");
  auto peer = must(fabrix::dial(dom, o.where, token, 10s, make_offer(static_cast<std::uint32_t>(o.slot), mr.remote())),
                   who, "dial");
  auto [unused, target_region] = read_offer(peer.offer, who);
  (void)unused;
  const auto target = target_region.slice(slot * slot_bytes, slot_bytes);
  if (peer.qp.write(ms.slice(0, slot_bytes), target, 1) != fabrix::status::ok) fail(who, "write refused");
  if (const auto st = await(dom, 1, who); st != fabrix::status::ok) fail(who, "write: " + std::string(to_string(st)));
  if (peer.qp.read(mb.slice(0, slot_bytes), target, 2) != fabrix::status::ok) fail(who, "read refused");
  if (const auto st = await(dom, 2, who); st != fabrix::status::ok) fail(who, "read: " + std::string(to_string(st)));
  if (std::memcmp(src.data(), back.data(), slot_bytes) != 0) fail(who, "read back differs from what was written");
  if (peer.qp.flush(3) != fabrix::status::ok) fail(who, "flush refused");
  if (const auto st = await(dom, 3, who); st != fabrix::status::ok) fail(who, "flush: " + std::string(to_string(st)));
  // The server's receipt: its pattern for this slot, salt 1.
  const auto until = clock_type::now() + 30s;
  fabrix::completion c[4];
  for (;;) {
    (void)dom.poll(c);  // progress for the server's write
    bool all = true;
    for (std::size_t i = 0; i < slot_bytes && all; ++i) all = receipt[i] == pattern(slot, 1, i);
    if (all) break;
    if (clock_type::now() > until) fail(who, "no receipt from the server in 30 s");
  }
  std::printf("client %d: peer id %u, wrote, read back, flushed, got the receipt\n", o.slot, peer.my_id);
  return 0;
}

int run_server(const options& o, const char* self) {
  fabrix::domain_options dopts;
  dopts.transport = o.transport;
  auto dom = must(fabrix::open(o.provider, dopts), "server", "open");
  std::vector<std::byte> slots(slot_bytes * static_cast<std::size_t>(o.clients)), receipt(slot_bytes);
  auto region = must(dom.register_memory(slots, fabrix::access::remote_write | fabrix::access::remote_read), "server",
                     "register");
  auto mr = must(dom.register_memory(receipt, fabrix::access::local), "server", "register");
  fabrix::listener::options lo;
  lo.handshake_timeout = 1s;
  auto l = must(fabrix::listener::open("127.0.0.1:0", token, lo), "server", "listen");
  const std::string where = l.address();
  const auto offer = make_offer(0, region.remote());

  std::map<pid_t, int> alive;                                     // pid -> slot
  std::map<int, fabrix::queue_pair<fabrix::any_provider>> peers;  // slot -> queue pair, while the client runs
  std::set<int> doomed, served;
  int started = 0, exited_ok = 0, killed = 0, receipts = 0;
  std::vector<std::string> errors;
  const auto limit = clock_type::now() + 240s;
  while (started < o.clients || !alive.empty()) {
    if (clock_type::now() > limit) fail("server", "the run took longer than 240 s");
    while (started < o.clients && static_cast<int>(alive.size()) < o.parallel) {
      const int slot = started++;
      const pid_t pid = ::fork();
      if (pid < 0) fail("server", "fork failed");
      if (pid == 0) {
        const std::string s = std::to_string(slot);
        ::execl(self, self, "--client", "--where", where.c_str(), "--slot", s.c_str(), "--provider", o.provider.c_str(),
                "--transport", o.transport.c_str(), nullptr);
        std::_Exit(127);
      }
      alive[pid] = slot;
      if (o.kill_every > 0 && slot % o.kill_every == o.kill_every - 1) {
        ::usleep(static_cast<useconds_t>(1000 * (slot % 5)));  // somewhere in its start or handshake
        ::kill(pid, SIGKILL);
        doomed.insert(slot);
      }
    }
    fabrix::completion c[8];
    (void)dom.poll(c);  // progress for the clients' writes and reads
    auto peer = fabrix::accept(dom, l, 20ms, offer);
    if (peer) {
      auto [slot, client_region] = read_offer(peer->offer, "server");
      if (slot >= static_cast<std::uint32_t>(o.clients)) fail("server", "an offer with slot " + std::to_string(slot));
      for (std::size_t i = 0; i < slot_bytes; ++i) receipt[i] = pattern(slot, 1, i);
      const fabrix::status posted = peer->qp.write(mr.slice(0, slot_bytes), client_region.whole(), 100 + slot);
      const fabrix::status st = posted == fabrix::status::ok ? await(dom, 100 + slot, "server") : posted;
      if (st == fabrix::status::ok)
        ++receipts;
      else if (!doomed.count(static_cast<int>(slot)))
        errors.push_back("receipt to client " + std::to_string(slot) + ": " + std::string(fabrix::to_string(st)));
      served.insert(static_cast<int>(slot));
      // Kept until the client leaves: closing a queue pair ends that
      // connection for the other side too (UCX tcp fails the client's
      // operations still in flight with peer_unreachable).
      peers.insert_or_assign(static_cast<int>(slot), std::move(peer->qp));
    } else if (peer.error().code != fabrix::status::timed_out) {
      errors.push_back("accept: " + peer.error().describe());
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0 && alive.count(pid)) {
      const int slot = alive[pid];
      alive.erase(pid);
      peers.erase(slot);  // it left: its queue pair goes
      if (doomed.count(slot) && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        ++killed;
      else if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        ++exited_ok;
      else
        errors.push_back("client " + std::to_string(slot) + " ended with status " + std::to_string(status));
    }
  }
  for (int slot = 0; slot < o.clients; ++slot) {
    if (doomed.count(slot)) continue;
    const std::byte* s = slots.data() + static_cast<std::size_t>(slot) * slot_bytes;
    for (std::size_t i = 0; i < slot_bytes; ++i)
      if (s[i] != pattern(static_cast<std::uint64_t>(slot), 0, i)) {
        errors.push_back("slot " + std::to_string(slot) + " does not hold its client's pattern");
        break;
      }
  }
  std::printf("server: %d clients, %d exited ok, %d killed, %zu accepted, %d receipts, listener refused %llu\n",
              o.clients, exited_ok, killed, served.size(), receipts, static_cast<unsigned long long>(l.refused()));
  if (exited_ok + killed != o.clients)
    errors.push_back(std::to_string(o.clients - exited_ok - killed) + " clients neither exited ok nor were killed");
  for (const auto& e : errors) std::fprintf(stderr, "fabrix-listen server: %s\n", e.c_str());
  return errors.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) fail("args", a + " needs a value");
      return argv[++i];
    };
    if (a == "--client")
      o.client = true;
    else if (a == "--provider")
      o.provider = next();
    else if (a == "--transport")
      o.transport = next();
    else if (a == "--where")
      o.where = next();
    else if (a == "--slot")
      o.slot = std::stoi(next());
    else if (a == "--clients")
      o.clients = std::stoi(next());
    else if (a == "--parallel")
      o.parallel = std::stoi(next());
    else if (a == "--kill-every")
      o.kill_every = std::stoi(next());
    else
      fail("args", "unknown argument " + a);
  }
  return o.client ? run_client(o) : run_server(o, argv[0]);
}
