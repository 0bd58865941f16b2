// fabrix::domain<P> — one device/context, its completion queue and its
// progress. Factories return result<>; nothing here throws.
//
// Progress: the library starts no threads. poll() drives the provider and
// returns finished operations; wait() blocks on the provider's event fd until
// something may be ready (or the timeout), without spinning. Providers whose
// one-sided operations need the target's help (P::caps.needs_target_progress,
// e.g. UCX over tcp) complete them only while the target polls or waits.
//
// Lifetime: the provider's state lives until the domain and every queue
// pair and memory region made from it are gone, so destroying the domain
// first is safe: its queue pairs then refuse every post with
// status::invalid_argument (no completion can be polled any more), and
// their destructors and the regions' still release what they hold.
// Threading: one thread at a time per domain (and what it made).
#pragma once

#include <fabrix/concepts.hpp>
#include <fabrix/detail/awaiter.hpp>
#include <fabrix/detail/domain_core.hpp>
#include <fabrix/detail/host_range.hpp>
#include <fabrix/detail/provider_impl.hpp>
#include <fabrix/detail/routed_peer.hpp>
#include <fabrix/domain_options.hpp>
#include <fabrix/memory_region.hpp>
#include <fabrix/queue_pair.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <memory>
#include <optional>
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
    return domain(std::make_shared<detail::domain_core<P>>(std::move(*impl)));
  }

  domain(domain&& other) noexcept = default;
  domain& operator=(domain&& other) noexcept {
    if (this != &other) {
      close();
      core_ = std::move(other.core_);
    }
    return *this;
  }
  domain(const domain&) = delete;
  domain& operator=(const domain&) = delete;
  ~domain() { close(); }

  // Registers [addr, addr+len) holding memory of `where`. Refuses an empty
  // or null range, unknown access bits, and memory the provider cannot
  // reach (status::unsupported). Host memory is checked against this
  // process's mappings: a range that is not wholly mapped or overflows is
  // invalid_argument, read-only memory asked for remote_write or
  // remote_atomic is access_denied; the message names the reason.
  result<memory_region<P>> register_memory(void* addr, std::size_t len, memory_location where, access rights) {
    if (addr == nullptr || len == 0)
      return unexpected(status::invalid_argument, "register_memory: empty or null buffer");
    if (!is_known(rights)) return unexpected(status::invalid_argument, "register_memory: unknown access bits");
    if (where.kind == memory_kind::host) {
      if constexpr (checks_host_memory<P>) {
        if (auto c = impl().check_host_memory(addr, len); !c) return unexpected(c.error());
      }
      auto v = detail::check_host_range(addr, len, rights);
      if (v.status != status::ok) return unexpected(v.status, "register_memory: " + v.why);
    }
    auto r = impl().register_memory(addr, len, where, rights);
    if (!r) return unexpected(std::move(r).error());
    return memory_region<P>(std::move(*r), core_);
  }
  // Host memory.
  result<memory_region<P>> register_memory(std::span<std::byte> buf, access rights) {
    return register_memory(buf.data(), buf.size(), memory_location{}, rights);
  }

  // `len` bytes of host memory allocated and registered by the provider
  // (allocates_memory<P>), freed when the region is destroyed; use
  // memory_region::data(). Where peers on the same node can map it, their
  // writes into it are plain copies instead of system calls or emulation
  // (UCX over shared memory). fabrix::any_provider satisfies
  // allocates_memory too: there the chosen provider decides at run time,
  // and one that does not allocate returns status::unsupported — so code
  // that tests allocates_memory<P> must still handle that error.
  result<memory_region<P>> allocate_memory(std::size_t len, access rights) requires allocates_memory<P> {
    if (len == 0) return unexpected(status::invalid_argument, "allocate_memory: empty length");
    if (!is_known(rights)) return unexpected(status::invalid_argument, "allocate_memory: unknown access bits");
    auto r = impl().allocate_memory(len, rights);
    if (!r) return unexpected(std::move(r).error());
    return memory_region<P>(std::move(*r), core_);
  }

  // Drives progress and returns how many entries of `out` it filled.
  // Completions of awaited operations resume their coroutines here, on this
  // thread, and are not returned.
  std::size_t poll(std::span<completion> out) { return detail::route_completions(out.data(), impl().poll(out)); }
  // Blocks until a completion may be ready (ok) or `timeout` passes
  // (timed_out). Call poll() afterwards. A negative timeout is 0; one longer
  // than max_wait (about 24 days, what poll(2) takes) waits max_wait, so
  // `wait(milliseconds::max())` in a loop blocks instead of spinning.
  static constexpr std::chrono::milliseconds max_wait{INT_MAX};
  status wait(std::chrono::milliseconds timeout) {
    return impl().wait(std::clamp(timeout, std::chrono::milliseconds::zero(), max_wait));
  }

  // This domain's address blob; a peer passes it to its connect().
  result<std::vector<std::byte>> address() const { return impl().address(); }
  // A queue pair to the peer whose address() is `peer_address`. Its
  // peer_id() (what completions from it carry in completion::peer) is
  // `peer_id`, or, without it, the number of queue pairs this domain made
  // before (0, 1, 2, ...).
  result<queue_pair<P>> connect(std::span<const std::byte> peer_address) {
    return connect(peer_address, core_->next_peer_id);
  }
  // A peer that is a routed domain (routed.hpp) is reached through its
  // provider domain of this domain's provider (detail/routed_peer.hpp);
  // invalid_argument where it has none.
  result<queue_pair<P>> connect(std::span<const std::byte> peer_address, std::uint32_t peer_id) {
    std::unique_ptr<detail::routed_peer> routed;
    if (detail::is_routed_address(peer_address) && provider() != detail::routed_provider_id) {
      auto a = detail::decode_routed_address(peer_address);
      if (!a) return unexpected(std::move(a).error());
      if (!core_->node) core_->node = detail::node_id();
      const int j = detail::routed_entry_for(*a, provider(), *core_->node);
      if (j < 0) {
        std::string theirs;
        for (const auto& s : a->subs) theirs += (theirs.empty() ? "" : ", ") + std::string(to_string(s.provider));
        return unexpected(status::invalid_argument,
                          "connect: the peer is a routed domain over " + theirs + ", none of them " +
                              std::string(to_string(provider())) + ", this domain's provider",
                          std::string(to_string(provider())));
      }
      routed =
          std::make_unique<detail::routed_peer>(detail::routed_peer{a->nonce, a->secret, static_cast<std::uint8_t>(j)});
      peer_address = a->subs[static_cast<std::size_t>(j)].blob;  // points into peer_address
    }
    auto e = impl().connect(peer_address, peer_id);
    if (!e) return unexpected(std::move(e).error());
    ++core_->next_peer_id;
    return queue_pair<P>(std::move(*e), core_, peer_id, std::move(routed));
  }

  provider_id provider() const noexcept { return impl().provider(); }
  capabilities caps() const noexcept { return impl().runtime_caps(); }
  // One line: provider, transport, device — for logs and perf headers.
  std::string describe() const { return impl().describe(); }
  // The PCI function of the network device this domain uses, where the
  // provider reports one (concepts.hpp, reports_device_pci): compare it
  // with a GPU's to see how close they sit (fabrix-info gpus).
  std::optional<std::string> device_pci() const {
    if constexpr (reports_device_pci<P>)
      return impl().device_pci();
    else
      return std::nullopt;
  }

  // The provider's native objects (P's documented handle, e.g. the UCP
  // context and worker of a fabrix::ucx domain: fabrix/<provider>/native.hpp)
  // for calls fabrix does not make. They stay fabrix's, valid while this
  // object lives; native.hpp says what may be done with them. Only where the
  // provider documents one (not any_provider).
  auto native() const noexcept requires detail::has_native_handle<typename P::domain_impl> { return impl().native(); }

 private:
  friend struct detail::impl_access;
  explicit domain(std::shared_ptr<detail::domain_core<P>> core) : core_(std::move(core)) {}
  typename P::domain_impl& impl() const noexcept { return core_->impl; }
  void close() noexcept {
    if (core_) core_->open = false;
  }

  std::shared_ptr<detail::domain_core<P>> core_;
};

}  // namespace fabrix
