// Provider kit: the remote_buffer a provider's register_memory hands out,
// before its key and seal. describe_region fills what every provider fills
// alike; the provider then writes its key (key_size, key) and seals the
// value last (remote_buffer::compute_seal with its domain's secret), after
// which no field may change.
#pragma once

#include <fabrix/remote_buffer.hpp>

#include <cstdint>

namespace fabrix::detail {

// `owner`: the exporting domain's random id; `epoch`: the registration's
// number within it (with owner, it names the region).
inline remote_buffer describe_region(provider_id provider, std::uint64_t address, std::uint64_t length,
                                     memory_location where, access rights, std::uint64_t owner,
                                     std::uint64_t epoch) noexcept {
  remote_buffer rb;
  rb.provider = provider;
  rb.rights = rights;
  rb.location = where;
  rb.address = address;
  rb.length = length;
  rb.owner = owner;
  rb.epoch = epoch;
  return rb;
}

}  // namespace fabrix::detail
