// fabrix::any_provider — the runtime-chosen provider. It satisfies the same
// `provider` concept as the static ones (a static_assert below proves it), so
// `template <provider P>` code runs unchanged with static or runtime choice.
// Each call is one virtual dispatch into the chosen provider; operations the
// provider lacks return status::unsupported instead of failing to compile.
// The same holds for the optional allocate_memory (allocates_memory<P>):
// any_provider always offers it, and it returns status::unsupported, with a
// message naming the provider, when the chosen provider does not allocate.
//
// Providers join the registry when their header is included (e.g.
// <fabrix/ucx.hpp> registers "ucx"). fabrix::open("ucx") opens that one, or,
// where none of that name is compiled in, the plugin libfabrix-ucx.so
// (plugins.hpp, provider_abi.h). fabrix::open("auto") opens the routed
// domain (routed.hpp: per peer and memory kind the provider that serves it)
// in a program that includes it, where FABRIX_ROUTE is set or its default
// routes open two or more provider domains; otherwise, and where the
// options name a transport or device or FABRIX_ROUTE=off, the provider,
// compiled-in or plugin, with the highest priority that opens successfully
// on this machine (domain_impl::create below says how ties and names fall).
#pragma once

#include <fabrix/concepts.hpp>
#include <fabrix/detail/env.hpp>
#include <fabrix/domain.hpp>
#include <fabrix/plugins.hpp>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fabrix {

