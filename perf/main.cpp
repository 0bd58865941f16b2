// fabrix-perf: perftest-style benchmark of fabrix over any provider.
//   server:   fabrix-perf [TEST] [MODE] [options]
//   client:   fabrix-perf [TEST] [MODE] [options] HOST
//   one node: fabrix-perf --loopback [TEST] [MODE] [options]
// See usage() in options.cpp and perf/README.md.
#include "bindings.hpp"
#include "failure.hpp"
#include "options.hpp"
#include "pairs.hpp"
#include "providers.hpp"

#include <fabrix/any_provider.hpp>
#include <fabrix/bootstrap.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace fabrix::perf {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Chooses the provider and the dispatch, then runs this side; returns the
// exit status. Never falls back silently: the header says what was chosen
// and why (perf/README.md, "Which provider, which dispatch").
//   provider: --provider NAME, or with "auto" the first registered provider,
//     best first, that opens here (verbs without an RDMA device does not);
//     each one passed over is named with its error.
//   dispatch: the provider's static binding (bindings.hpp) when there is
//     one, unless --dispatch any; "static" refuses a provider without one
//     (exit 2), "auto" (the default) then runs it through any_provider and
//     says why.
int run_side(const options& opts, bootstrap boot, const char* role, bool reports = true) {
  side sd{opts, std::move(boot), role, reports, {}, {}, {}, {}};
  domain_options dopts;
  dopts.transport = opts.transport;
  dopts.device = opts.device;
  // Progress by poll() only, as perftest without -e: no wake-up object (the
  // control exchange's 1 ms wait()s poll in slices instead).
  dopts.wakeup = false;
  const bool pick = opts.provider == "auto";
  std::vector<std::string> names;  // in the order tried
  if (pick && fabrix::detail::route_from_environment() != nullptr) {
    names.emplace_back("routed");  // as fabrix::open("auto") with a route
  } else if (pick) {
    // Unlike fabrix::open("auto") (the routed domain where its default
    // routes open two or more providers), the best single provider,
    // measured through its own type as perftest measures one device;
    // --provider routed measures the routed domain. "<name>+staged"
    // entries (cuda/staged_open.hpp) open by name only.
    for (auto n : registered_providers())
      if (n.find('+') == std::string_view::npos) names.emplace_back(n);
  } else {
    names.push_back(opts.provider);
  }
  sd.choice = pick ? "auto" : "asked";
  std::string passed;  // auto: "verbs: no RDMA device found ...; ..."
  for (const std::string& name : names) {
    dopts.provider = name;
    const static_binding* b = opts.dispatch == "any" ? nullptr : find_static_binding(name);
    if (b == nullptr && opts.dispatch == "static") {
      const std::string refusal = "--dispatch static: provider '" + name +
                                  "' has no static binding in this fabrix-perf (perf/bind_" + name +
                                  ".cpp is not in its build); use --dispatch auto or --dispatch any";
      if (!pick) fail_usage(refusal);
      // auto: refused only if it is the provider auto picks (it opens here).
      if (auto probe = any_domain::create(dopts); !probe) {
        passed += (passed.empty() ? "" : "; ") + probe.error().describe();
        continue;
      }
      fail_usage(refusal + " (auto picked it: the best provider that opens here)");
    }
    sd.choice_reason = pick ? "auto-picked: the first of " + join(names) + " (best first) that opens here"
                            : "asked: --provider " + name;
    sd.passed_over = passed;
    if (b != nullptr)
      sd.dispatch = "static (" + std::string(b->type) + ")";
    else if (opts.dispatch == "any")
      sd.dispatch = "runtime (fabrix::any_provider), asked: --dispatch any";
    else
      sd.dispatch = "runtime (fabrix::any_provider): no static binding for '" + name + "' in this fabrix-perf";
    std::string why;
    const auto code = b != nullptr ? b->run(sd, dopts, pick, why) : open_and_run_any(sd, dopts, pick, why);
    if (code) return *code;
    passed += (passed.empty() ? "" : "; ") + why;
  }
  // auto, and nothing opened here: both sides learn it before failing.
  sd.choice_reason = "auto: none of " + join(names) + " opens here";
  sd.dispatch = "none";
  return run_on_error(sd, make_error(status::unsupported, names.empty() ? "no provider is registered"
                                                                        : "no provider opened here: " + passed));
}

std::string with_port(const std::string& host, int port) {
  if (host.find(':') != std::string::npos && !host.starts_with("[")) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

int guarded(const char* who, auto&& body) {
  try {
    return body();
  } catch (const failure& f) {
    std::fflush(stdout);
    std::fprintf(stderr, "fabrix-perf%s: %s\n", who, f.what());
    return f.exit_code;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "fabrix-perf%s: %s\n", who, e.what());
    return 1;
  }
}

constexpr const char* network_token = "fabrix-perf/1";

