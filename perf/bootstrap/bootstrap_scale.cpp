// One point of the bootstrap scaling benchmark (perf/bootstrap/run.sh runs
// it under mpirun for each engine and job size): every rank bootstraps from
// the environment, opens a UCX domain, connects to every rank (connect_all)
// and exchanges one registered region (exchange), the startup of a fabrix
// job. Rank 0 prints one JSON line with the slowest rank's times and the
// bytes written by the busiest rank while bootstrapping and exchanging.
//
// Bytes sent by each rank up to the end of the exchange: the TCP store's
// own count (bootstrap::traffic(), TCP's counters of its sockets); for an
// engine that cannot count (PMIx), /proc/self/io's wchar over the same span,
// i.e. the bytes the rank wrote to its local PMIx server (run UCX over
// shared memory, UCX_TLS=sm,self, so UCX itself writes nothing there).
#include <fabrix/connect.hpp>
#include <fabrix/fabrix.hpp>
#include <fabrix/ucx.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

std::uint64_t bytes_written() {
  std::ifstream io("/proc/self/io");
  std::string key;
  std::uint64_t value = 0;
  while (io >> key >> value)
    if (key == "wchar:") return value;
  return 0;
}

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct sample {
  double bootstrap_ms, connect_ms, exchange_ms, total_ms;
  std::uint64_t bytes;
};

}  // namespace

int main() {
  const auto t0 = clock_type::now();
  const std::uint64_t w0 = bytes_written();
  auto boot = fabrix::bootstrap::from_env();
  if (!boot) return std::fprintf(stderr, "bootstrap: %s\n", boot.error().describe().c_str()), 1;
  const auto t1 = clock_type::now();
  const std::uint64_t w1 = bytes_written();

  auto dom = fabrix::ucx::domain::create();
  if (!dom) return std::fprintf(stderr, "domain: %s\n", dom.error().describe().c_str()), 1;
  const std::uint64_t w2 = bytes_written();
  auto qps = fabrix::connect_all(*dom, *boot);
  if (!qps) return std::fprintf(stderr, "connect_all: %s\n", qps.error().describe().c_str()), 1;
  const auto t2 = clock_type::now();
  const std::uint64_t w3 = bytes_written();

  std::vector<std::byte> buf(4096);
  auto mr = dom->register_memory(std::span(buf), fabrix::access::remote_write);
  if (!mr) return std::fprintf(stderr, "register: %s\n", mr.error().describe().c_str()), 1;
  auto peers = fabrix::exchange(*boot, mr->remote());
  if (!peers) return std::fprintf(stderr, "exchange: %s\n", peers.error().describe().c_str()), 1;
  const auto t3 = clock_type::now();
  const std::uint64_t w4 = bytes_written();

  const auto counted = boot->traffic();
  sample mine{ms_between(t0, t1), ms_between(t1, t2), ms_between(t2, t3), ms_between(t0, t3),
              counted ? counted->bytes_sent : (w1 - w0) + (w3 - w2) + (w4 - w3)};
  auto all = boot->allgather(std::as_bytes(std::span(&mine, 1)));
  if (!all) return std::fprintf(stderr, "allgather: %s\n", all.error().describe().c_str()), 1;
  if (boot->rank() == 0) {
    sample worst{0, 0, 0, 0, 0};
    int busiest = 0;
    for (std::size_t r = 0; r < all->size(); ++r) {
      sample s;
      std::memcpy(&s, (*all)[r].data(), sizeof s);
      worst.bootstrap_ms = std::max(worst.bootstrap_ms, s.bootstrap_ms);
      worst.connect_ms = std::max(worst.connect_ms, s.connect_ms);
      worst.exchange_ms = std::max(worst.exchange_ms, s.exchange_ms);
      worst.total_ms = std::max(worst.total_ms, s.total_ms);
      if (s.bytes > worst.bytes) {
        worst.bytes = s.bytes;
        busiest = static_cast<int>(r);
      }
    }
    std::printf(
        "{\"ranks\": %d, \"bootstrap\": \"%s\", \"bootstrap_ms\": %.1f, \"connect_ms\": %.1f, \"exchange_ms\": %.1f, "
        "\"total_ms\": %.1f, \"busiest_rank\": %d, \"busiest_bytes\": %llu, \"bytes_counted_by\": \"%s\"}\n",
        boot->size(), boot->describe().c_str(), worst.bootstrap_ms, worst.connect_ms, worst.exchange_ms, worst.total_ms,
        busiest, static_cast<unsigned long long>(worst.bytes),
        counted ? "tcp store sockets" : "wchar (writes to the PMIx server)");
  }
  return boot->barrier() ? 0 : 1;
}