namespace detail {

struct any_region_base {
  virtual ~any_region_base() = default;
  virtual const remote_buffer& remote() const noexcept = 0;
  virtual void* descriptor() const noexcept = 0;
};

struct any_endpoint_base {
  virtual ~any_endpoint_base() = default;
  virtual status post(std::span<const operation> ops, std::size_t& posted) = 0;
  virtual void set_default_options(op_options defaults) = 0;
  virtual std::uint64_t finished() const noexcept = 0;
  virtual result<import_ref> import_key(const remote_buffer& rb) = 0;
  virtual status release_key(import_ref ref) = 0;
  // Which provider serves the peer and why, where the provider says;
  // otherwise its name (empty from a plugin).
  virtual std::string describe() const { return {}; }
  // Another provider's remote_buffer as one of this endpoint's, where it
  // takes them (queue_pair::adopt); false otherwise.
  virtual bool adopt_remote(const remote_buffer&, remote_buffer&) { return false; }
};

struct any_domain_base {
  virtual ~any_domain_base() = default;
  virtual result<std::unique_ptr<any_region_base>> register_memory(void* addr, std::size_t len, memory_location where,
                                                                   access rights) = 0;
  // The provider's allocate_memory, or status::unsupported where it has none.
  virtual result<std::unique_ptr<any_region_base>> allocate_memory(std::size_t len, access rights) = 0;
  // The provider's check_host_memory, or ok where it has none.
  virtual result<void> check_host_memory(const void* addr, std::size_t len) = 0;
  virtual std::size_t poll(std::span<completion> out) = 0;
  virtual status wait(std::chrono::milliseconds timeout) = 0;
  virtual result<std::vector<std::byte>> address() const = 0;
  virtual result<std::unique_ptr<any_endpoint_base>> connect(std::span<const std::byte> peer,
                                                             std::uint32_t peer_id) = 0;
  virtual provider_id provider() const noexcept = 0;
  virtual std::uint64_t owner() const noexcept = 0;
  virtual capabilities runtime_caps() const noexcept = 0;
  virtual std::string describe() const = 0;
  // The provider's device_pci(), or nullopt where it has none.
  virtual std::optional<std::string> device_pci() const = 0;
};

template <provider P>
struct any_region_model final : any_region_base {
  explicit any_region_model(typename P::region_impl r) : impl(std::move(r)) {}
  const remote_buffer& remote() const noexcept override { return impl.remote(); }
  void* descriptor() const noexcept override { return impl.descriptor(); }
  typename P::region_impl impl;
};

template <provider P>
struct any_endpoint_model final : any_endpoint_base {
  explicit any_endpoint_model(typename P::endpoint_impl e) : impl(std::move(e)) {}
  status post(std::span<const operation> ops, std::size_t& posted) override { return impl.post(ops, posted); }
  void set_default_options(op_options defaults) override { impl.set_default_options(defaults); }
  std::uint64_t finished() const noexcept override { return impl.finished(); }
  result<import_ref> import_key(const remote_buffer& rb) override { return impl.import_key(rb); }
  status release_key(import_ref ref) override { return impl.release_key(ref); }
  std::string describe() const override {
    if constexpr (requires { impl.describe(); })
      return impl.describe();
    else
      return std::string(P::name);
  }
  bool adopt_remote(const remote_buffer& foreign, remote_buffer& out) override {
    if constexpr (requires { impl.adopt_remote(foreign, out); })
      return impl.adopt_remote(foreign, out);
    else
      return false;
  }
  typename P::endpoint_impl impl;
};

template <provider P>
struct any_domain_model final : any_domain_base {
  explicit any_domain_model(typename P::domain_impl d) : impl(std::move(d)) {}
  result<std::unique_ptr<any_region_base>> register_memory(void* addr, std::size_t len, memory_location where,
                                                           access rights) override {
    auto r = impl.register_memory(addr, len, where, rights);
    if (!r) return unexpected(std::move(r).error());
    return std::unique_ptr<any_region_base>(new any_region_model<P>(std::move(*r)));
  }
  result<std::unique_ptr<any_region_base>> allocate_memory(std::size_t len, access rights) override {
    if constexpr (allocates_memory<P>) {
      auto r = impl.allocate_memory(len, rights);
      if (!r) return unexpected(std::move(r).error());
      return std::unique_ptr<any_region_base>(new any_region_model<P>(std::move(*r)));
    } else {
      (void)len;
      (void)rights;
      return unexpected(status::unsupported,
                        "allocate_memory: this provider does not allocate memory (allocate it yourself and "
                        "register_memory() it)",
                        std::string(P::name));
    }
  }
  std::optional<std::string> device_pci() const override {
    if constexpr (reports_device_pci<P>)
      return impl.device_pci();
    else
      return std::nullopt;
  }
  result<void> check_host_memory(const void* addr, std::size_t len) override {
    if constexpr (checks_host_memory<P>) {
      return impl.check_host_memory(addr, len);
    } else {
      (void)addr;
      (void)len;
      return {};
    }
  }
  std::size_t poll(std::span<completion> out) override { return impl.poll(out); }
  status wait(std::chrono::milliseconds timeout) override { return impl.wait(timeout); }
  result<std::vector<std::byte>> address() const override { return impl.address(); }
  result<std::unique_ptr<any_endpoint_base>> connect(std::span<const std::byte> peer, std::uint32_t peer_id) override {
    auto e = impl.connect(peer, peer_id);
    if (!e) return unexpected(std::move(e).error());
    return std::unique_ptr<any_endpoint_base>(new any_endpoint_model<P>(std::move(*e)));
  }
  provider_id provider() const noexcept override { return impl.provider(); }
  std::uint64_t owner() const noexcept override { return impl.owner(); }
  capabilities runtime_caps() const noexcept override { return impl.runtime_caps(); }
  std::string describe() const override { return impl.describe(); }
  typename P::domain_impl impl;
};

struct provider_entry {
  std::string_view name;
  int priority;  // "auto" tries higher first
  result<std::unique_ptr<any_domain_base>> (*open)(const domain_options&);
};

// Function-local static: safe to use from other headers' static initialisers.
inline std::vector<provider_entry>& provider_registry() {
  static std::vector<provider_entry> entries;
  return entries;
}

// The registry, best provider first ("auto" tries them in this order).
inline std::vector<provider_entry> providers_by_priority() {
  auto entries = provider_registry();
  std::stable_sort(entries.begin(), entries.end(),
                   [](const provider_entry& a, const provider_entry& b) { return a.priority > b.priority; });
  return entries;
}

template <provider P>
result<std::unique_ptr<any_domain_base>> open_erased(const domain_options& opts) {
  auto d = P::domain_impl::create(opts);
  if (!d) return unexpected(std::move(d).error());
  return std::unique_ptr<any_domain_base>(new any_domain_model<P>(std::move(*d)));
}

// fabrix::routed (routed.hpp) is no provider of the registry
// (registered_providers() does not list it): its header sets this, and
// open("routed") opens it, as does open("auto") in a program that has it
// (any_provider::domain_impl::create says when).
inline result<std::unique_ptr<any_domain_base>> (*routed_opener)(const domain_options&) = nullptr;
// open("auto")'s (set by the same header): the routed domain over its
// default routes, or, where they open one provider domain (nothing to
// route: no other provider, no GPU), that provider's domain itself, which
// costs no routing per operation and still reaches routed peers
// (detail/routed_peer.hpp).
inline result<std::unique_ptr<any_domain_base>> (*routed_auto_opener)(const domain_options&) = nullptr;

// FABRIX_ROUTE's route text; null where it is unset or "off" ("off": open("auto")
// picks one provider, as in a program without fabrix::routed).
inline const char* route_from_environment() noexcept {
  const char* r = env_text("FABRIX_ROUTE");
  return r != nullptr && std::string_view(r) != "off" ? r : nullptr;
}
inline bool routing_turned_off() noexcept {
  const char* r = env_text("FABRIX_ROUTE");
  return r != nullptr && std::string_view(r) == "off";
}

// Why a provider was not added to the registry (its name's wire number is
// another registered name's): open() of that name reports it.
struct refused_provider {
  std::string_view name;
  error why;
};
inline std::vector<refused_provider>& refused_providers() {
  static std::vector<refused_provider> refused;
  return refused;
}

// Adds P under P::name (and the name to registry.hpp's names); returns true
// so a header can use it as an initialiser, false when the name was refused.
template <provider P>
bool register_provider(int priority) {
  if constexpr (requires { P::id; })
    static_assert(P::id == provider_id_of(P::name), "a provider's id is provider_id_of(its name)");
  auto named = register_provider_name(P::name);
  if (!named) {
    refused_providers().push_back({P::name, std::move(named).error()});
    return false;
  }
  auto& r = provider_registry();
  if (std::none_of(r.begin(), r.end(), [](const provider_entry& e) { return e.name == P::name; }))
    r.push_back({P::name, priority, &open_erased<P>});
  return true;
}

}  // namespace detail

