// fabrix-perf's static binding for provider cuda_ipc (bindings.hpp): the
// benchmark templates over fabrix::cuda_ipc::provider, no virtual dispatch.
#include "bindings.hpp"
#include "run.hpp"

#include <fabrix/cuda_ipc.hpp>

namespace fabrix::perf {

std::optional<int> open_and_run_cuda_ipc(side& sd, const domain_options& dopts, bool may_skip, std::string& why) {
  return open_and_run<fabrix::cuda_ipc::provider>(sd, dopts, may_skip, why);
}

}  // namespace fabrix::perf
