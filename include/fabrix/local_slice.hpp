// fabrix::local_slice — a byte range of one of this process's registrations,
// as taken from memory_region::slice(). Plain value; valid while its region is.
#pragma once

#include <fabrix/capabilities.hpp>
#include <fabrix/memory.hpp>

#include <cstddef>
#include <cstdint>

namespace fabrix {

struct local_slice {
  std::byte* address = nullptr;
  std::uint64_t length = 0;
  void* descriptor = nullptr;  // the provider's local handle for the region (opaque here)
  provider_id provider = provider_id::none;
  std::uint64_t owner = 0;  // the registering domain (remote_buffer::owner); providers refuse others'
  memory_location location{};
  // False when slice() was asked for a range outside its region; posting an
  // operation with such a slice returns status::out_of_range.
  bool valid = false;
};

}  // namespace fabrix
