// What a malicious member of an ofi job can make: it knows every peer's seal
// secret (the secret travels in the address blobs of the allgather), so it
// can reseal a peer's remote_buffer to claim more than the region. fabrix's
// own checks then pass; what stops the operation must be below them.
#pragma once

#include "harness.hpp"

#include <fabrix/ofi.hpp>

#include <chrono>
#include <cstdint>
#include <span>

namespace fxt {

// How long past the provider's op_timeout an initiator waits for the error
// completion of a forged operation: a bound on a hang, not a timing claim.
// The answer comes at once, or with the op_timeout sweep, which runs from
// polls; a loaded machine running a sanitizer build makes polls slow enough
// that 2 s was once too short (ofi-keys-shm under ASan: no completion in
// op_timeout + 2 s, on a 2-core machine during the rehearsal).
inline constexpr std::chrono::seconds answer_margin{15};

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
