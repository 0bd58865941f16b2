// Memory a communicator allocates and registers itself: its scratch
// (mesh.hpp) and the buffers of communicator::allocate_memory.
//
// Host memory comes from the provider where it allocates
// (allocates_memory<P>): UCX places it in shared memory that the peers on
// this node map, so a chunk written into it is one copy, where UCX emulates
// a write into other memory with active messages (copied into and out of its
// FIFO, 8 KiB at a time). Otherwise, or when the provider's allocation
// fails, it is host memory (or the device kernels' memory) allocated here
// and registered.
//
// Lifetime: the region is deregistered before the memory under it is freed
// (member order). The domain outlives it.
#pragma once

#include <fabrix/collectives/device_kernels.hpp>
#include <fabrix/collectives/scratch.hpp>
#include <fabrix/domain.hpp>

#include <cstddef>
#include <utility>

namespace fabrix::coll::detail {

template <provider P>
struct owned_region {
  scratch_memory memory;  // empty when the provider allocated the region
  memory_region<P> region;
  bool from_provider = false;  // domain::allocate_memory made it
};

// `bytes` of host memory, or of `device`'s memory when it is not null,
// registered with `dom` for remote writes.
template <provider P>
result<owned_region<P>> allocate_registered(domain<P>& dom, std::size_t bytes, device_kernels* device) {
  if constexpr (allocates_memory<P>) {
    if (device == nullptr)
      if (auto mr = dom.allocate_memory(bytes, access::remote_write))
        return owned_region<P>{scratch_memory{}, std::move(*mr), true};
  }
  auto m = scratch_memory::create(bytes, device);
  if (!m) return unexpected(std::move(m).error());
  auto mr = dom.register_memory(m->data(), bytes, m->location(), access::remote_write);
  if (!mr) return unexpected(std::move(mr).error());
  return owned_region<P>{std::move(*m), std::move(*mr), false};
}

}  // namespace fabrix::coll::detail
