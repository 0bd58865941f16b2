// The provider plugin loader (fabrix/plugins.hpp): finds libfabrix-<name>.so
// on FABRIX_PROVIDER_PATH and the default directory, loads it once, checks
// its table (provider_abi.h) and opens domains through it
// (detail/plugin_domain.hpp).
#include <fabrix/detail/env.hpp>
#include <fabrix/detail/plugin_domain.hpp>
#include <fabrix/plugins.hpp>
#include <fabrix/registry.hpp>

#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#ifndef FABRIX_PLUGIN_DIR
#define FABRIX_PLUGIN_DIR "/usr/local/lib/fabrix"
#endif

namespace fabrix {

namespace {

constexpr std::string_view prefix = "libfabrix-";
constexpr std::string_view suffix = ".so";

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Every plugin loaded, at fixed addresses, never freed (plugins are never
// unloaded, and a domain may still use its plugin while exit() runs).
struct loader_state {
  std::mutex mutex;
  std::deque<provider_plugin> loaded;
};
loader_state& state() {
  static auto* s = new loader_state;
  return *s;
}

std::string joined(const std::vector<std::string>& dirs) {
  std::string out;
  for (const auto& d : dirs) out += (out.empty() ? "" : ", ") + d;
  return out;
}

// The checks of provider_abi.h on the table `t` from `path`, for `name`.
result<provider_plugin> checked(const fabrix_provider_table* t, std::string_view name, const std::string& path) {
  const std::string where = "plugin " + path + ": ";
  const std::string provider(name);
  if (t == nullptr)
    return unexpected(status::unsupported,
                      where + "it cannot serve provider ABI version " + std::to_string(FABRIX_PROVIDER_ABI_VERSION) +
                          " (its entry returned no table)",
                      provider);
  if (t->abi_version < 1 || t->abi_version > FABRIX_PROVIDER_ABI_VERSION)
    return unexpected(status::unsupported,
                      where + "its table is of ABI version " + std::to_string(t->abi_version) +
                          "; this fabrix takes versions 1 to " + std::to_string(FABRIX_PROVIDER_ABI_VERSION),
                      provider);
  if (t->size < FABRIX_PROVIDER_TABLE_V1_SIZE)
    return unexpected(status::invalid_argument,
                      where + "its table is " + std::to_string(t->size) + " bytes, smaller than a version-1 table (" +
                          std::to_string(FABRIX_PROVIDER_TABLE_V1_SIZE) + " bytes)",
                      provider);
  if (t->name == nullptr || std::string_view(t->name) != name)
    return unexpected(status::invalid_argument,
                      where + "its table names provider '" + std::string(t->name ? t->name : "(null)") +
                          "', but the file is that of provider '" + provider + "' (libfabrix-" + provider + ".so)",
                      provider);
  const struct {
    const void* fn;
    const char* what;
  } v1[] = {
      {reinterpret_cast<const void*>(t->open_domain), "open_domain"},
      {reinterpret_cast<const void*>(t->close_domain), "close_domain"},
      {reinterpret_cast<const void*>(t->describe), "describe"},
      {reinterpret_cast<const void*>(t->capabilities), "capabilities"},
      {reinterpret_cast<const void*>(t->address), "address"},
      {reinterpret_cast<const void*>(t->register_memory), "register_memory"},
      {reinterpret_cast<const void*>(t->deregister_memory), "deregister_memory"},
      {reinterpret_cast<const void*>(t->connect), "connect"},
      {reinterpret_cast<const void*>(t->disconnect), "disconnect"},
      {reinterpret_cast<const void*>(t->post), "post"},
      {reinterpret_cast<const void*>(t->poll), "poll"},
      {reinterpret_cast<const void*>(t->wait), "wait"},
      {reinterpret_cast<const void*>(t->owner), "owner"},
      {reinterpret_cast<const void*>(t->finished), "finished"},
      {reinterpret_cast<const void*>(t->import_key), "import_key"},
      {reinterpret_cast<const void*>(t->release_key), "release_key"},
      {reinterpret_cast<const void*>(t->set_default_options), "set_default_options"},
  };
  for (const auto& f : v1)
    if (f.fn == nullptr)
      return unexpected(status::invalid_argument, where + "its table has no " + f.what + " (a version-1 function)",
                        provider);
  // The number its remote_buffers carry must be its name's, and no other
  // name's here. Registered last, so that a refused plugin leaves no name.
  const auto number = static_cast<std::uint16_t>(provider_id_of(name));
  if (t->wire_id != number)
    return unexpected(status::invalid_argument,
                      where + "its table's wire_id is " + std::to_string(t->wire_id) + ", but provider '" + provider +
                          "' has number " + std::to_string(number) + " (fabrix_provider_id_of(name))",
                      provider);
  const auto id = register_provider_name(name);
  if (!id) return unexpected(status::invalid_argument, where + id.error().message, provider);
  provider_plugin p;
  p.name = provider;
  p.path = path;
  p.version = t->version != nullptr ? t->version : "";
  p.abi_version = t->abi_version;
  p.table_size = t->size;
  p.priority = t->priority;
  p.wire_id = static_cast<provider_id>(t->wire_id);
  p.table = t;
  return p;
}

// Loads and checks the file at `path` for `name`. The library stays loaded
// whatever the outcome (see provider_abi.h).
result<provider_plugin> load_file(std::string_view name, const std::string& path) {
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    return unexpected(status::invalid_argument, "plugin " + path + ": dlopen failed: " + (why ? why : "unknown error"),
                      std::string(name));
  }
  ::dlerror();
  void* sym = ::dlsym(lib, FABRIX_PROVIDER_ENTRY_SYMBOL);
  if (sym == nullptr)
    return unexpected(
        status::invalid_argument,
        "plugin " + path + ": it does not export " + FABRIX_PROVIDER_ENTRY_SYMBOL + " (not a fabrix provider plugin?)",
        std::string(name));
  const auto entry = reinterpret_cast<fabrix_provider_entry_fn>(sym);
  return checked(entry(FABRIX_PROVIDER_ABI_VERSION), name, path);
}

}  // namespace

bool provider_plugin::has(std::size_t offset) const noexcept {
  if (table == nullptr || offset + sizeof(void (*)()) > table_size) return false;
  void (*fn)() = nullptr;
  std::memcpy(&fn, reinterpret_cast<const char*>(table) + offset, sizeof(fn));
  return fn != nullptr;
}

std::vector<std::string> provider_plugin_path() {
  std::vector<std::string> dirs;
  if (const char* v = detail::env_text("FABRIX_PROVIDER_PATH")) {
    std::string_view rest(v);
    while (!rest.empty()) {
      const auto colon = rest.find(':');
      const auto dir = rest.substr(0, colon);
      if (!dir.empty()) dirs.emplace_back(dir);
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  dirs.emplace_back(FABRIX_PLUGIN_DIR);
  return dirs;
}

std::vector<provider_plugin_file> find_provider_plugins() {
  std::vector<provider_plugin_file> found;
  for (const auto& dir : provider_plugin_path()) {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) continue;
    std::vector<provider_plugin_file> here;
    while (const dirent* e = ::readdir(d)) {
      const std::string_view file(e->d_name);
      if (file.size() <= prefix.size() + suffix.size() || !file.starts_with(prefix) || !file.ends_with(suffix))
        continue;
      const auto name = file.substr(prefix.size(), file.size() - prefix.size() - suffix.size());
      const std::string path = dir + "/" + std::string(file);
      if (!detail::valid_registered_name(name) || !is_file(path)) continue;
      if (std::none_of(found.begin(), found.end(), [&](const auto& f) { return f.name == name; }))
        here.push_back({std::string(name), path});
    }
    ::closedir(d);
    found.insert(found.end(), here.begin(), here.end());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return found;
}

result<const provider_plugin*> load_provider_plugin(std::string_view name) {
  if (!detail::valid_registered_name(name))
    return unexpected(status::invalid_argument,
                      "provider plugin name '" + std::string(name) + "': 1 to 31 characters of a-z, 0-9, '_' and '-'");
  auto& s = state();
  std::lock_guard lock(s.mutex);
  for (const auto& p : s.loaded)
    if (p.name == name) return &p;
  const auto dirs = provider_plugin_path();
  const std::string file = std::string(prefix) + std::string(name) + std::string(suffix);
  for (const auto& dir : dirs) {
    const std::string path = dir + "/" + file;
    if (!is_file(path)) continue;
    auto p = load_file(name, path);
    if (!p) return unexpected(std::move(p).error());
    s.loaded.push_back(std::move(*p));
    return &s.loaded.back();
  }
  return unexpected(status::unsupported,
                    "no provider plugin " + file + " in " + joined(dirs) +
                        " (FABRIX_PROVIDER_PATH's directories, then the default one)",
                    std::string(name));
}

std::vector<const provider_plugin*> loaded_provider_plugins() {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  std::vector<const provider_plugin*> out;
  for (const auto& p : s.loaded) out.push_back(&p);
  return out;
}

namespace detail {

result<std::unique_ptr<any_domain_base>> open_plugin_domain(const provider_plugin& plugin, const domain_options& opts) {
  const fabrix_domain_options c = plugin_abi::to_c(opts);
  fabrix_error err{};
  fabrix_plugin_domain* handle = nullptr;
  const std::int32_t s = plugin.table->open_domain(&c, &handle, &err);
  if (s != FABRIX_STATUS_OK) return unexpected(plugin_error(plugin, s, err, "open_domain"));
  auto shared = std::make_shared<plugin_domain_handle>(&plugin, handle);
  return std::unique_ptr<any_domain_base>(new plugin_domain(std::move(shared)));
}

}  // namespace detail

}  // namespace fabrix
