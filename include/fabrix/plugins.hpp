// fabrix/plugins.hpp — providers loaded at run time, behind the C ABI of
// <fabrix/provider_abi.h>.
//
// Where plugins are looked for: each directory of FABRIX_PROVIDER_PATH
// (colon-separated, in order), then fabrix's default directory,
// <prefix>/<libdir>/fabrix as configured when fabrix was built. The plugin
// of provider <name> is the file libfabrix-<name>.so; the first directory
// that has it wins, and a file found there that cannot be loaded is an error
// (a later directory is not tried: a broken plugin early on the path is a
// mistake to report, not to hide). Names are 1 to 31 characters of
// [a-z0-9_-].
//
// Loading: dlopen(RTLD_NOW | RTLD_LOCAL), then fabrix_provider_entry with
// this fabrix's FABRIX_PROVIDER_ABI_VERSION; the table must pass the checks
// in provider_abi.h and name itself <name>. A plugin is loaded once per
// process (later calls return the same one, even if the path has changed)
// and never unloaded (see provider_abi.h on dlclose).
//
// fabrix::open("<name>") (any_provider.hpp) uses a plugin when no provider
// of that name is compiled in: a header-only provider wins over a plugin of
// the same name. open("auto") considers the plugins found on the path too,
// by the priority in their table, after compiled-in providers of equal
// priority.
//
// Threading: every function here may be called from any thread (the loader
// takes a lock). Not for the data path.
#pragma once

#include <fabrix/provider_abi.h>
#include <fabrix/capabilities.hpp>
#include <fabrix/domain_options.hpp>
#include <fabrix/result.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fabrix {

// A loaded plugin. Lives, at a fixed address, until the process ends.
struct provider_plugin {
  std::string name;               // the table's name: <name> of libfabrix-<name>.so
  std::string path;               // the file that was loaded
  std::string version;            // the plugin's own version string ("" when none)
  std::uint32_t abi_version = 0;  // of the table the plugin gave this process
  std::uint32_t table_size = 0;   // the table's size field
  int priority = 0;               // for open("auto"): higher first
  provider_id wire_id{};          // the provider number its remote_buffers carry
  const fabrix_provider_table* table = nullptr;

  // Whether the table has the function at `offset` (offsetof a field of
  // fabrix_provider_table): inside `table_size` and not NULL.
  bool has(std::size_t offset) const noexcept;
};

// A plugin file found on the path (not loaded).
struct provider_plugin_file {
  std::string name;  // <name> of libfabrix-<name>.so
  std::string path;
};

// The directories searched, in order: FABRIX_PROVIDER_PATH's, then the default.
std::vector<std::string> provider_plugin_path();

// The plugins on the path, one per name (the first directory's), sorted by
// name. Reads directories only; loads nothing.
std::vector<provider_plugin_file> find_provider_plugins();

// Loads the plugin of provider `name` (once per process). Errors:
// invalid_argument for a bad name, a file dlopen refuses or that lacks the
// entry symbol, a table too small, with a NULL version-1 function or that
// names another provider; unsupported when no file is found (the message
// names every directory searched) or when the plugin cannot serve this ABI
// version (entry returned NULL, or abi_version outside 1..FABRIX_PROVIDER_ABI_VERSION).
result<const provider_plugin*> load_provider_plugin(std::string_view name);

// The plugins this process has loaded so far, in load order.
std::vector<const provider_plugin*> loaded_provider_plugins();

namespace detail {
struct any_domain_base;
// A domain of `plugin` behind any_provider (detail/plugin_domain.hpp).
result<std::unique_ptr<any_domain_base>> open_plugin_domain(const provider_plugin& plugin, const domain_options& opts);
}  // namespace detail

}  // namespace fabrix
