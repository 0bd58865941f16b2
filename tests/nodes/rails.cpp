// Two rails between two simulated nodes (rails.sh): a routed domain whose
// net route names both links' interfaces (FABRIX_ROUTE, set by the
// script), large writes and reads striped over them, and one rail cut in
// the middle of a round.
//
//   fabrix-rails serve DIR         the target (node b): registers REGION bytes,
//                                  publishes DIR/offer, keeps progress until
//                                  DIR/done names the last round, then checks
//                                  every byte of the region against it
//   fabrix-rails write DIR [--cut] the initiator (node a): rounds of writes of
//                                  the whole region in 1 MiB operations, each
//                                  read back and compared; with --cut, round
//                                  2 stops half-way, creates DIR/cut-me, waits
//                                  for DIR/cut-done (the script has taken a
//                                  rail down), and goes on
//
// Checked by the initiator: every operation completes ok, or, with --cut,
// with timed_out (a stripe on the cut rail) and then ok when posted again;
// with --cut at least one did time out, the queue pair's route says the
// rail is down, and the first flush after it reports timed_out; every byte
// read back is what was written. Writes ask for completion_level::delivered,
// so an ok write's bytes are at the target whatever happens to a rail
// afterwards. Prints what it measured.
#include <fabrix/fabrix.hpp>
#include <fabrix/routed.hpp>
#ifdef FABRIX_HAVE_OFI
#include <fabrix/ofi.hpp>
#endif
#ifdef FABRIX_HAVE_UCX
#include <fabrix/ucx.hpp>
#endif

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t region_bytes = 32u << 20;
constexpr std::size_t op_bytes = 1u << 20;
constexpr std::size_t ops_per_round = region_bytes / op_bytes;
constexpr std::uint64_t flush_token = 1000;
using clock_type = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fabrix-rails: %s\n", what.c_str());
  std::exit(1);
}

template <class R>
auto must(R&& r, const char* what) {
  if (!r) fail(std::string(what) + ": " + r.error().describe());
  return std::move(*r);
}