struct any_provider {
  static constexpr std::string_view name = "any";
  // Everything may be available; the chosen provider decides at run time.
  static constexpr capabilities caps{.rma = true,
                                     .write_with_imm = true,
                                     .atomics = true,
                                     .send_recv = true,
                                     .gpu = gpu_path::direct,
                                     .max_sge = 1024,
                                     .needs_target_progress = true};

  class region_impl {
   public:
    explicit region_impl(std::unique_ptr<detail::any_region_base> r) : r_(std::move(r)) {}
    const remote_buffer& remote() const noexcept { return r_->remote(); }
    void* descriptor() const noexcept { return r_->descriptor(); }

   private:
    std::unique_ptr<detail::any_region_base> r_;
  };

  class endpoint_impl {
   public:
    explicit endpoint_impl(std::unique_ptr<detail::any_endpoint_base> e) : e_(std::move(e)) {}
    status post(std::span<const operation> ops, std::size_t& posted) { return e_->post(ops, posted); }
    void set_default_options(op_options defaults) { e_->set_default_options(defaults); }
    std::uint64_t finished() const noexcept { return e_->finished(); }
    result<import_ref> import_key(const remote_buffer& rb) { return e_->import_key(rb); }
    status release_key(import_ref ref) { return e_->release_key(ref); }
    std::string describe() const { return e_->describe(); }
    bool adopt_remote(const remote_buffer& foreign, remote_buffer& out) { return e_->adopt_remote(foreign, out); }

   private:
    std::unique_ptr<detail::any_endpoint_base> e_;
  };

  class domain_impl {
   public:
    // opts.provider: a provider's name, "routed" or "auto".
    // A name no compiled-in provider has is opened as a plugin,
    // libfabrix-<name>.so (plugins.hpp); a compiled-in (header-only)
    // provider wins over a plugin of the same name, which is then not
    // loaded.
    // "auto" in a program with fabrix::routed (<fabrix/routed.hpp>, which
    // <fabrix/fabrix.hpp> includes) opens the routed domain: with
    // FABRIX_ROUTE's route, else with its default routes where
    // opts.transport and opts.device are empty (they name one provider's
    // transport or device, so they ask for one provider); where the
    // default routes open one provider domain, that domain itself
    // (routed_auto_opener). Otherwise, or
    // with FABRIX_ROUTE=off, or where the routed domain opens nothing,
    // "auto" picks one provider: it tries the compiled-in providers and
    // the plugins found on the plugin path (each loaded to read its
    // table's priority) by priority, highest first, a compiled-in one
    // first among equals, and opens the first that opens; a plugin that
    // cannot be loaded is passed over (its error is in the message when
    // nothing opens).
    static result<domain_impl> create(const domain_options& opts) {
      const auto entries = detail::providers_by_priority();
      const bool pick_best = opts.provider.empty() || opts.provider == "auto";
      if (opts.provider == "routed" || (pick_best && detail::route_from_environment() != nullptr)) {
        if (detail::routed_opener == nullptr)
          return unexpected(status::unsupported, "fabrix::routed is not in this program (include <fabrix/routed.hpp>)");
        auto d = detail::routed_opener(opts);
        if (!d) return unexpected(std::move(d).error());
        return domain_impl(std::move(*d));
      }
      if (pick_best && detail::routed_auto_opener != nullptr && !detail::routing_turned_off() &&
          opts.transport.empty() && opts.device.empty()) {
        // Where it opens nothing (no provider of host memory opens here),
        // the pick below may still open one (cuda_ipc); else its errors say why.
        if (auto d = detail::routed_auto_opener(opts)) return domain_impl(std::move(*d));
      }
      if (!pick_best) {
        for (const auto& e : entries) {
          if (e.name != opts.provider) continue;
          auto d = e.open(opts);
          if (!d) return unexpected(std::move(d).error());
          return domain_impl(std::move(*d));
        }
        for (const auto& r : detail::refused_providers())
          if (r.name == opts.provider) return unexpected(r.why);
        auto plugin = load_provider_plugin(opts.provider);
        if (!plugin) {
          error e = std::move(plugin).error();
          e.message = "provider '" + opts.provider +
                      "' is not registered (include its header, e.g. <fabrix/ucx.hpp>); as a plugin: " + e.message;
          return unexpected(std::move(e));
        }
        auto d = detail::open_plugin_domain(**plugin, opts);
        if (!d) return unexpected(std::move(d).error());
        return domain_impl(std::move(*d));
      }
      struct candidate {
        int priority;
        const detail::provider_entry* compiled;  // one of the two
        const provider_plugin* plugin;
      };
      std::vector<candidate> order;
      for (const auto& e : entries) order.push_back({e.priority, &e, nullptr});
      std::string tried;
      for (const auto& f : find_provider_plugins()) {
        if (std::any_of(entries.begin(), entries.end(), [&](const auto& e) { return e.name == f.name; })) continue;
        auto p = load_provider_plugin(f.name);
        if (p)
          order.push_back({(*p)->priority, nullptr, *p});
        else
          tried += std::string(tried.empty() ? "" : "; ") + p.error().describe();
      }
      std::stable_sort(order.begin(), order.end(),
                       [](const candidate& a, const candidate& b) { return a.priority > b.priority; });
      for (const auto& c : order) {
        auto d = c.compiled ? c.compiled->open(opts) : detail::open_plugin_domain(*c.plugin, opts);
        if (d) return domain_impl(std::move(*d));
        tried += std::string(tried.empty() ? "" : "; ") + d.error().describe();
      }
      return unexpected(status::unsupported,
                        tried.empty() ? "no provider is registered (include a provider header) and no plugin was "
                                        "found on the plugin path"
                                      : "no provider opened: " + tried);
    }

