// The UCX domain's address blob (detail/address_blob.hpp, magic "FBXA"):
// the native address is the ucp worker address.
#pragma once

#include <fabrix/detail/address_blob.hpp>

#include <span>
#include <vector>

namespace fabrix::ucx::detail {

using fabrix::detail::peer_address;
inline constexpr fabrix::detail::address_format address_format{{'F', 'B', 'X', 'A'}, 1, "UCX", "ucx"};

inline std::vector<std::byte> encode_address(const peer_address& a) {
  return fabrix::detail::encode_address(address_format, a);
}
inline result<peer_address> parse_address(std::span<const std::byte> blob) {
  return fabrix::detail::parse_address(address_format, blob);
}

}  // namespace fabrix::ucx::detail
