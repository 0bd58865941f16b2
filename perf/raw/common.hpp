// What raw_ofi and raw_ucx share: the command line, the plan of measurements
// (fabrix-perf's sizes, iteration and warmup defaults) and the JSON lines
// they print. The socket the two sides meet over is channel.hpp.
//
// Contracts:
// - Both sides derive the same plan from the same options; the client sends
//   its options text first and the server refuses (exit 2, both) on any
//   difference.
// - stdout carries JSON lines only (one header, then one per measurement,
//   printed by the client once its data checks and the peer's passed);
//   messages go to stderr. Exit status: 0 measured and checked, 1 run-time
//   failure or wrong byte, 2 bad options.
#pragma once

#include "../failure.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
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

// A raw tool's command line: parse() with the tool's own options (`extra`),
// a failure reported with the tool's name, --help printing `own_usage` (the
// tool's lines, ending in a newline) before the shared ones. Returns the exit
// status when the tool should stop here (2 bad options, 0 after --help).
inline std::optional<int> read_command_line(const char* tool, int argc, char** argv, options& o,
                                            const std::function<int(std::string_view, const char*, options&)>& extra,
                                            const char* own_usage) {
  bool help = false;
  try {
    o = parse(argc, argv, help, extra);
  } catch (const failure& f) {
    std::fprintf(stderr, "%s: %s\n", tool, f.what());
    return 2;
  }
  if (!help) return std::nullopt;
  std::printf("%s%s", own_usage, common_usage().c_str());
  return 0;
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
