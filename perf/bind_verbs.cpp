// fabrix-perf's static binding for provider verbs (bindings.hpp): the
// benchmark templates over fabrix::verbs::provider, no virtual dispatch.
#include "bindings.hpp"
#include "run.hpp"

#include <fabrix/verbs.hpp>

namespace fabrix::perf {

std::optional<int> open_and_run_verbs(side& sd, const domain_options& dopts, bool may_skip, std::string& why) {
  return open_and_run<fabrix::verbs::provider>(sd, dopts, may_skip, why);
}

}  // namespace fabrix::perf
