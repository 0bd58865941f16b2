// Parsing of fabrix-perf's command line (see usage()) and the plan of
// measurements both sides derive from the same options.
#include "options.hpp"

#include <fabrix/any_provider.hpp>
#include <fabrix/plugins.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <sstream>

namespace fabrix::perf {

namespace {

constexpr test_kind all_tests[] = {test_kind::write, test_kind::read,      test_kind::write_imm,
                                   test_kind::send,  test_kind::fetch_add, test_kind::compare_swap};
// perftest's completion moderation (ib_write_bw and its kin signal one
// operation in 100), fabrix-perf's default for bandwidth runs.
constexpr int perftest_cq_mod = 100;
constexpr std::uint64_t sweep_min = 2;
constexpr std::uint64_t sweep_max = std::uint64_t{8} << 20;
constexpr std::uint64_t max_size = std::uint64_t{1} << 30;

std::optional<test_kind> test_from(std::string_view s) {
  for (test_kind t : all_tests)
    if (to_string(t) == s) return t;
  if (s == "write_with_imm") return test_kind::write_imm;
  if (s == "atomic_fa" || s == "fa") return test_kind::fetch_add;
  if (s == "cas" || s == "atomic_cs") return test_kind::compare_swap;
  return std::nullopt;
}

std::optional<mode_kind> mode_from(std::string_view s) {
  if (s == "bw") return mode_kind::bw;
  if (s == "lat") return mode_kind::lat;
  return std::nullopt;
}

// "65536", "64K", "8M", "1G" (binary multiples).
std::optional<std::uint64_t> size_from(std::string_view s) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p == s.data()) return std::nullopt;
  std::string_view rest(p, static_cast<std::size_t>(s.data() + s.size() - p));
  unsigned shift = 0;
  if (rest == "K" || rest == "k" || rest == "KiB")
    shift = 10;
  else if (rest == "M" || rest == "m" || rest == "MiB")
    shift = 20;
  else if (rest == "G" || rest == "g" || rest == "GiB")
    shift = 30;
  else if (!rest.empty())
    return std::nullopt;
  if (v > (max_size >> shift)) return std::nullopt;
  return v << shift;
}

template <class T>
std::optional<T> int_from(std::string_view s, T lo, T hi) {
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) return std::nullopt;
  return v;
}

