// fabrix-perf's static binding for fabrix::routed (bindings.hpp): the
// benchmark templates over the routed domain, whose route --transport (or
// FABRIX_ROUTE) names, e.g. "node=ucx:tcp". Against the same provider run
// directly it measures what routing costs per operation.
#include "bindings.hpp"
#include "run.hpp"

#include <fabrix/routed.hpp>

namespace fabrix::perf {

std::optional<int> open_and_run_routed(side& sd, const domain_options& dopts, bool may_skip, std::string& why) {
  return open_and_run<fabrix::routed>(sd, dopts, may_skip, why);
}

}  // namespace fabrix::perf
