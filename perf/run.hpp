// One side of a fabrix-perf job once main.cpp has chosen the provider and
// the dispatch: open_session, the report header (the client of pair 0),
// every step of the plan, the JSON. Instantiated once per provider type, in
// its own translation unit: perf/bind_<name>.cpp (static dispatch) and
// perf/bind_any.cpp (fabrix::any_provider); see bindings.hpp.
#pragma once

#include "clock.hpp"
#include "failure.hpp"
#include "options.hpp"
#include "report.hpp"
#include "runner.hpp"
#include "session.hpp"
#include "side.hpp"

#include <fabrix/bootstrap.hpp>
#include <fabrix/domain.hpp>

#include <optional>
#include <string>
#include <utility>

namespace fabrix::perf {

inline std::string_view describe_gpu_path(gpu_path g) {
  switch (g) {
    case gpu_path::none: return "none (host memory only)";
    case gpu_path::staged: return "staged through host bounce buffers";
    case gpu_path::direct: return "direct";
  }
  return "unknown";
}

// Runs every step of the plan as this side over provider type P with the
// domain already opened (or its error, which both sides learn before
// failing); returns the exit status. Consumes sd.boot.
template <provider P>
int run_with(side& sd, result<domain<P>> dom) {
  const options& opts = sd.opts;
  const auto steps = plan(opts);
  auto s = open_session<P>(opts, std::move(sd.boot), steps, std::move(dom));
  std::optional<report> rep;
  if (!s.server() && sd.reports) {
    run_info info;
    info.provider = std::string(fabrix::to_string(s.dom.provider()));
    info.choice = sd.choice;
    info.choice_reason = sd.choice_reason;
    info.passed_over = sd.passed_over;
    info.transport = opts.transport;
    info.device = opts.device;
    info.describe = s.dom.describe();
    info.allocated_by = s.provider_allocated ? "provider" : "fabrix-perf";
    info.memory =
        opts.mem + (s.provider_allocated ? ", allocated and registered by the provider"
                                         : ", allocated by fabrix-perf, registered (" + s.not_allocated_why + ")");
    info.gpu_path = std::string(describe_gpu_path(s.dom.caps().gpu));
    info.dispatch = sd.dispatch;
    info.clock = ticks().source();
    info.role = sd.role;
    info.bootstrap = s.boot.describe();
    rep.emplace(opts, info);
    rep->header();
  }
  runner<P> run(s, rep ? &*rep : nullptr);
  for (std::size_t i = 0; i < steps.size(); ++i) run.run(steps[i], i);
  run.finish();
  if (rep) {
    std::string err;
    if (!rep->write_json(err)) fail(err);
  }
  if (auto b = s.boot.barrier(); !b) fail("final bootstrap barrier: " + b.error().describe());
  return 0;
}

// Opens provider dopts.provider as P and runs this side on it. When it does
// not open and `may_skip` (auto trying the next provider), returns nothing,
// leaves sd.boot alone and puts the error in `why`; otherwise runs even on
// the error, so that both sides learn it, and returns the exit status.
template <provider P>
std::optional<int> open_and_run(side& sd, const domain_options& dopts, bool may_skip, std::string& why) {
  auto d = domain<P>::create(dopts);
  if (!d && may_skip) {
    why = d.error().describe();
    return std::nullopt;
  }
  return run_with<P>(sd, std::move(d));
}

}  // namespace fabrix::perf
