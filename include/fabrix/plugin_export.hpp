// fabrix/plugin_export.hpp — builds a provider plugin from a static provider.
//
// One source file makes a plugin of any provider P that satisfies
// fabrix::provider (P::domain_impl, P::endpoint_impl, P::region_impl):
//
//   // ucx_plugin.cpp, built as libfabrix-ucx.so
//   #include <fabrix/plugin_export.hpp>
//   #include <fabrix/ucx.hpp>
//   FABRIX_EXPORT_PROVIDER(fabrix::ucx::provider, 50)
//
//   shared_module('fabrix-ucx', 'ucx_plugin.cpp', name_prefix: 'lib',
//     dependencies: fabrix_ucx_dep, gnu_symbol_visibility: 'hidden',
//     link_args: '-Wl,--exclude-libs,ALL')
//
// The macro defines the one exported symbol, fabrix_provider_entry
// (provider_abi.h), returning a table whose name is P::name (so the file must
// be libfabrix-<P::name>.so), whose priority is `priority` and whose wire_id
// is provider_id_of(P::name) (which P::id must equal). Build it with hidden visibility, as above, so that nothing else
// of the plugin (its copy of fabrix's inline functions, the static libraries
// it links) is exported or interposed.
//
// Versions: the entry answers a host of ABI version h with the table of
// version min(h, the version exported), so a plugin built against a newer
// provider_abi.h still loads into an older fabrix.
// FABRIX_EXPORT_PROVIDER_VERSION(P, priority, 1) exports a version-1 table
// (no allocate_memory, no check_host_memory): what a plugin built against an
// older fabrix looks like, for compatibility tests.
// The table's version string is FABRIX_PROVIDER_PLUGIN_VERSION when that macro
// is defined (e.g. -DFABRIX_PROVIDER_PLUGIN_VERSION="\"1.2\""), else "".
//
// Every function of the table catches what P throws (where exceptions are
// enabled) and reports it as provider_error; the static providers return
// errors in result<> and do not throw, so this is a last line only.
// Conversions: plugin_layout.hpp. post converts operations in chunks of
// `chunk` into arrays on the stack, so nothing is allocated per operation.
#pragma once

#include <fabrix/provider_abi.h>
#include <fabrix/concepts.hpp>
#include <fabrix/detail/plugin_layout.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#ifndef FABRIX_PROVIDER_PLUGIN_VERSION
#define FABRIX_PROVIDER_PLUGIN_VERSION ""
#endif

namespace fabrix::detail::plugin_export {

// Runs f(), which returns an int32_t status; an exception becomes
// provider_error in `err`.
template <class F>
std::int32_t guarded(fabrix_error* err, F&& f) noexcept {
#if defined(__cpp_exceptions)
  try {
    return f();
  } catch (const std::exception& e) {
    char message[FABRIX_ERROR_MESSAGE_SIZE];
    std::snprintf(message, sizeof(message), "C++ exception in the plugin: %s", e.what());
    return plugin_abi::fail(err, status::provider_error, message);
  } catch (...) {
    return plugin_abi::fail(err, status::provider_error, "unknown C++ exception in the plugin");
  }
#else
  (void)err;
  return f();
#endif
}

// Runs f() where no error can be reported; an exception gives `fallback`.
template <class T, class F>
T quiet(T fallback, F&& f) noexcept {
#if defined(__cpp_exceptions)
  try {
    return f();
  } catch (...) {
    return fallback;
  }
#else
  (void)fallback;
  return f();
#endif
}

template <provider P>
struct exporter {
  struct domain_box {
    typename P::domain_impl impl;
  };
  struct endpoint_box {
    typename P::endpoint_impl impl;
  };
  struct region_box {
    typename P::region_impl impl;
  };

  static constexpr std::size_t chunk = 32;  // operations converted per provider post