std::optional<double> seconds_from(std::string_view s) {
  try {
    std::size_t used = 0;
    const double v = std::stod(std::string(s), &used);
    if (used != s.size() || !(v > 0) || v > 3600) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

// Iterations for one size when the user gave none: perftest's counts, fewer
// at large sizes so a sweep of 23 sizes stays within seconds per test.
std::uint64_t auto_iters(mode_kind m, std::uint64_t size) {
  const std::uint64_t base = m == mode_kind::bw ? 5000 : 1000;
  const std::uint64_t byte_budget = m == mode_kind::bw ? (std::uint64_t{256} << 20) : (std::uint64_t{32} << 20);
  const std::uint64_t floor = m == mode_kind::bw ? 64 : 16;
  return std::clamp<std::uint64_t>(byte_budget / std::max<std::uint64_t>(size, 1), floor, base);
}

// True when every item of the comma-separated `list` satisfies `ok`.
template <class Pred>
bool every_item(std::string_view list, Pred ok) {
  if (list.empty()) return false;
  for (;;) {
    const auto comma = list.find(',');
    if (!ok(list.substr(0, comma))) return false;
    if (comma == std::string_view::npos) return true;
    list = list.substr(comma + 1);
  }
}

}  // namespace

std::string_view to_string(test_kind t) noexcept {
  switch (t) {
    case test_kind::write: return "write";
    case test_kind::read: return "read";
    case test_kind::write_imm: return "write_imm";
    case test_kind::send: return "send";
    case test_kind::fetch_add: return "fetch_add";
    case test_kind::compare_swap: return "compare_swap";
  }
  return "unknown";
}

std::string_view to_string(mode_kind m) noexcept { return m == mode_kind::bw ? "bw" : "lat"; }

std::string usage() {
  return R"(usage: fabrix-perf [TEST] [MODE] [options] [HOST]
       fabrix-perf --loopback [TEST] [MODE] [options]
       mpirun -np 2 fabrix-perf [TEST] [MODE] [options]

Like perftest: start it without HOST on the server, then with the server's
HOST on the client (both with the same options). --loopback runs both sides
on this machine (two processes, built-in bootstrap). Started by a launcher
(mpirun, srun, or FABRIX_RANK/FABRIX_SIZE), it takes the job's bootstrap
(PMIx when there is one) and runs ranks 2p and 2p+1 as pair p, all pairs at
once; the client of pair 0 (rank 1) reports.

TEST   write | read | write_imm | send | fetch_add | compare_swap | all (default: all)
MODE   bw | lat (default: both)
  --test T[,T...], --mode M          the same as positional TEST / MODE

  -s, --size BYTES        message size (K/M/G suffixes); default 65536 (bw), 2 (lat)
  -a, --all               sweep 2 B ... 8 MiB by powers of two (default with --loopback)
  -n, --iters N           iterations per size (default 5000 bw / 1000 lat, fewer at large sizes)
  -D, --duration SECONDS  run each size for SECONDS instead of -n
      --iters-warmup N    untimed iterations before each size (default: min(100, iters/10))
  -q, --qps N             queue pairs, used round-robin (default 1)
  -t, --tx-depth N        operations in flight (bw; default 128)
  -l, --post-list N       operations per post call (bw; default 1)
  -b, --bidirectional     both sides initiate at once (bw); reports the sum
      --unsignaled        bw: only the last operation of each post list gives a
                          completion; the others are unsignaled and counted
                          by queue_pair::finished() (not for atomics)
      --cq-mod N          bw: every N-th operation gives a completion, the others
                          are unsignaled, whatever -l is (perftest's --cq-mod
                          and its default: 100, at most -t; 1: every operation
                          gives one; atomics always give one each)
      --report_gbits      bandwidth in Gb/s instead of MB/s (MB = 2^20 bytes)
      --out_json FILE     also write the results as JSON (schema: perf/README.md)
      --provider NAME     verbs | ucx | ofi | cuda_ipc | routed | auto (default
                          auto: the first of --list-providers that opens here,
                          or routed where FABRIX_ROUTE is set), or a
                          provider plugin's name (libfabrix-NAME.so on
                          FABRIX_PROVIDER_PATH: runs through any_provider)
      --transport LIST    UCX_TLS list, a libfabric provider name, or for
                          routed its route ("node=ofi:shm net=ucx:tcp")
      --device NAME       device for the provider (mlx5_0, eth0, ...)
      --mem KIND          host | cuda[:N] (default host)
      --alloc WHO         auto | provider | user: who allocates the registered
                          buffers (auto: the provider when it can, as ucx_perftest
                          does with ucp_mem_map ALLOCATE; user: mmap + register)
      --remote-keys HOW   import | buffer: operations name the peer's buffer by a
                          key each queue pair imported once (import, the
                          default) or by its remote_buffer (a lookup per op)
      --dispatch HOW      auto | static | any: the provider's static type (direct
                          calls) when fabrix-perf has it, else any_provider
                          (auto, the default); static: refuse without it;
                          any: fabrix::any_provider (virtual calls)
  -p, --port PORT         bootstrap port of the server (default 18515)
      --loopback          run server and client here
      --timeout SECONDS   give up on a silent peer after this long (default 60;
                          a run may last longer: the initiator's heartbeats
                          show it is alive)
      --list-providers    print the providers compiled in, best first, and exit
  -h, --help

Exit status: 0 measured and every byte checked; 1 a run-time failure or a
data check failed; 2 bad options, or the two sides' options disagree.
)";
}

