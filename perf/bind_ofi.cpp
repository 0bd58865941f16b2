// fabrix-perf's static binding for provider ofi (bindings.hpp): the
// benchmark templates over fabrix::ofi::provider, no virtual dispatch.
#include "bindings.hpp"
#include "run.hpp"

#include <fabrix/ofi.hpp>

namespace fabrix::perf {

std::optional<int> open_and_run_ofi(side& sd, const domain_options& dopts, bool may_skip, std::string& why) {
  return open_and_run<fabrix::ofi::provider>(sd, dopts, may_skip, why);
}

}  // namespace fabrix::perf