  // The name the table gives (P::name, or the one FABRIX_EXPORT_PROVIDER_AS
  // chose) and the two wire numbers: `inner`, what P seals into its remote
  // buffers and expects back; `outer`, the exported name's, what the host
  // sees. They differ only for a provider exported under another name: then
  // remote buffers leave with `outer` and are handed back to P with `inner`
  // (the seal, made over `inner`, still verifies), so the host and the job
  // see a provider of its own number. Fixed by the first entry() call.
  static inline const char* exported_name = nullptr;
  static inline std::uint16_t inner = 0;
  static inline std::uint16_t outer = 0;
  static bool relabeled() noexcept { return inner != outer; }
  // rb as P made it, from what the host holds.
  static remote_buffer inner_copy(const fabrix_remote_buffer& rb) noexcept {
    remote_buffer out;
    plugin_abi::copy_remote(rb, out);
    out.provider = static_cast<provider_id>(inner);
    return out;
  }
  static_assert(std::is_trivially_destructible_v<operation> && std::is_trivially_destructible_v<remote_key>);

  static domain_box* of(fabrix_plugin_domain* d) noexcept { return reinterpret_cast<domain_box*>(d); }
  static const domain_box* of(const fabrix_plugin_domain* d) noexcept { return reinterpret_cast<const domain_box*>(d); }
  static endpoint_box* of(fabrix_plugin_endpoint* e) noexcept { return reinterpret_cast<endpoint_box*>(e); }
  static const endpoint_box* of(const fabrix_plugin_endpoint* e) noexcept {
    return reinterpret_cast<const endpoint_box*>(e);
  }

  static std::int32_t no_memory(fabrix_error* err) {
    return plugin_abi::fail(err, status::no_memory, "out of memory in the plugin");
  }

  // Remote buffers a post carries, rebuilt with P's own number, at most this
  // many per chunk (the stack holds them; a chunk with more posts in parts).
  static constexpr std::size_t relabel_buffers = 8;

  // Points the first operations of batch[0..n) (converted from ops) back
  // at P's number: keys in place, remote buffers as copies in `buffers`
  // (operations naming the same buffer share one copy). Stops before the
  // operation that would need more than relabel_buffers copies; returns how
  // many operations it converted (at least one), the part to post now.
  static std::size_t relabel_in(operation* batch, remote_key* keys, const fabrix_operation* ops, std::size_t n,
                                remote_buffer* buffers) noexcept {
    std::size_t used = 0;
    const fabrix_remote_buffer* seen[relabel_buffers] = {};
    for (std::size_t i = 0; i < n; ++i) {
      const fabrix_remote_buffer* rb = ops[i].remote.buffer;
      if (rb == nullptr) {
        if (batch[i].remote.key == &keys[i]) keys[i].provider = static_cast<provider_id>(inner);
        continue;
      }
      std::size_t k = 0;
      while (k < used && seen[k] != rb) ++k;
      if (k == used) {
        if (used == relabel_buffers) return i;
        ::new (&buffers[used]) remote_buffer(inner_copy(*rb));
        seen[used++] = rb;
      }
      batch[i].remote.buffer = &buffers[k];
    }
    return n;
  }

  // A new region's handle, remote buffer and descriptor.
  static std::int32_t hand_out(typename P::region_impl&& r, fabrix_plugin_region** out, fabrix_remote_buffer* remote,
                               void** descriptor, fabrix_error* err) {
    auto* box = new (std::nothrow) region_box{std::move(r)};
    if (box == nullptr) return no_memory(err);
    plugin_abi::copy_remote(box->impl.remote(), *remote);
    remote->provider = outer;
    *descriptor = box->impl.descriptor();
    *out = reinterpret_cast<fabrix_plugin_region*>(box);
    return FABRIX_STATUS_OK;
  }

