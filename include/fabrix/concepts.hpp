// fabrix::provider — the contract every provider fulfils. A provider is a tag
// type with three implementation types; the core templates (domain<P>,
// queue_pair<P>, memory_region<P>) wrap them, validate arguments and route
// completions, so providers see only well-formed operations.
//
//   P::name, P::id, P::caps           constexpr identity and capabilities
//   P::domain_impl                    device + completion queue + progress
//     static create(const domain_options&) -> result<domain_impl>
//     register_memory(addr, len, memory_location, access) -> result<region_impl>
//     poll(span<completion>) -> size_t   progress, then fill finished ops
//     wait(milliseconds) -> status       block on the provider's event fd
//     address() -> result<vector<byte>>  what a peer passes to connect()
//     connect(span<const byte>, uint32_t peer_id) -> result<endpoint_impl>
//       peer_id: what completions arriving on it carry in completion::peer
//     provider(), owner(), runtime_caps(), describe()
//       owner(): the id its regions carry (remote_buffer::owner, local_slice::owner)
//   P::endpoint_impl                  a connected endpoint to one peer
//     post(span<const operation>, size_t& posted) -> status
//       operations arrive validated (ranges, rights, alignment, provider and
//       domain of every local slice);
//       on status::again or an error, `posted` says how many went out.
//       The options each operation takes are detail::options_of(o, defaults)
//       (validate.hpp): unsignaled (no completion on success, counted in
//       finished(); an error still completes with the token), delivered
//       (completion_level::delivered), fence (starts after every earlier
//       operation of this endpoint is complete at the target).
//     set_default_options(op_options)   the queue pair's defaults, for options_of
//     finished() const -> uint64_t      unsignaled operations finished so far
//       (ok or failed); all posted before a flush, once that flush completes
//     import_key(const remote_buffer&) -> result<import_ref>
//       checks once what an operation on a remote_buffer would (made by this
//       endpoint's peer, seal verifies; invalid_argument otherwise), resolves
//       the provider's key and keeps it in an import table
//       (detail/import_table.hpp); operations then name it by
//       remote_slice::key, whose ref the provider looks up per operation
//       (the core has checked importer, range and rights)
//     release_key(import_ref) -> status  ok, or invalid_argument when the ref
//       names no live entry; operations posted before it still complete
//   P::region_impl                    a registration
//     remote() -> const remote_buffer&, descriptor() -> void*
//
// Lifetime: a domain outlives its endpoints and regions. Threading: one
// domain and everything made from it is used by one thread at a time.
#pragma once

#include <fabrix/capabilities.hpp>
#include <fabrix/completion.hpp>
#include <fabrix/domain_options.hpp>
#include <fabrix/memory.hpp>
#include <fabrix/operation.hpp>
#include <fabrix/remote_buffer.hpp>
#include <fabrix/remote_key.hpp>
#include <fabrix/result.hpp>

#include <chrono>
#include <concepts>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fabrix {

// (clang-format 14 mangles requires-expressions)
// clang-format off
template <class P>
concept provider =
    requires {
      { P::name } -> std::convertible_to<std::string_view>;
      { P::caps } -> std::convertible_to<capabilities>;
      typename P::domain_impl;
      typename P::endpoint_impl;
      typename P::region_impl;
    } &&
    std::movable<typename P::domain_impl> && std::movable<typename P::endpoint_impl> &&
    std::movable<typename P::region_impl> &&
    requires(typename P::domain_impl& d, const typename P::domain_impl& cd, typename P::endpoint_impl& e,
             const typename P::region_impl& r, std::span<completion> out, std::span<const operation> ops,
             std::size_t& posted, void* addr, std::size_t len, memory_location loc, access rights,
             std::span<const std::byte> peer, std::uint32_t peer_id, const domain_options& opts,
             std::chrono::milliseconds timeout, op_options defaults, const typename P::endpoint_impl& ce,
             const remote_buffer& rb, import_ref ref) {
      { P::domain_impl::create(opts) } -> std::same_as<result<typename P::domain_impl>>;
      { d.register_memory(addr, len, loc, rights) } -> std::same_as<result<typename P::region_impl>>;
      { d.poll(out) } -> std::same_as<std::size_t>;
      { d.wait(timeout) } -> std::same_as<status>;
      { cd.address() } -> std::same_as<result<std::vector<std::byte>>>;
      { d.connect(peer, peer_id) } -> std::same_as<result<typename P::endpoint_impl>>;
      { cd.provider() } -> std::same_as<provider_id>;
      { cd.owner() } -> std::same_as<std::uint64_t>;
      { cd.runtime_caps() } -> std::same_as<capabilities>;
      { cd.describe() } -> std::convertible_to<std::string>;
      { e.post(ops, posted) } -> std::same_as<status>;
      { e.set_default_options(defaults) } -> std::same_as<void>;
      { ce.finished() } -> std::same_as<std::uint64_t>;
      { e.import_key(rb) } -> std::same_as<result<import_ref>>;
      { e.release_key(ref) } -> std::same_as<status>;
      { r.remote() } -> std::same_as<const remote_buffer&>;
      { r.descriptor() } -> std::same_as<void*>;
    };

// Optional: the provider allocates registered host memory itself
//   allocate_memory(len, access) -> result<region_impl>
// (fabrix::ucx: ucp_mem_map with ALLOCATE, which may place it in a
// shared-memory segment that peers on the node write with plain copies).
// Holding it says the call exists, not that it succeeds: fabrix::any_provider
// has it and returns status::unsupported when its chosen provider lacks it.
template <class P>
concept allocates_memory = provider<P> && requires(typename P::domain_impl& d, std::size_t len, access rights) {
  { d.allocate_memory(len, rights) } -> std::same_as<result<typename P::region_impl>>;
};

// Optional provider entry:
//   check_host_memory(addr, len) -> result<void>
// A provider that knows memory the core cannot recognise (cuda_ipc and the
// staged adapter: CUDA device memory, whose addresses the process maps
// without access) refuses a registration that calls such memory host
// memory, with a message that says what it is. domain::register_memory asks
// it first, before its own check of the process's mappings (which would
// only say "not readable").
template <class P>
concept checks_host_memory = provider<P> && requires(typename P::domain_impl& d, const void* addr, std::size_t len) {
  { d.check_host_memory(addr, len) } -> std::same_as<result<void>>;
};

// Optional provider entry:
//   device_pci() const -> std::optional<std::string>
// The PCI function ("0000:3b:00.0") of the network device the domain uses,
// where it uses one that sits on PCI (read from sysfs, or FABRIX_SYSFS:
// detail/topology.hpp), so that a program can tell how far its NIC is from
// its GPU whatever the provider; nullopt where the domain uses several
// devices on different functions (UCX without UCX_NET_DEVICES), devices on
// none (loopback, veths, soft-RoCE) or cannot tell. domain::device_pci()
// is nullopt for a provider without it.
template <class P>
concept reports_device_pci = provider<P> && requires(const typename P::domain_impl& d) {
  { d.device_pci() } -> std::same_as<std::optional<std::string>>;
};
// clang-format on

}  // namespace fabrix
