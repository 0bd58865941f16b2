// any_provider's view of a plugin (plugins.hpp): any_domain_base,
// any_endpoint_base and any_region_base over a fabrix_provider_table.
//
// Lifetime: the plugin's domain handle is closed when the last of the domain,
// its endpoints and its regions is gone (each holds the shared handle), so
// the C contract "endpoints and regions are closed before their domain" holds
// whatever order the C++ objects are destroyed in.
// Cost per operation: post converts operations into an array of `chunk` C
// operations on the stack (slices, remote buffers and imported keys are
// referenced, not copied); poll hands the caller's completion array to the
// plugin as it is (plugin_layout.hpp). Nothing is allocated per operation.
// Errors from the plugin keep its status, native code and message; their
// provider is the plugin's name.
#pragma once

#include <fabrix/provider_abi.h>
#include <fabrix/any_provider.hpp>
#include <fabrix/detail/plugin_layout.hpp>
#include <fabrix/plugins.hpp>

#include <array>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fabrix::detail {

// The plugin's domain handle, closed with the last holder.
struct plugin_domain_handle {
  const provider_plugin* plugin;
  fabrix_plugin_domain* handle;
  plugin_domain_handle(const provider_plugin* p, fabrix_plugin_domain* h) : plugin(p), handle(h) {}
  plugin_domain_handle(const plugin_domain_handle&) = delete;
  plugin_domain_handle& operator=(const plugin_domain_handle&) = delete;
  ~plugin_domain_handle() { plugin->table->close_domain(handle); }
  const fabrix_provider_table& table() const noexcept { return *plugin->table; }
};

// An error from a call that returned `code` and filled `e`.
inline error plugin_error(const provider_plugin& p, std::int32_t code, const fabrix_error& e, const char* what) {
  const status s = code == FABRIX_STATUS_OK ? status::provider_error : plugin_abi::status_from_plugin(code);
  std::string message(e.message, strnlen(e.message, sizeof(e.message)));
  if (message.empty()) message = std::string(what) + " failed (the plugin gave no message)";
  return make_error(s, std::move(message), p.name, static_cast<long>(e.native_code));
}

class plugin_region final : public any_region_base {
 public:
  plugin_region(std::shared_ptr<plugin_domain_handle> d, fabrix_plugin_region* r, const fabrix_remote_buffer& rb,
                void* descriptor)
      : d_(std::move(d)), r_(r), descriptor_(descriptor) {
    plugin_abi::copy_remote(rb, remote_);
  }
  plugin_region(const plugin_region&) = delete;
  plugin_region& operator=(const plugin_region&) = delete;
  ~plugin_region() override { d_->table().deregister_memory(r_); }
  const remote_buffer& remote() const noexcept override { return remote_; }
  void* descriptor() const noexcept override { return descriptor_; }

 private:
  std::shared_ptr<plugin_domain_handle> d_;
  fabrix_plugin_region* r_;
  void* descriptor_;
  remote_buffer remote_;
};

class plugin_endpoint final : public any_endpoint_base {
 public:
  static constexpr std::size_t chunk = 32;

  plugin_endpoint(std::shared_ptr<plugin_domain_handle> d, fabrix_plugin_endpoint* e) : d_(std::move(d)), e_(e) {}
  plugin_endpoint(const plugin_endpoint&) = delete;
  plugin_endpoint& operator=(const plugin_endpoint&) = delete;
  ~plugin_endpoint() override { d_->table().disconnect(e_); }

  status post(std::span<const operation> ops, std::size_t& posted) override {
    std::array<fabrix_operation, chunk> batch;
    posted = 0;
    while (!ops.empty()) {
      const std::size_t n = ops.size() < chunk ? ops.size() : chunk;
      for (std::size_t i = 0; i < n; ++i) plugin_abi::to_c(ops[i], batch[i]);
      std::size_t went = 0;
      const std::int32_t s = d_->table().post(e_, batch.data(), n, &went);
      if (s != FABRIX_STATUS_OK) {
        posted += went;
        return plugin_abi::status_from_plugin(s);
      }
      posted += n;
      ops = ops.subspan(n);
    }
    return status::ok;
  }
  void set_default_options(op_options defaults) override {
    d_->table().set_default_options(e_, static_cast<std::uint8_t>(defaults));
  }
  std::uint64_t finished() const noexcept override { return d_->table().finished(e_); }
  result<import_ref> import_key(const remote_buffer& rb) override {
    fabrix_error err{};
    fabrix_import_ref ref{};
    const std::int32_t s = d_->table().import_key(e_, plugin_abi::to_c(&rb), &ref, &err);
    if (s != FABRIX_STATUS_OK) return unexpected(plugin_error(*d_->plugin, s, err, "import_key"));
    return import_ref{ref.index, ref.generation};
  }
  status release_key(import_ref ref) override {
    return plugin_abi::status_from_plugin(d_->table().release_key(e_, ref.index, ref.generation));
  }

 private:
  std::shared_ptr<plugin_domain_handle> d_;
  fabrix_plugin_endpoint* e_;
};

class plugin_domain final : public any_domain_base {
 public:
  explicit plugin_domain(std::shared_ptr<plugin_domain_handle> d) : d_(std::move(d)) {}

