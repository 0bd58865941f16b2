// What this build of fabrix has: its version, the providers compiled into
// this tool (best first: the order fabrix::open("auto") tries), and the
// optional parts.
#include "sections.hpp"

#include <fabrix/any_provider.hpp>
#include <fabrix/bootstrap.hpp>

namespace fabrix::info {

value build_section() {
  value providers = value::make_array();
  for (std::string_view name : registered_providers()) providers.push(name);
  value s = value::make_object();
  s.set("version", FABRIX_INFO_VERSION)
      .set("providers", std::move(providers))
      .set("pmix", bootstrap::has_pmix())
      .set("cuda", FABRIX_HAVE_CUDA != 0);
  return s;
}

}  // namespace fabrix::info