int run_server(const options& opts) {
  return guarded("", [&] {
    std::fprintf(stderr, "fabrix-perf: waiting for the client on port %d\n", opts.port);
    bootstrap_options bo;
    bo.connect_timeout = std::chrono::hours(24);
    auto boot = bootstrap::create(0, 2, "0.0.0.0:" + std::to_string(opts.port), network_token, bo);
    if (!boot) fail("bootstrap: " + boot.error().describe());
    return run_side(opts, std::move(*boot), "server");
  });
}

int run_client(const options& opts) {
  return guarded("", [&] {
    auto boot = bootstrap::create(1, 2, with_port(opts.host, opts.port), network_token);
    if (!boot) fail("bootstrap to " + with_port(opts.host, opts.port) + ": " + boot.error().describe());
    return run_side(opts, std::move(*boot), "client");
  });
}

// Started by a launcher (mpirun, srun, or FABRIX_RANK/FABRIX_SIZE): the
// job's bootstrap (from_env: PMIx, else the TCP store), its ranks in pairs.
int run_launched(const options& opts) {
  return guarded("", [&] {
    auto job = bootstrap::from_env();
    if (!job) fail("bootstrap: " + job.error().describe());
    if (job->size() < 2 || job->size() % 2 != 0)
      fail("started by a launcher with " + std::to_string(job->size()) +
           " ranks: fabrix-perf measures between pairs of ranks, run it with an even number (mpirun -np 2)");
    const bool first_pair = job->rank() < 2;
    const char* role = job->rank() % 2 == 0 ? "server (launched)" : "client (launched)";
    return run_side(opts, bootstrap(std::make_unique<pair_view>(std::move(*job))), role, first_pair);
  });
}

// True when a launcher (or FABRIX_RANK/FABRIX_SIZE) says this process is a
// rank of a job of more than one.
bool launched() {
  auto cfg = bootstrap::config_from_env();
  return std::getenv("PMIX_NAMESPACE") != nullptr || (cfg && cfg->size > 1);
}

// Forks the server; this process is the client. The server listens on a free
// localhost port and hands it over a pipe.
int run_loopback(const options& opts) {
  std::random_device rd;
  const std::string token = "fabrix-perf-loopback-" + std::to_string(rd());
  int fds[2];
  if (::pipe(fds) != 0) {
    std::perror("fabrix-perf: pipe");
    return 1;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t child = ::fork();
  if (child < 0) {
    std::perror("fabrix-perf: fork");
    return 1;
  }
  if (child == 0) {
    ::close(fds[0]);
    const int code = guarded(" (server)", [&] {
      auto root = bootstrap::listen(2, "127.0.0.1:0", token);
      std::uint16_t port = root ? root->port() : 0;
      const bool sent = ::write(fds[1], &port, sizeof port) == sizeof port;
      ::close(fds[1]);
      if (!root) fail("bootstrap listen: " + root.error().describe());
      if (!sent) fail("cannot hand the port to the client");
      auto boot = root->accept();
      if (!boot) fail("bootstrap accept: " + boot.error().describe());
      return run_side(opts, std::move(*boot), "server");
    });
    std::fflush(stdout);
    std::_Exit(code);
  }
  ::close(fds[1]);
  std::uint16_t port = 0;
  const bool got = ::read(fds[0], &port, sizeof port) == sizeof port && port != 0;
  ::close(fds[0]);
  int code = 1;
  if (got) {
    code = guarded("", [&] {
      auto boot = bootstrap::create(1, 2, "127.0.0.1:" + std::to_string(port), token);
      if (!boot) fail("bootstrap: " + boot.error().describe());
      return run_side(opts, std::move(*boot), "loopback");
    });
  }
  int st = 0;
  if (::waitpid(child, &st, 0) != child) return code ? code : 1;
  const int server_code = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
  if (!WIFEXITED(st)) std::fprintf(stderr, "fabrix-perf: the server process died (signal %d)\n", WTERMSIG(st));
  return code != 0 ? code : server_code;
}

}  // namespace
}  // namespace fabrix::perf

int main(int argc, char** argv) {
  using namespace fabrix::perf;
  parse_outcome p = parse(argc, argv);
  if (p.help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (!p.opts) {
    std::fprintf(stderr, "fabrix-perf: %s\n(fabrix-perf --help lists the options)\n", p.error.c_str());
    return 2;
  }
  const options& opts = *p.opts;
  if (opts.list_providers) {
    for (auto name : fabrix::registered_providers()) std::printf("%.*s\n", static_cast<int>(name.size()), name.data());
    return 0;
  }
  if (fabrix::registered_providers().empty()) {
    std::fprintf(stderr, "fabrix-perf: no provider was compiled in\n");
    return 1;
  }
  if (opts.loopback) return run_loopback(opts);
  if (opts.host.empty() && launched()) return run_launched(opts);
  if (opts.host.empty()) return run_server(opts);
  return run_client(opts);
}
