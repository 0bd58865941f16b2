// fabrix-perf's static binding for provider ucx (bindings.hpp): the
// benchmark templates over fabrix::ucx::provider, no virtual dispatch.
#include "bindings.hpp"
#include "run.hpp"

#include <fabrix/ucx.hpp>

namespace fabrix::perf {

std::optional<int> open_and_run_ucx(side& sd, const domain_options& dopts, bool may_skip, std::string& why) {
  return open_and_run<fabrix::ucx::provider>(sd, dopts, may_skip, why);
}

}  // namespace fabrix::perf