  static std::int32_t open_domain(const fabrix_domain_options* o, fabrix_plugin_domain** out,
                                  fabrix_error* err) noexcept {
    return guarded(err, [&]() -> std::int32_t {
      auto d = P::domain_impl::create(plugin_abi::from_c(*o));
      if (!d) return plugin_abi::fail(err, d.error());
      auto* box = new (std::nothrow) domain_box{std::move(*d)};
      if (box == nullptr) return no_memory(err);
      *out = reinterpret_cast<fabrix_plugin_domain*>(box);
      return FABRIX_STATUS_OK;
    });
  }
  static void close_domain(fabrix_plugin_domain* d) noexcept {
    quiet(0, [&] {
      delete of(d);
      return 0;
    });
  }
  static std::size_t describe(const fabrix_plugin_domain* d, char* buffer, std::size_t capacity) noexcept {
    return quiet(std::size_t{0}, [&] {
      const std::string line = of(d)->impl.describe();
      if (capacity > 0) {
        const std::size_t n = line.size() < capacity - 1 ? line.size() : capacity - 1;
        std::memcpy(buffer, line.data(), n);
        buffer[n] = '\0';
      }
      return line.size();
    });
  }
  static void capabilities(const fabrix_plugin_domain* d, fabrix_capabilities* out) noexcept {
    *out = quiet(fabrix_capabilities{}, [&] { return plugin_abi::to_c(of(d)->impl.runtime_caps()); });
  }
  static std::int32_t address(const fabrix_plugin_domain* d, void* buffer, std::size_t* size,
                              fabrix_error* err) noexcept {
    return guarded(err, [&]() -> std::int32_t {
      auto a = of(d)->impl.address();
      if (!a) return plugin_abi::fail(err, a.error());
      const std::size_t capacity = *size;
      *size = a->size();
      if (a->size() > capacity || (buffer == nullptr && !a->empty()))
        return plugin_abi::fail(err, status::truncated, "address: the buffer is smaller than the address blob");
      if (!a->empty()) std::memcpy(buffer, a->data(), a->size());
      return FABRIX_STATUS_OK;
    });
  }
  static std::int32_t register_memory(fabrix_plugin_domain* d, void* addr, std::size_t len, std::uint8_t kind,
                                      std::int32_t device, std::uint32_t rights, fabrix_plugin_region** out,
                                      fabrix_remote_buffer* remote, void** descriptor, fabrix_error* err) noexcept {
    return guarded(err, [&]() -> std::int32_t {
      auto r = of(d)->impl.register_memory(addr, len, memory_location{static_cast<memory_kind>(kind), device},
                                           static_cast<access>(rights));
      if (!r) return plugin_abi::fail(err, r.error());
      return hand_out(std::move(*r), out, remote, descriptor, err);
    });
  }
  static void deregister_memory(fabrix_plugin_region* r) noexcept {
    quiet(0, [&] {
      delete reinterpret_cast<region_box*>(r);
      return 0;
    });
  }
  static std::int32_t connect(fabrix_plugin_domain* d, const void* peer, std::size_t peer_size, std::uint32_t peer_id,
                              fabrix_plugin_endpoint** out, fabrix_error* err) noexcept {
    return guarded(err, [&]() -> std::int32_t {
      auto e = of(d)->impl.connect(std::span<const std::byte>(static_cast<const std::byte*>(peer), peer_size), peer_id);
      if (!e) return plugin_abi::fail(err, e.error());
      auto* box = new (std::nothrow) endpoint_box{std::move(*e)};
      if (box == nullptr) return no_memory(err);
      *out = reinterpret_cast<fabrix_plugin_endpoint*>(box);
      return FABRIX_STATUS_OK;
    });
  }
  static void disconnect(fabrix_plugin_endpoint* e) noexcept {
    quiet(0, [&] {
      delete of(e);
      return 0;
    });
  }
  static std::int32_t post(fabrix_plugin_endpoint* e, const fabrix_operation* ops, std::size_t count,
                           std::size_t* posted) noexcept {
    *posted = 0;
    return quiet(static_cast<std::int32_t>(FABRIX_STATUS_PROVIDER_ERROR), [&]() -> std::int32_t {
      // Raw storage: only the n slots a chunk uses are written (both types
      // are trivially destructible).
      alignas(operation) std::byte batch_storage[chunk * sizeof(operation)];
      alignas(remote_key) std::byte key_storage[chunk * sizeof(remote_key)];
      auto* batch = reinterpret_cast<operation*>(batch_storage);
      auto* keys = reinterpret_cast<remote_key*>(key_storage);
      // Only a provider exported under another name uses these (relabel_in).
      alignas(remote_buffer) std::byte buffer_storage[relabel_buffers * sizeof(remote_buffer)];
      auto* buffers = reinterpret_cast<remote_buffer*>(buffer_storage);
      std::size_t done = 0;
      while (done < count) {
        std::size_t n = count - done < chunk ? count - done : chunk;
        for (std::size_t i = 0; i < n; ++i) ::new (&batch[i]) operation(plugin_abi::from_c(ops[done + i], &keys[i]));
        if (relabeled()) n = relabel_in(batch, keys, ops + done, n, buffers);
        std::size_t went = 0;
        const status s = of(e)->impl.post(std::span<const operation>(batch, n), went);
        if (s != status::ok) {
          *posted = done + went;
          return static_cast<std::int32_t>(s);
        }
        done += n;
        *posted = done;
      }
      return FABRIX_STATUS_OK;
    });
  }
  static std::size_t poll(fabrix_plugin_domain* d, fabrix_completion* out, std::size_t capacity) noexcept {
    return quiet(std::size_t{0},
                 [&] { return of(d)->impl.poll(std::span<completion>(plugin_abi::from_c(out), capacity)); });
  }
  static std::int32_t wait(fabrix_plugin_domain* d, std::int64_t timeout_ms) noexcept {
    return quiet(static_cast<std::int32_t>(FABRIX_STATUS_PROVIDER_ERROR),
                 [&] { return static_cast<std::int32_t>(of(d)->impl.wait(std::chrono::milliseconds(timeout_ms))); });
  }
  static std::uint64_t owner(const fabrix_plugin_domain* d) noexcept {
    return quiet(std::uint64_t{0}, [&] { return of(d)->impl.owner(); });
  }
  static std::uint64_t finished(const fabrix_plugin_endpoint* e) noexcept {
    return quiet(std::uint64_t{0}, [&] { return of(e)->impl.finished(); });
  }
  static std::int32_t import_key(fabrix_plugin_endpoint* e, const fabrix_remote_buffer* rb, fabrix_import_ref* out,
                                 fabrix_error* err) noexcept {
    return guarded(err, [&]() -> std::int32_t {
      auto ref =
          relabeled() ? of(e)->impl.import_key(inner_copy(*rb)) : of(e)->impl.import_key(*plugin_abi::from_c(rb));
      if (!ref) return plugin_abi::fail(err, ref.error());
      *out = fabrix_import_ref{ref->index, ref->generation};
      return FABRIX_STATUS_OK;
    });
  }
  static std::int32_t release_key(fabrix_plugin_endpoint* e, std::uint32_t index, std::uint32_t generation) noexcept {
    return quiet(static_cast<std::int32_t>(FABRIX_STATUS_PROVIDER_ERROR), [&] {
      return static_cast<std::int32_t>(of(e)->impl.release_key(import_ref{index, generation}));
    });
  }
  static void set_default_options(fabrix_plugin_endpoint* e, std::uint8_t options) noexcept {
    quiet(0, [&] {
      of(e)->impl.set_default_options(static_cast<op_options>(options));
      return 0;
    });
  }
  static std::int32_t allocate_memory(fabrix_plugin_domain* d, std::size_t len, std::uint32_t rights,
                                      fabrix_plugin_region** out, fabrix_remote_buffer* remote, void** descriptor,
                                      fabrix_error* err) noexcept {
    return guarded(err, [&]() -> std::int32_t {
      auto r = of(d)->impl.allocate_memory(len, static_cast<access>(rights));
      if (!r) return plugin_abi::fail(err, r.error());
      return hand_out(std::move(*r), out, remote, descriptor, err);
    });
  }
  static std::int32_t check_host_memory(fabrix_plugin_domain* d, const void* addr, std::size_t len,
                                        fabrix_error* err) noexcept {
    return guarded(err, [&]() -> std::int32_t {
      auto c = of(d)->impl.check_host_memory(addr, len);
      if (!c) return plugin_abi::fail(err, c.error());
      return FABRIX_STATUS_OK;
    });
  }

