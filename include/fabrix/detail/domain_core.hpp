// What a domain<P> shares with the queue pairs and memory regions it made:
// the provider's domain state, kept alive until the last of them is gone,
// and whether the domain itself still exists.
#pragma once

#include <fabrix/concepts.hpp>

#include <cstdint>
#include <optional>
#include <utility>

namespace fabrix::detail {

template <provider P>
struct domain_core {
  explicit domain_core(typename P::domain_impl i) : impl(std::move(i)) {}
  typename P::domain_impl impl;
  bool open = true;                // false once the domain<P> is destroyed
  std::uint32_t next_peer_id = 0;  // what connect() without an id assigns next
  // detail::node_id() (process_identity.hpp), read at the first connect()
  // to a routed peer and kept: it reads /proc and the host name, too much
  // for every connect of a large job.
  std::optional<std::uint64_t> node;
};

}  // namespace fabrix::detail
