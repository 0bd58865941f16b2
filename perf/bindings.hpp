// The ways fabrix-perf can run a provider. A static binding instantiates the
// benchmark templates (run.hpp) over the provider's own type: direct calls,
// no virtual dispatch, as a user who names the provider gets. Each lives in
// its own translation unit, perf/bind_<name>.cpp, built when meson found the
// provider (FABRIX_HAVE_<NAME>). fabrix::any_provider (perf/bind_any.cpp)
// runs every registered provider, one virtual call per post and poll. A
// provider registered with fabrix::open() but without a binding here runs
// through any_provider only, and `--dispatch static` refuses it.
#pragma once

#include "side.hpp"

#include <fabrix/domain_options.hpp>
#include <fabrix/error.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace fabrix::perf {

// See open_and_run (run.hpp): nothing when the provider did not open and
// may_skip, else the side's exit status.
using open_and_run_fn = std::optional<int> (*)(side&, const domain_options&, bool may_skip, std::string& why);

struct static_binding {
  std::string_view name;  // the provider's registry name ("ucx")
  std::string_view type;  // its static type, for the header ("fabrix::ucx::provider")
  open_and_run_fn run;
};

// The static bindings of this build.
std::span<const static_binding> static_bindings();
// The static binding of provider `name`, or nullptr.
const static_binding* find_static_binding(std::string_view name);

// Through fabrix::any_provider: provider dopts.provider (a registered name).
std::optional<int> open_and_run_any(side& sd, const domain_options& dopts, bool may_skip, std::string& why);
// Runs this side on `e` (no provider opened) so that both sides learn it.
int run_on_error(side& sd, error e);

// One per static binding, defined in perf/bind_<name>.cpp.
std::optional<int> open_and_run_ucx(side&, const domain_options&, bool, std::string&);
std::optional<int> open_and_run_ofi(side&, const domain_options&, bool, std::string&);
std::optional<int> open_and_run_verbs(side&, const domain_options&, bool, std::string&);
std::optional<int> open_and_run_cuda_ipc(side&, const domain_options&, bool, std::string&);
std::optional<int> open_and_run_routed(side&, const domain_options&, bool, std::string&);

}  // namespace fabrix::perf
