// What a malicious member of an ofi job can make: it knows every peer's seal
// secret (the secret travels in the address blobs of the allgather), so it
// can reseal a peer's remote_buffer to claim more than the region. fabrix's
// own checks then pass; what stops the operation must be below them.
#pragma once

#include "harness.hpp"

#include <fabrix/ofi.hpp>

#include <cstdint>
#include <span>

namespace fxt {

// `rb` (from the peer whose address blob is `owner_address`) resealed to
// claim `length` bytes.
inline fabrix::remote_buffer reseal_longer(fabrix::remote_buffer rb, std::span<const std::byte> owner_address,
                                           std::uint64_t length) {
  const auto owner = fabrix::ofi::detail::parse_address(owner_address);
  FX_CHECK(owner.has_value());
  rb.length = length;
  if (owner) rb.seal = rb.compute_seal(owner->secret);
  return rb;
}

}  // namespace fxt
