// fabrix-perf: this side of the job and what main.cpp decided for it
// (which provider and why, which dispatch), handed to the binding that runs
// it (bindings.hpp, run.hpp).
#pragma once

#include "options.hpp"

#include <fabrix/bootstrap.hpp>

#include <string>

namespace fabrix::perf {

// This side of the job and what main.cpp decided for it, for the header.
struct side {
  const options& opts;
  bootstrap boot;
  const char* role;           // "server", "client", "loopback", "client (launched)", ...
  bool reports = true;        // this side prints the report (the client of pair 0)
  std::string choice;         // "asked" (--provider NAME) or "auto" (fabrix-perf picked it)
  std::string choice_reason;  // one line: why this provider
  std::string passed_over;    // auto: the better providers that did not open here, with why
  std::string dispatch;       // "static (fabrix::ucx::provider)" or "runtime (fabrix::any_provider)..."
};

}  // namespace fabrix::perf
