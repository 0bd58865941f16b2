// fabrix::domain<P> — one device/context, its completion queue and its
// progress. Factories return result<>; nothing here throws.
//
// Progress: the library starts no threads. poll() drives the provider and
// returns finished operations; wait() blocks on the provider's event fd until
// something may be ready (or the timeout), without spinning. Providers whose
// one-sided operations need the target's help (P::caps.needs_target_progress,
// e.g. UCX over tcp) complete them only while the target polls or waits.
//
// Lifetime: the domain outlives its queue pairs and memory regions.
// Threading: one thread at a time per domain (and what it made).
#pragma once

#include <fabrix/concepts.hpp>
#include <fabrix/detail/awaiter.hpp>
#include <fabrix/domain_options.hpp>
#include <fabrix/memory_region.hpp>
#include <fabrix/queue_pair.hpp>

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace fabrix {

template <provider P>
class domain {
 public:
  using provider_type = P;

  static result<domain> create(const domain_options& opts = {}) {
    auto impl = P::domain_impl::create(opts);
    if (!impl) return unexpected(std::move(impl).error());
    return domain(std::move(*impl));
  }

  // Registers [addr, addr+len) holding memory of `where`. Refuses an empty
  // or null range, unknown access bits, and memory the provider cannot
  // reach (status::unsupported).
  result<memory_region<P>> register_memory(void* addr, std::size_t len, memory_location where, access rights) {
    if (addr == nullptr || len == 0)
      return unexpected(status::invalid_argument, "register_memory: empty or null buffer");
    if (!is_known(rights)) return unexpected(status::invalid_argument, "register_memory: unknown access bits");
    auto r = impl_.register_memory(addr, len, where, rights);
    if (!r) return unexpected(std::move(r).error());
    return memory_region<P>(std::move(*r));
  }
  // Host memory.
  result<memory_region<P>> register_memory(std::span<std::byte> buf, access rights) {
    return register_memory(buf.data(), buf.size(), memory_location{}, rights);
  }

  // `len` bytes of host memory allocated and registered by the provider
  // (allocates_memory<P>), freed when the region is destroyed; use
  // memory_region::data(). Where peers on the same node can map it, their
  // writes into it are plain copies instead of system calls or emulation
  // (UCX over shared memory).
  result<memory_region<P>> allocate_memory(std::size_t len, access rights) requires allocates_memory<P> {
    if (len == 0) return unexpected(status::invalid_argument, "allocate_memory: empty length");
    if (!is_known(rights)) return unexpected(status::invalid_argument, "allocate_memory: unknown access bits");
    auto r = impl_.allocate_memory(len, rights);
    if (!r) return unexpected(std::move(r).error());
    return memory_region<P>(std::move(*r));
  }

  // Drives progress and returns how many entries of `out` it filled.
  // Completions of awaited operations resume their coroutines here, on this
  // thread, and are not returned.
  std::size_t poll(std::span<completion> out) { return detail::route_completions(out.data(), impl_.poll(out)); }
  // Blocks until a completion may be ready (ok) or `timeout` passes
  // (timed_out). Call poll() afterwards.
  status wait(std::chrono::milliseconds timeout) { return impl_.wait(timeout); }

  // This domain's address blob; a peer passes it to its connect().
  result<std::vector<std::byte>> address() const { return impl_.address(); }
  result<queue_pair<P>> connect(std::span<const std::byte> peer_address) {
    auto e = impl_.connect(peer_address);
    if (!e) return unexpected(std::move(e).error());
    return queue_pair<P>(std::move(*e), impl_.provider(), impl_.owner(), impl_.runtime_caps());
  }

  provider_id provider() const noexcept { return impl_.provider(); }
  capabilities caps() const noexcept { return impl_.runtime_caps(); }
  // One line: provider, transport, device — for logs and perf headers.
  std::string describe() const { return impl_.describe(); }

  typename P::domain_impl& native() noexcept { return impl_; }

 private:
  explicit domain(typename P::domain_impl impl) : impl_(std::move(impl)) {}
  typename P::domain_impl impl_;
};

}  // namespace fabrix