  result<std::unique_ptr<any_region_base>> register_memory(void* addr, std::size_t len, memory_location where,
                                                           access rights) override {
    return new_region("register_memory", [&](auto... out) {
      return table().register_memory(d_->handle, addr, len, static_cast<std::uint8_t>(where.kind), where.device,
                                     static_cast<std::uint32_t>(rights), out...);
    });
  }
  result<std::unique_ptr<any_region_base>> allocate_memory(std::size_t len, access rights) override {
    if (!plugin().has(offsetof(fabrix_provider_table, allocate_memory)))
      return unexpected(status::unsupported,
                        "allocate_memory: this plugin (ABI version " + std::to_string(plugin().abi_version) + ", " +
                            plugin().path +
                            ") does not allocate memory (allocate it yourself and register_memory() it)",
                        plugin().name);
    return new_region("allocate_memory", [&](auto... out) {
      return table().allocate_memory(d_->handle, len, static_cast<std::uint32_t>(rights), out...);
    });
  }
  // The plugin table (provider_abi.h) carries no device: not reported.
  std::optional<std::string> device_pci() const override { return std::nullopt; }
  result<void> check_host_memory(const void* addr, std::size_t len) override {
    if (!plugin().has(offsetof(fabrix_provider_table, check_host_memory))) return {};
    fabrix_error err{};
    const std::int32_t s = table().check_host_memory(d_->handle, addr, len, &err);
    if (s != FABRIX_STATUS_OK) return unexpected(plugin_error(plugin(), s, err, "check_host_memory"));
    return {};
  }
  std::size_t poll(std::span<completion> out) override {
    return table().poll(d_->handle, plugin_abi::to_c(out.data()), out.size());
  }
  status wait(std::chrono::milliseconds timeout) override {
    return plugin_abi::status_from_plugin(table().wait(d_->handle, static_cast<std::int64_t>(timeout.count())));
  }
  result<std::vector<std::byte>> address() const override {
    std::vector<std::byte> blob(1024);
    for (int attempt = 0; attempt < 2; ++attempt) {
      fabrix_error err{};
      std::size_t size = blob.size();
      const std::int32_t s = table().address(d_->handle, blob.data(), &size, &err);
      if (s == FABRIX_STATUS_OK && size <= blob.size()) {
        blob.resize(size);
        return blob;
      }
      if (s != FABRIX_STATUS_TRUNCATED) return unexpected(plugin_error(plugin(), s, err, "address"));
      blob.resize(size);
    }
    return unexpected(status::provider_error, "address: the plugin's address blob keeps growing", plugin().name);
  }
  result<std::unique_ptr<any_endpoint_base>> connect(std::span<const std::byte> peer, std::uint32_t peer_id) override {
    fabrix_error err{};
    fabrix_plugin_endpoint* e = nullptr;
    const std::int32_t s = table().connect(d_->handle, peer.data(), peer.size(), peer_id, &e, &err);
    if (s != FABRIX_STATUS_OK) return unexpected(plugin_error(plugin(), s, err, "connect"));
    return std::unique_ptr<any_endpoint_base>(new plugin_endpoint(d_, e));
  }
  // The number the plugin's remote_buffers carry (its table's wire_id).
  provider_id provider() const noexcept override { return plugin().wire_id; }
  std::uint64_t owner() const noexcept override { return table().owner(d_->handle); }
  capabilities runtime_caps() const noexcept override {
    fabrix_capabilities c{};
    table().capabilities(d_->handle, &c);
    return plugin_abi::from_c(c);
  }
  // The plugin's line, then where it was loaded from:
  // "... [plugin /dir/libfabrix-ucx.so, ABI v2]".
  std::string describe() const override {
    std::array<char, 512> line{};
    const std::size_t n = table().describe(d_->handle, line.data(), line.size());
    std::string out;
    if (n < line.size()) {
      out.assign(line.data(), n);
    } else {
      out.resize(n + 1);
      table().describe(d_->handle, out.data(), out.size());
      out.resize(n);
    }
    return out + " [plugin " + plugin().path + ", ABI v" + std::to_string(plugin().abi_version) + "]";
  }

 private:
  const fabrix_provider_table& table() const noexcept { return d_->table(); }
  const provider_plugin& plugin() const noexcept { return *d_->plugin; }

  // Runs one of the table's calls that make a region (`call` gets their four
  // output pointers: region, remote buffer, descriptor, error) and owns what
  // it made.
  template <class Call>
  result<std::unique_ptr<any_region_base>> new_region(const char* what, Call call) {
    fabrix_error err{};
    fabrix_plugin_region* r = nullptr;
    fabrix_remote_buffer rb{};
    void* descriptor = nullptr;
    const std::int32_t s = call(&r, &rb, &descriptor, &err);
    if (s != FABRIX_STATUS_OK) return unexpected(plugin_error(plugin(), s, err, what));
    return std::unique_ptr<any_region_base>(new plugin_region(d_, r, rb, descriptor));
  }

  std::shared_ptr<plugin_domain_handle> d_;
};

}  // namespace fabrix::detail
