// What a domain<P> shares with the queue pairs and memory regions it made:
// the provider's domain state, kept alive until the last of them is gone,
// and whether the domain itself still exists.
#pragma once

#include <fabrix/concepts.hpp>

#include <cstdint>
#include <utility>

namespace fabrix::detail {

template <provider P>
struct domain_core {
  explicit domain_core(typename P::domain_impl i) : impl(std::move(i)) {}
  typename P::domain_impl impl;
  bool open = true;                // false once the domain<P> is destroyed
  std::uint32_t next_peer_id = 0;  // what connect() without an id assigns next
};

}  // namespace fabrix::detail