  // P::name as a NUL-terminated string.
  static constexpr auto name_storage = [] {
    std::array<char, P::name.size() + 1> s{};
    for (std::size_t i = 0; i < P::name.size(); ++i) s[i] = P::name[i];
    return s;
  }();

  // The table of ABI version `version` (1 or 2).
  static fabrix_provider_table table(std::int32_t priority, std::uint32_t version) noexcept {
    fabrix_provider_table t{};
    t.size = version >= 2 ? FABRIX_PROVIDER_TABLE_V2_SIZE : FABRIX_PROVIDER_TABLE_V1_SIZE;
    t.abi_version = version >= 2 ? 2 : 1;
    t.name = exported_name;
    t.version = FABRIX_PROVIDER_PLUGIN_VERSION;
    t.priority = priority;
    if constexpr (requires { P::id; })
      static_assert(P::id == provider_id_of(P::name), "a provider's id is provider_id_of(its name)");
    t.wire_id = outer;
    t.open_domain = &open_domain;
    t.close_domain = &close_domain;
    t.describe = &describe;
    t.capabilities = &capabilities;
    t.address = &address;
    t.register_memory = &register_memory;
    t.deregister_memory = &deregister_memory;
    t.connect = &connect;
    t.disconnect = &disconnect;
    t.post = &post;
    t.poll = &poll;
    t.wait = &wait;
    t.owner = &owner;
    t.finished = &finished;
    t.import_key = &import_key;
    t.release_key = &release_key;
    t.set_default_options = &set_default_options;
    if (version >= 2) {
      if constexpr (allocates_memory<P>) t.allocate_memory = &allocate_memory;
      if constexpr (checks_host_memory<P>) t.check_host_memory = &check_host_memory;
    }
    return t;
  }

