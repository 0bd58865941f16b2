// A domain's random identity, drawn once when it opens: its nonce (the
// `owner` of its remote_buffers and local slices) and the secret that seals
// its remote_buffers. Every provider draws both here.
#pragma once

#include <fabrix/detail/siphash.hpp>

#include <cstdint>
#include <random>

namespace fabrix::detail {

struct domain_identity {
  std::uint64_t nonce = 0;
  seal_key secret{};
};

// Never a nonce of 0: a local_slice with owner 0 is one that slice() refused
// (local_slice.hpp). Bits in `reserved` are clear (ofi keeps one for its tags).
inline domain_identity draw_domain_identity(std::uint64_t reserved = 0) {
  std::random_device rd;
  domain_identity id;
  do id.nonce = ((static_cast<std::uint64_t>(rd()) << 32) ^ rd()) & ~reserved;
  while (id.nonce == 0);
  for (auto& b : id.secret) b = static_cast<std::uint8_t>(rd());
  return id;
}

}  // namespace fabrix::detail
