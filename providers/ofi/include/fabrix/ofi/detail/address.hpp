// The libfabric domain's address blob (detail/address_blob.hpp, magic
// "FBXF"): the native address is the endpoint name from fi_getname, at most
// max_name_size bytes.
#pragma once

#include <fabrix/detail/address_blob.hpp>

#include <span>
#include <vector>

namespace fabrix::ofi::detail {

using fabrix::detail::peer_address;
inline constexpr std::size_t max_name_size = 4096;
inline constexpr fabrix::detail::address_format address_format{
    {'F', 'B', 'X', 'F'}, 1, "libfabric", "ofi", max_name_size};

inline std::vector<std::byte> encode_address(const peer_address& a) {
  return fabrix::detail::encode_address(address_format, a);
}
inline result<peer_address> parse_address(std::span<const std::byte> blob) {
  return fabrix::detail::parse_address(address_format, blob);
}

}  // namespace fabrix::ofi::detail
