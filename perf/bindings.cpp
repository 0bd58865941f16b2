// The table of static bindings (bindings.hpp) and the runtime binding:
// fabrix-perf's benchmark templates over fabrix::any_provider.
#include "bindings.hpp"

#include "providers.hpp"
#include "run.hpp"

#include <fabrix/any_provider.hpp>

#include <algorithm>
#include <iterator>

namespace fabrix::perf {

namespace {

constexpr static_binding bindings[] = {
#if defined(FABRIX_HAVE_UCX) && FABRIX_HAVE_UCX
    {"ucx", "fabrix::ucx::provider", &open_and_run_ucx},
#endif
#if defined(FABRIX_HAVE_OFI) && FABRIX_HAVE_OFI
    {"ofi", "fabrix::ofi::provider", &open_and_run_ofi},
#endif
#if defined(FABRIX_HAVE_VERBS) && FABRIX_HAVE_VERBS
    {"verbs", "fabrix::verbs::provider", &open_and_run_verbs},
#endif
#if defined(FABRIX_HAVE_CUDA_IPC) && FABRIX_HAVE_CUDA_IPC
    {"cuda_ipc", "fabrix::cuda_ipc::provider", &open_and_run_cuda_ipc},
#endif
    {"routed", "fabrix::routed<the providers above>", &open_and_run_routed},
    {"", "", nullptr},  // keeps the array non-empty in a build without providers
};

}  // namespace

std::span<const static_binding> static_bindings() { return {bindings, std::size(bindings) - 1}; }

const static_binding* find_static_binding(std::string_view name) {
  const auto all = static_bindings();
  auto it = std::find_if(all.begin(), all.end(), [&](const static_binding& b) { return b.name == name; });
  return it == all.end() ? nullptr : &*it;
}

std::optional<int> open_and_run_any(side& sd, const domain_options& dopts, bool may_skip, std::string& why) {
  return open_and_run<any_provider>(sd, dopts, may_skip, why);
}

int run_on_error(side& sd, error e) { return run_with<any_provider>(sd, unexpected(std::move(e))); }

}  // namespace fabrix::perf