  // What fabrix_provider_entry returns for a host of ABI version `host`,
  // exporting at most version `exported`.
  static const fabrix_provider_table* entry(std::uint32_t host, std::int32_t priority, std::uint32_t exported,
                                            const char* name = name_storage.data()) noexcept {
    if (host < 1) return nullptr;
    static const bool named = [&] {
      exported_name = name;
      inner = static_cast<std::uint16_t>(provider_id_of(P::name));
      outer = static_cast<std::uint16_t>(provider_id_of(name));
      return true;
    }();
    (void)named;
    static const fabrix_provider_table v1 = table(priority, 1);
    static const fabrix_provider_table v2 = table(priority, 2);
    return host >= 2 && exported >= 2 ? &v2 : &v1;
  }
};

}  // namespace fabrix::detail::plugin_export

// Defines fabrix_provider_entry for provider P, exporting ABI version
// `abi_version` (1 or 2) at most.
#define FABRIX_EXPORT_PROVIDER_VERSION(P, priority, abi_version)                                               \
  extern "C" __attribute__((visibility("default"))) const struct fabrix_provider_table* fabrix_provider_entry( \
      uint32_t host_abi_version) {                                                                             \
    return ::fabrix::detail::plugin_export::exporter<P>::entry(host_abi_version, (priority), (abi_version));   \
  }

// Defines fabrix_provider_entry for provider P at this header's ABI version.
#define FABRIX_EXPORT_PROVIDER(P, priority) FABRIX_EXPORT_PROVIDER_VERSION(P, priority, FABRIX_PROVIDER_ABI_VERSION)

// Defines fabrix_provider_entry for provider P under the provider name
// `name` (a string literal; the file is libfabrix-<name>.so), at this
// header's ABI version: a build of P that lives beside P's own (say a UCX
// provider built against another UCX, as "ucx-next") with its own wire
// number, so that neither takes the other's remote buffers.
#define FABRIX_EXPORT_PROVIDER_AS(P, name, priority)                                                           \
  extern "C" __attribute__((visibility("default"))) const struct fabrix_provider_table* fabrix_provider_entry( \
      uint32_t host_abi_version) {                                                                             \
    return ::fabrix::detail::plugin_export::exporter<P>::entry(host_abi_version, (priority),                   \
                                                               FABRIX_PROVIDER_ABI_VERSION, (name));           \
  }