    result<region_impl> register_memory(void* addr, std::size_t len, memory_location where, access rights) {
      auto r = d_->register_memory(addr, len, where, rights);
      if (!r) return unexpected(std::move(r).error());
      return region_impl(std::move(*r));
    }
    // Makes allocates_memory<any_provider> hold: domain<any_provider>::
    // allocate_memory compiles, and at run time it is the chosen provider's
    // allocate_memory or status::unsupported (with a message) where it has
    // none. Code that tests allocates_memory<P> must therefore also handle
    // that error (e.g. by allocating and registering the memory itself).
    result<region_impl> allocate_memory(std::size_t len, access rights) {
      auto r = d_->allocate_memory(len, rights);
      if (!r) return unexpected(std::move(r).error());
      return region_impl(std::move(*r));
    }
    result<void> check_host_memory(const void* addr, std::size_t len) { return d_->check_host_memory(addr, len); }
    std::size_t poll(std::span<completion> out) { return d_->poll(out); }
    status wait(std::chrono::milliseconds timeout) { return d_->wait(timeout); }
    result<std::vector<std::byte>> address() const { return d_->address(); }
    result<endpoint_impl> connect(std::span<const std::byte> peer, std::uint32_t peer_id) {
      auto e = d_->connect(peer, peer_id);
      if (!e) return unexpected(std::move(e).error());
      return endpoint_impl(std::move(*e));
    }
    provider_id provider() const noexcept { return d_->provider(); }
    std::uint64_t owner() const noexcept { return d_->owner(); }
    capabilities runtime_caps() const noexcept { return d_->runtime_caps(); }
    std::string describe() const { return d_->describe(); }
    std::optional<std::string> device_pci() const { return d_->device_pci(); }
    // The provider domain inside, handed over (routed_auto_opener: the
    // routed domain gives back its only one); this object is empty after.
    std::unique_ptr<detail::any_domain_base> release_base() && noexcept { return std::move(d_); }

   private:
    explicit domain_impl(std::unique_ptr<detail::any_domain_base> d) : d_(std::move(d)) {}
    std::unique_ptr<detail::any_domain_base> d_;
  };
};

static_assert(provider<any_provider>, "any_provider must satisfy the provider concept");
static_assert(allocates_memory<any_provider>, "any_provider forwards allocate_memory (unsupported at run time)");
static_assert(checks_host_memory<any_provider>, "any_provider forwards check_host_memory (ok where absent)");

using any_domain = domain<any_provider>;

// Opens a domain of the named provider ("auto" for the best available).
inline result<any_domain> open(std::string_view name, domain_options opts = {}) {
  opts.provider = std::string(name);
  return any_domain::create(opts);
}

// Names of the providers compiled into this program, best first. Plugins
// are not among them: find_provider_plugins() and loaded_provider_plugins()
// (plugins.hpp) list those.
inline std::vector<std::string_view> registered_providers() {
  std::vector<std::string_view> names;
  for (const auto& e : detail::providers_by_priority()) names.push_back(e.name);
  return names;
}

}  // namespace fabrix
