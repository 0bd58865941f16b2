// fabrix::local_slice — a byte range of one of this process's registrations,
// as taken from memory_region::slice(). Plain value; valid while its region is.
#pragma once

#include <fabrix/memory.hpp>

#include <cstddef>
#include <cstdint>

namespace fabrix {

struct local_slice {
  std::byte* address = nullptr;
  std::uint64_t length = 0;
  void* descriptor = nullptr;  // the provider's local handle for the region (opaque here)
  // The registering domain's id (remote_buffer::owner: random, never 0),
  // fixed by slice() once its range is checked; 0 when slice() was asked for
  // a range outside its region. A queue pair takes slices of its own domain
  // only, so one compare per slice checks both (posting a slice with owner 0
  // returns status::out_of_range, another domain's status::invalid_argument).
  std::uint64_t owner = 0;
  memory_location location{};

  bool valid() const noexcept { return owner != 0; }
};

}  // namespace fabrix
