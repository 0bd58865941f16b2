// The conformance suite through a provider plugin: no provider header is
// included, so the only provider is fabrix::any_provider, and
// fabrix::open(provider_name) can only find the plugin libfabrix-<name>.so on
// FABRIX_PROVIDER_PATH (tests/plugin/meson.build points it at a build
// directory holding the UCX provider built as a plugin). Every domain a case
// opens is checked to be the plugin's (check_plugin_domain), so a case cannot
// pass on a compiled-in provider. FABRIX_TEST_TRANSPORT as for ucx.
#pragma once

#include "harness.hpp"

#include <fabrix/plugins.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

// providers.hpp: any_provider is the only provider this suite runs.
#define FX_ANY_PROVIDER_ONLY 1

namespace fxt {

// The plugin's provider name: FX_PLUGIN_NAME, or "ucx".
inline const char* const provider_name = [] {
  const char* name = std::getenv("FX_PLUGIN_NAME");
  return name != nullptr && *name != '\0' ? name : "ucx";
}();

inline std::string unavailable_reason() {
  if (!fabrix::registered_providers().empty()) return "a provider is compiled in: this suite must have none";
  return {};
}

// Aborts the rank unless `d` is a domain of the plugin loaded from a
// directory of FABRIX_PROVIDER_PATH, with its name's provider number.
inline void check_plugin_domain(const fabrix::any_domain& d) {
  const char* path = std::getenv("FABRIX_PROVIDER_PATH");
  const std::string expected = std::string(path ? path : "(unset)") + "/libfabrix-" + provider_name + ".so";
  const std::string line = d.describe();
  const auto loaded = fabrix::loaded_provider_plugins();
  const bool from_plugin = line.find("[plugin " + expected + ",") != std::string::npos && loaded.size() == 1 &&
                           loaded[0]->path == expected && fabrix::registered_providers().empty() &&
                           d.provider() == fabrix::provider_id_of(provider_name);
  if (!from_plugin) {
    std::fprintf(stderr, "provider_plugin.hpp: the domain is not the plugin %s's: %s\n", expected.c_str(),
                 line.c_str());
    std::abort();
  }
}

}  // namespace fxt
