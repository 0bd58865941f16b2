// fabrix-perf's command line: what to measure, how, and where. Parsing never
// exits; main() turns a parse error into a message and exit status 2.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fabrix::perf {

enum class test_kind { write, read, write_imm, send, fetch_add, compare_swap };
enum class mode_kind { bw, lat };

std::string_view to_string(test_kind t) noexcept;
std::string_view to_string(mode_kind m) noexcept;
inline bool is_atomic(test_kind t) noexcept { return t == test_kind::fetch_add || t == test_kind::compare_swap; }

struct options {
  std::vector<test_kind> tests;  // empty: every test
  std::vector<mode_kind> modes;  // empty: both modes
  std::uint64_t size = 0;        // 0: perftest's default (65536 for bw, 2 for lat) unless sweeping
  bool sweep = false;            // -a: 2 B ... 8 MiB by powers of two
  std::uint64_t iters = 0;       // 0: automatic (5000 bw / 1000 lat, fewer at large sizes)
  double duration_s = 0;         // -D: run each size for this long instead of a count
  std::int64_t warmup = -1;      // -1: automatic
  bool report_gbits = false;
  int qps = 1;
  int tx_depth = 128;
  int post_list = 1;
  bool bidirectional = false;
  // --unsignaled (bw; write, read, write_imm, send): in each post list only
  // the last operation is signaled, the others are op_options::unsignaled
  // and counted through queue_pair::finished() (perftest's --cq-mod with
  // the post list's length).
  bool unsignaled = false;
  // --cq-mod N (bw; the same tests): every N-th operation is signaled, the
  // others unsignaled, whatever the post list (perftest's --cq-mod; 1
  // signals every operation). Excludes --unsignaled. Not given, parse()
  // sets perftest's default: 100, at most -t (1 with --unsignaled).
  int cq_mod = 0;
  std::string out_json;
  std::string provider = "auto";
  std::string transport;
  std::string device;
  std::string mem = "host";  // "host" or "cuda[:N]"
  // Who allocates the registered buffers: "auto" (the provider when it can
  // allocate registered memory itself, like ucx_perftest; else fabrix-perf),
  // "provider", or "user" (fabrix-perf allocates, the provider registers).
  std::string alloc = "auto";
  // How operations name the peer's buffer: "import" (each queue pair imports
  // it once, queue_pair::import; operations take remote_key slices) or
  // "buffer" (remote_buffer slices: the provider finds its key per op).
  std::string remote_keys = "import";
  // "auto": the chosen provider's static binding when fabrix-perf has one
  // (no virtual calls), else fabrix::any_provider, and the header says why;
  // "static": its static binding or refuse (exit 2); "any": always through
  // fabrix::any_provider.
  std::string dispatch = "auto";
  int port = 18515;
  std::string host;  // the server to reach; empty on the server
  bool loopback = false;
  bool list_providers = false;  // print the compiled-in providers and exit
  int timeout_s = 60;           // bound on every wait for the peer
};

struct parse_outcome {
  std::optional<options> opts;  // empty when `error` or `help`
  bool help = false;
  std::string error;
};

parse_outcome parse(int argc, char** argv);
std::string usage();

// One (test, mode, size) measurement, in the order both sides run them.
struct step {
  test_kind test;
  mode_kind mode;
  std::uint64_t size;
  std::uint64_t iters;  // 0 with -D
  std::uint64_t warmup;
};
std::vector<step> plan(const options& o);

// The options both sides must agree on, as "key=value" lines.
std::string agreement_text(const options& o);
// Empty when the texts agree, else a message naming the first difference.
std::string compare_agreement(std::string_view server, std::string_view client);

}  // namespace fabrix::perf
