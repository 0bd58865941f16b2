// What one queue pair costs a process: memory, file descriptors and time to
// connect and to finish its first operation, per provider and transport.
// The figures behind perf/scaling/README.md's table for 64, 1,024 and 16,384
// ranks.
//
// One process opens a source domain and N target domains, registers 4 KiB
// in each target, then connects the source to every target (connect time),
// then writes 8 bytes to each and waits for all (first-operation time:
// wire-up, connection set-up), polling the targets meanwhile. Memory
// (VmRSS) and open descriptors are read before the connects and after the
// writes, so they hold both ends of each pair: the source's queue pair and
// whatever the target made for the connection it accepted. Every byte
// written is checked. Prints one JSON object (with the size of an address
// blob, which a lazy mesh keeps per rank).
//
//   fabrix-connect-cost --provider ucx|ofi [--transport T] [--peers N]
#include <fabrix/fabrix.hpp>
#ifdef FABRIX_HAVE_UCX
#include <fabrix/ucx.hpp>
#endif
#ifdef FABRIX_HAVE_OFI
#include <fabrix/ofi.hpp>
#endif

#include "process_usage.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fabrix-connect-cost: %s\n", what.c_str());
  std::exit(1);
}

template <class R>
auto must(R&& r, const char* what) {
  if (!r) fail(std::string(what) + ": " + r.error().describe());
  return std::move(*r);
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string provider = "ucx", transport;
  int peers = 64;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--provider" && i + 1 < argc)
      provider = argv[++i];
    else if (a == "--transport" && i + 1 < argc)
      transport = argv[++i];
    else if (a == "--peers" && i + 1 < argc)
      peers = std::atoi(argv[++i]);
    else
      fail("usage: fabrix-connect-cost --provider NAME [--transport T] [--peers N]");
  }
  if (peers < 1 || peers > 4096) fail("--peers takes 1 to 4096");
  fabrix::domain_options opts;
  opts.transport = transport;
  auto source = must(fabrix::open(provider, opts), "open the source domain");
  std::vector<fabrix::any_domain> targets;
  std::vector<std::vector<std::byte>> memory(static_cast<std::size_t>(peers), std::vector<std::byte>(4096));
  std::vector<fabrix::memory_region<fabrix::any_provider>> regions;
  std::vector<std::vector<std::byte>> addresses;
  for (int i = 0; i < peers; ++i) {
    targets.push_back(must(fabrix::open(provider, opts), "open a target domain"));
    regions.push_back(
        must(targets.back().register_memory(memory[static_cast<std::size_t>(i)], fabrix::access::remote_write),
             "register a target's memory"));
    addresses.push_back(must(targets.back().address(), "a target's address"));
  }
  std::vector<std::byte> src(8);
  std::memset(src.data(), 0x5c, src.size());
  auto local = must(source.register_memory(src, fabrix::access::local), "register the source's memory");

  const long rss_before = fabrix::scaling::rss_kib();
  const int fds_before = fabrix::scaling::open_fds();
  const auto t_connect = std::chrono::steady_clock::now();
  std::vector<fabrix::queue_pair<fabrix::any_provider>> qps;
  for (int i = 0; i < peers; ++i)
    qps.push_back(must(source.connect(addresses[static_cast<std::size_t>(i)]), "connect"));
  const double connect_ms = ms_since(t_connect);

  const auto t_first = std::chrono::steady_clock::now();
  for (int i = 0; i < peers; ++i) {
    const auto st = qps[static_cast<std::size_t>(i)].write(
        local.slice(0, 8), regions[static_cast<std::size_t>(i)].remote().slice(0, 8), static_cast<std::uint64_t>(i));
    if (st != fabrix::status::ok) fail("write posted with " + std::string(fabrix::to_string(st)));
  }
  int done = 0;
  fabrix::completion c[64];
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (done < peers) {
    if (std::chrono::steady_clock::now() > limit) fail("writes did not complete in 120 s");
    const std::size_t n = source.poll(c);
    for (std::size_t k = 0; k < n; ++k) {
      if (c[k].status != fabrix::status::ok)
        fail("a write completed with " + std::string(fabrix::to_string(c[k].status)));
      ++done;
    }
    for (auto& t : targets) (void)t.poll(c);
  }
  const double first_ms = ms_since(t_first);
  for (const auto& m : memory)
    for (std::size_t k = 0; k < 8; ++k)
      if (m[k] != std::byte{0x5c}) fail("a write's bytes did not land");
  const long rss_after = fabrix::scaling::rss_kib();
  const int fds_after = fabrix::scaling::open_fds();

  std::printf(
      "{\"provider\": \"%s\", \"transport\": \"%s\", \"describe\": \"%s\", \"peers\": %d, "
      "\"rss_kib_per_pair\": %.1f, \"fds_per_pair\": %.2f, \"connect_us_per_qp\": %.1f, "
      "\"first_write_us_per_qp\": %.1f, \"address_bytes\": %zu}\n",
      provider.c_str(), transport.c_str(), source.describe().c_str(), peers,
      static_cast<double>(rss_after - rss_before) / peers, static_cast<double>(fds_after - fds_before) / peers,
      connect_ms * 1000.0 / peers, first_ms * 1000.0 / peers, addresses.front().size());
  return 0;
}