parse_outcome parse(int argc, char** argv) {
  options o;
  parse_outcome out;
  auto fail = [&](std::string msg) {
    out.error = std::move(msg);
    return out;
  };
  auto add_tests = [&](std::string_view list) -> bool {
    while (!list.empty()) {
      const auto comma = list.find(',');
      const std::string_view one = list.substr(0, comma);
      if (one == "all") {
        o.tests.assign(std::begin(all_tests), std::end(all_tests));
      } else if (auto t = test_from(one)) {
        if (std::find(o.tests.begin(), o.tests.end(), *t) == o.tests.end()) o.tests.push_back(*t);
      } else {
        return false;
      }
      list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    }
    return true;
  };
  auto add_modes = [&](std::string_view list) -> bool {
    while (!list.empty()) {
      const auto comma = list.find(',');
      auto m = mode_from(list.substr(0, comma));
      if (!m) return false;
      if (std::find(o.modes.begin(), o.modes.end(), *m) == o.modes.end()) o.modes.push_back(*m);
      list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    }
    return true;
  };

  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    bool has_inline = false;
    if (arg.starts_with("--")) {
      if (auto eq = arg.find('='); eq != std::string_view::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        has_inline = true;
      }
    }
    auto need = [&](std::string_view name) -> std::optional<std::string_view> {
      if (has_inline) return value;
      if (i + 1 >= argc) return std::nullopt;
      (void)name;
      return std::string_view(argv[++i]);
    };
    auto takes_value = [](std::string_view a) {
      static const char* const names[] = {
          "-s",         "--size",     "-n",          "--iters",    "-D",         "--duration",   "--iters-warmup",
          "-q",         "--qps",      "-t",          "--tx-depth", "-l",         "--post-list",  "--cq-mod",
          "--out_json", "--provider", "--transport", "--device",   "--mem",      "-p",           "--port",
          "--test",     "--mode",     "--timeout",   "--alloc",    "--dispatch", "--remote-keys"};
      return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return a == n; });
    };
    if (has_inline && !takes_value(arg)) return fail("option " + std::string(arg) + " takes no value");

    if (arg == "-h" || arg == "--help") {
      out.help = true;
      return out;
    }
    if (takes_value(arg)) {
      auto v = need(arg);
      if (!v) return fail("option " + std::string(arg) + " needs a value");
      const std::string shown = std::string(arg) + " " + std::string(*v);
      if (arg == "-s" || arg == "--size") {
        auto s = size_from(*v);
        if (!s || *s == 0) return fail("bad size in '" + shown + "' (1 byte ... 1 GiB; K/M/G suffixes)");
        o.size = *s;
      } else if (arg == "-n" || arg == "--iters") {
        auto n = int_from<std::uint64_t>(*v, 1, std::uint64_t{1} << 40);
        if (!n) return fail("bad iteration count in '" + shown + "' (a positive integer)");
        o.iters = *n;
      } else if (arg == "-D" || arg == "--duration") {
        auto d = seconds_from(*v);
        if (!d) return fail("bad duration in '" + shown + "' (seconds, > 0, up to 3600)");
        o.duration_s = *d;
      } else if (arg == "--iters-warmup") {
        auto n = int_from<std::int64_t>(*v, 0, std::int64_t{1} << 40);
        if (!n) return fail("bad warmup count in '" + shown + "' (an integer >= 0)");
        o.warmup = *n;
      } else if (arg == "-q" || arg == "--qps") {
        auto n = int_from<int>(*v, 1, 64);
        if (!n) return fail("bad queue pair count in '" + shown + "' (1 ... 64)");
        o.qps = *n;
      } else if (arg == "-t" || arg == "--tx-depth") {
        auto n = int_from<int>(*v, 1, 8192);
        if (!n) return fail("bad tx depth in '" + shown + "' (1 ... 8192)");
        o.tx_depth = *n;
      } else if (arg == "-l" || arg == "--post-list") {
        auto n = int_from<int>(*v, 1, 1024);
        if (!n) return fail("bad post list in '" + shown + "' (1 ... 1024)");
        o.post_list = *n;
      } else if (arg == "--cq-mod") {
        auto n = int_from<int>(*v, 1, 1 << 20);
        if (!n) return fail("bad completion moderation in '" + shown + "' (1 ... 1048576)");
        o.cq_mod = *n;
      } else if (arg == "--out_json") {
        if (v->empty()) return fail("--out_json needs a file name");
        o.out_json = *v;
      } else if (arg == "--provider") {
        // A compiled-in provider, or a plugin (libfabrix-NAME.so on
        // FABRIX_PROVIDER_PATH), loaded here so that a name nothing provides
        // is refused now, not after the bootstrap has waited for the peer.
        const auto compiled = fabrix::registered_providers();
        if (*v != "auto" && *v != "routed" && std::find(compiled.begin(), compiled.end(), *v) == compiled.end()) {
          auto plugin = fabrix::load_provider_plugin(*v);
          if (!plugin) {
            std::string names;
            for (auto n : compiled) names += std::string(n) + ", ";
            return fail("unknown provider in '" + shown + "' (" + names +
                        "routed, auto, or a provider plugin's name): " + plugin.error().message);
          }
        }
        o.provider = *v;
      } else if (arg == "--transport") {
        o.transport = *v;
      } else if (arg == "--device") {
        o.device = *v;
      } else if (arg == "--mem") {
        if (*v != "host" && *v != "cuda" && !(v->starts_with("cuda:") && int_from<int>(v->substr(5), 0, 1023)))
          return fail("bad memory kind in '" + shown + "' (host, cuda or cuda:N)");
        o.mem = *v;
      } else if (arg == "-p" || arg == "--port") {
        auto n = int_from<int>(*v, 1, 65535);
        if (!n) return fail("bad port in '" + shown + "' (1 ... 65535)");
        o.port = *n;
      } else if (arg == "--test") {
        if (!add_tests(*v)) return fail("unknown test in '" + shown + "'");
      } else if (arg == "--mode") {
        if (!add_modes(*v)) return fail("unknown mode in '" + shown + "' (bw or lat)");
      } else if (arg == "--alloc") {
        if (*v != "auto" && *v != "user" && *v != "provider")
          return fail("bad allocation mode in '" + shown + "' (auto, user or provider)");
        o.alloc = *v;
      } else if (arg == "--remote-keys") {
        if (*v != "import" && *v != "buffer") return fail("bad remote keys in '" + shown + "' (import or buffer)");
        o.remote_keys = *v;
      } else if (arg == "--dispatch") {
        if (*v != "auto" && *v != "static" && *v != "any")
          return fail("bad dispatch in '" + shown + "' (auto, static or any)");
        o.dispatch = *v;
      } else if (arg == "--timeout") {
        auto n = int_from<int>(*v, 1, 3600);
        if (!n) return fail("bad timeout in '" + shown + "' (1 ... 3600 seconds)");
        o.timeout_s = *n;
      }
      continue;
    }
    if (arg == "-a" || arg == "--all")
      o.sweep = true;
    else if (arg == "-b" || arg == "--bidirectional")
      o.bidirectional = true;
    else if (arg == "--unsignaled")
      o.unsignaled = true;
    else if (arg == "--report_gbits" || arg == "--report-gbits")
      o.report_gbits = true;
    else if (arg == "--loopback")
      o.loopback = true;
    else if (arg == "--list-providers")
      o.list_providers = true;
    else if (arg.starts_with("-"))
      return fail("unknown option '" + std::string(arg) + "' (see --help)");
    else if (every_item(arg, [](std::string_view t) { return t == "all" || test_from(t).has_value(); }))
      add_tests(arg);
    else if (every_item(arg, [](std::string_view m) { return mode_from(m).has_value(); }))
      add_modes(arg);
    else if (o.host.empty())
      o.host = arg;
    else
      return fail("unexpected argument '" + std::string(arg) + "' (server host already given: " + o.host + ")");
  }

  if (o.loopback && !o.host.empty()) return fail("--loopback runs both sides here: give no HOST");
  if (o.sweep && o.size != 0) return fail("-a and -s exclude each other");
  if (o.loopback && o.size == 0) o.sweep = true;
  if (o.duration_s > 0 && o.iters != 0) return fail("-D and -n exclude each other");
  if (o.post_list > o.tx_depth) return fail("-l (post list) must not exceed -t (tx depth)");
  if (o.unsignaled && o.cq_mod > 1)
    return fail("--unsignaled and --cq-mod exclude each other (--unsignaled is --cq-mod of the post list's length)");
  if (o.cq_mod == 0) o.cq_mod = o.unsignaled ? 1 : std::min(perftest_cq_mod, o.tx_depth);
  if (o.tests.empty()) o.tests.assign(std::begin(all_tests), std::end(all_tests));
  if (o.modes.empty()) o.modes = {mode_kind::bw, mode_kind::lat};
  out.opts = std::move(o);
  return out;
}

