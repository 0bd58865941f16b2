// One provider's queue pair to a peer that is a routed domain (routed.hpp),
// so that a program on one provider (fabrix::ucx, open("ucx")) and one on
// fabrix::routed (open("auto")) reach each other. domain::connect takes the
// peer's routed address blob, picks its entry of this domain's provider and
// connects to that; the queue pair then takes the peer's routed
// remote_buffers by their entry of that provider domain, checked by the
// routed seal first and by the provider's own seal as any of its buffers.
// The other way round, a routed domain connects to a plain provider's
// address blob itself (routed.hpp) and adopts that peer's buffers
// (queue_pair::adopt, routed_endpoint::adopt_remote).
#pragma once

#include <fabrix/detail/process_identity.hpp>
#include <fabrix/registry.hpp>
#include <fabrix/remote_buffer.hpp>
#include <fabrix/routed/address.hpp>
#include <fabrix/routed/key.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace fabrix::detail {

// fabrix::routed<...>::id, known to the core without routed.hpp.
inline constexpr provider_id routed_provider_id = provider_id_of("routed");

struct routed_peer {
  std::uint64_t nonce = 0;  // the routed domain's: the owner of its remote_buffers
  seal_key secret{};        // seals its remote_buffers
  std::uint8_t entry = 0;   // the entry of its address blob (and of its keys) connected to
};

inline bool is_routed_address(std::span<const std::byte> blob) noexcept {
  return blob.size() >= 4 && std::memcmp(blob.data(), "FXRT", 4) == 0;
}

// The entry of `a` that a domain of provider `self`, on node `self_node`
// (node_id()), connects to: of the node route for a peer on this node
// (else of the net route), rail 0; else any of that provider. -1 where `a`
// has none of that provider.
inline int routed_entry_for(const routed_address& a, provider_id self, std::uint64_t self_node) {
  const auto host_class = a.node == self_node ? route_class::node : route_class::net;
  const auto bit = static_cast<std::uint8_t>(1u << static_cast<unsigned>(host_class));
  int any = -1;
  for (std::size_t j = 0; j < a.subs.size(); ++j) {
    const routed_sub_address& s = a.subs[j];
    if (s.provider != self) continue;
    if ((s.classes & bit) != 0 && s.rail == 0) return static_cast<int>(j);
    if (any < 0) any = static_cast<int>(j);
  }
  return any;
}

// `rb` as the remote_buffer of entry `p.entry`, where `rb` is the routed
// peer's (its owner, its seal intact) and has that entry; else false.
inline bool routed_entry_buffer(const routed_peer& p, const remote_buffer& rb, remote_buffer& out) noexcept {
  return rb.provider == routed_provider_id && rb.owner == p.nonce && rb.seal == rb.compute_seal(p.secret) &&
         routed_sub_buffer(rb, p.entry, out);
}

}  // namespace fabrix::detail