std::uint64_t word(std::uint64_t seed, std::size_t i) {
  std::uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull ^ (i * 0xbf58476d1ce4e5b9ull);
  x ^= x >> 29;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 32);
}
void fill(std::vector<std::byte>& b, std::uint64_t seed) {
  for (std::size_t i = 0; i < b.size() / 8; ++i) {
    const std::uint64_t w = word(seed, i);
    std::memcpy(b.data() + i * 8, &w, 8);
  }
}
// The first byte offset that differs from round `seed`'s pattern, or -1.
long long first_wrong(const std::vector<std::byte>& b, std::uint64_t seed) {
  for (std::size_t i = 0; i < b.size() / 8; ++i) {
    const std::uint64_t w = word(seed, i);
    if (std::memcmp(b.data() + i * 8, &w, 8) != 0) return static_cast<long long>(i * 8);
  }
  return -1;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

void wait_for_file(const std::string& path, int seconds) {
  const auto until = clock_type::now() + std::chrono::seconds(seconds);
  while (!exists(path)) {
    if (clock_type::now() > until) fail(path + " did not appear in " + std::to_string(seconds) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void write_file(const std::string& path, const std::vector<char>& bytes) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot create " + path);
}

using routed_domain = fabrix::domain<fabrix::routed<>>;

int serve(const std::string& dir) {
  auto dom = must(routed_domain::create(), "open the routed domain");
  std::vector<std::byte> region(region_bytes);
  auto mr = must(dom.register_memory(region, fabrix::access::remote_write | fabrix::access::remote_read), "register");
  const auto address = must(dom.address(), "address");
  const auto rb = mr.remote().encode();
  std::vector<char> offer(4);
  const auto n = static_cast<std::uint32_t>(address.size());
  std::memcpy(offer.data(), &n, 4);
  offer.insert(offer.end(), reinterpret_cast<const char*>(address.data()),
               reinterpret_cast<const char*>(address.data()) + address.size());
  offer.insert(offer.end(), reinterpret_cast<const char*>(rb.data()),
               reinterpret_cast<const char*>(rb.data()) + rb.size());
  write_file(dir + "/offer", offer);
  std::printf("serve: %s\n", dom.describe().c_str());
  // Progress for the initiator's operations (tcp providers need the target
  // to poll) until it is done.
  fabrix::completion c[16];
  const auto until = clock_type::now() + std::chrono::seconds(240);
  for (std::uint64_t spins = 0;; ++spins) {
    const std::size_t k = dom.poll(c);
    for (std::size_t i = 0; i < k; ++i)
      fail("serve: polled a completion with " + std::string(fabrix::to_string(c[i].status)));
    if (spins % 4096 == 0) {
      if (exists(dir + "/done")) break;
      if (clock_type::now() > until) fail("serve: no DIR/done in 240 s");
    }
  }
  std::uint64_t seed = 0;
  std::ifstream(dir + "/done") >> seed;
  if (const long long at = first_wrong(region, seed); at >= 0)
    fail("serve: byte " + std::to_string(at) + " of the region is not round " + std::to_string(seed) + "'s");
  std::printf("serve: all %zu bytes are round %llu's\n", region.size(), static_cast<unsigned long long>(seed));
  return 0;
}

struct round_result {
  double write_s = 0;
  int timed_out = 0;  // operations that completed with timed_out and were posted again
};

int write(const std::string& dir, bool cut) {
  wait_for_file(dir + "/offer", 60);
  std::ifstream f(dir + "/offer", std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::uint32_t n = 0;
  if (raw.size() < 4) fail("offer too short");
  std::memcpy(&n, raw.data(), 4);
  if (raw.size() < 4 + std::size_t{n}) fail("offer too short for its address");
  const auto* bytes = reinterpret_cast<const std::byte*>(raw.data());
  const std::vector<std::byte> address(bytes + 4, bytes + 4 + n);
  const auto rb = must(fabrix::remote_buffer::decode({bytes + 4 + n, raw.size() - 4 - n}), "decode the offer");

  auto dom = must(routed_domain::create(), "open the routed domain");
  std::vector<std::byte> src(region_bytes), back(region_bytes);
  auto ms = must(dom.register_memory(src, fabrix::access::local), "register");
  auto mb = must(dom.register_memory(back, fabrix::access::local), "register");
  auto qp = must(dom.connect(address), "connect");
  std::printf("write: %s\n", qp.describe().c_str());

  // Posts operation i: a write or read of the i-th MiB, token i + 1. (At
  // most ops_per_round are in flight: far below what makes a provider say
  // again.)
  auto post = [&](bool is_write, std::size_t i) {
    const auto local = (is_write ? ms : mb).slice(i * op_bytes, op_bytes);
    const auto remote = rb.slice(i * op_bytes, op_bytes);
    const fabrix::status st =
        is_write ? qp.write(local, remote, i + 1, fabrix::op_options::delivered) : qp.read(local, remote, i + 1);
    if (st != fabrix::status::ok) fail("post refused: " + std::string(fabrix::to_string(st)));
  };
  // Completes `pending` operations; one that timed out is posted again.
  auto complete = [&](bool is_write, std::size_t pending, round_result& r) {
    fabrix::completion c[16];
    const auto until = clock_type::now() + std::chrono::seconds(120);
    while (pending > 0) {
      if (clock_type::now() > until) fail(std::to_string(pending) + " operations still in flight after 120 s");
      const std::size_t k = dom.poll(c);
      for (std::size_t i = 0; i < k; ++i) {
        if (c[i].token == 0 || c[i].token > ops_per_round) fail("a completion with an unknown token");
        if (c[i].status == fabrix::status::timed_out && cut) {
          ++r.timed_out;
          post(is_write, c[i].token - 1);
          continue;
        }
        if (c[i].status != fabrix::status::ok)
          fail(std::string(is_write ? "write " : "read ") + std::to_string(c[i].token) + " completed with " +
               std::string(fabrix::to_string(c[i].status)));
        if (c[i].bytes != op_bytes) fail("a completion with " + std::to_string(c[i].bytes) + " bytes");
        --pending;
      }
    }
  };
  auto flush = [&]() {
    if (qp.flush(flush_token) != fabrix::status::ok) fail("flush refused");
    fabrix::completion c[4];
    const auto until = clock_type::now() + std::chrono::seconds(60);
    for (;;) {
      if (clock_type::now() > until) fail("flush did not complete in 60 s");
      if (dom.poll(c) > 0) {
        if (c[0].token != flush_token) fail("a completion that is not the flush's");
        return c[0].status;
      }
    }
  };

  constexpr std::uint64_t rounds = 2;
  for (std::uint64_t seed = 1; seed <= rounds; ++seed) {
    fill(src, seed);
    round_result r;
    const auto t0 = clock_type::now();
    const bool cut_here = cut && seed == 2;
    for (std::size_t i = 0; i < ops_per_round; ++i) {
      if (cut_here && i == ops_per_round / 2) {
        write_file(dir + "/cut-me", {});
        wait_for_file(dir + "/cut-done", 60);
      }
      post(true, i);
    }
    complete(true, ops_per_round, r);
    r.write_s = std::chrono::duration<double>(clock_type::now() - t0).count();
    if (cut_here) {
      // What went over the cut rail is unknown to a flush: the first fails.
      const fabrix::status first = flush();
      if (first != fabrix::status::timed_out)
        fail("the first flush after the cut completed with " + std::string(fabrix::to_string(first)) +
             ", not timed_out");
    }
    if (const fabrix::status st = flush(); st != fabrix::status::ok)
      fail("flush completed with " + std::string(fabrix::to_string(st)));
    std::fill(back.begin(), back.end(), std::byte{0});
    for (std::size_t i = 0; i < ops_per_round; ++i) post(false, i);
    complete(false, ops_per_round, r);
    if (const long long at = first_wrong(back, seed); at >= 0)
      fail("round " + std::to_string(seed) + ": byte " + std::to_string(at) + " read back is not what was written");
    std::printf("write: round %llu: %zu MiB written in %.3f s (%.1f MB/s), read back and compared; %d timed out\n",
                static_cast<unsigned long long>(seed), region_bytes >> 20, r.write_s,
                static_cast<double>(region_bytes) / r.write_s / 1e6, r.timed_out);
    if (cut_here) {
      if (r.timed_out == 0) fail("no operation timed out after the cut");
      const std::string route = qp.describe();
      if (route.find("down: ") == std::string::npos) fail("the route does not say a rail is down: " + route);
      std::printf("write: after the cut: %s\n", route.c_str());
    }
  }
  write_file(dir + "/done", {'2', '\n'});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "serve") == 0) return serve(argv[2]);
  if (argc >= 3 && std::strcmp(argv[1], "write") == 0)
    return write(argv[2], argc >= 4 && std::strcmp(argv[3], "--cut") == 0);
  std::fprintf(stderr, "usage: fabrix-rails serve DIR | write DIR [--cut]\n");
  return 2;
}