std::vector<step> plan(const options& o) {
  std::vector<step> steps;
  for (test_kind t : o.tests) {
    for (mode_kind m : o.modes) {
      std::vector<std::uint64_t> sizes;
      if (is_atomic(t))
        sizes = {8};
      else if (o.sweep)
        for (std::uint64_t s = sweep_min; s <= sweep_max; s *= 2) sizes.push_back(s);
      else
        sizes = {o.size != 0 ? o.size : (m == mode_kind::bw ? 65536 : 2)};
      for (std::uint64_t s : sizes) {
        step st{t, m, s, 0, 0};
        if (o.duration_s <= 0) st.iters = o.iters != 0 ? o.iters : auto_iters(m, s);
        const std::uint64_t basis = st.iters != 0 ? st.iters : 1000;
        st.warmup = o.warmup >= 0 ? static_cast<std::uint64_t>(o.warmup) : std::min<std::uint64_t>(100, basis / 10);
        steps.push_back(st);
      }
    }
  }
  return steps;
}

std::string agreement_text(const options& o) {
  std::ostringstream s;
  s << "tests=";
  for (std::size_t i = 0; i < o.tests.size(); ++i) s << (i ? "," : "") << to_string(o.tests[i]);
  s << "\nmodes=";
  for (std::size_t i = 0; i < o.modes.size(); ++i) s << (i ? "," : "") << to_string(o.modes[i]);
  s << "\nsize=" << o.size << "\nall=" << o.sweep << "\niters=" << o.iters << "\nduration=" << o.duration_s
    << "\nwarmup=" << o.warmup << "\nqps=" << o.qps << "\ntx_depth=" << o.tx_depth << "\npost_list=" << o.post_list
    << "\nbidirectional=" << o.bidirectional << "\nunsignaled=" << o.unsignaled << "\ncq_mod=" << o.cq_mod
    << "\nprovider=" << o.provider << "\n";
  return s.str();
}

std::string compare_agreement(std::string_view server, std::string_view client) {
  auto lines = [](std::string_view text) {
    std::map<std::string, std::string> kv;
    std::istringstream in{std::string(text)};
    for (std::string line; std::getline(in, line);) {
      const auto eq = line.find('=');
      if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return kv;
  };
  const auto a = lines(server);
  const auto b = lines(client);
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    const std::string other = it == b.end() ? "(missing)" : it->second;
    if (other != v) return "options differ: server has " + k + "=" + v + ", client has " + k + "=" + other;
  }
  for (const auto& [k, v] : b)
    if (!a.contains(k)) return "options differ: client has " + k + "=" + v + ", server lacks it";
  return {};
}

}  // namespace fabrix::perf
