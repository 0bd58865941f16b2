// What communicator::create checks before it wires anything: the options
// are usable, every rank passed the same chunk_bytes, slots and kind of
// scratch memory, and the provider can reach that memory.
#pragma once

#include <fabrix/bootstrap.hpp>
#include <fabrix/capabilities.hpp>
#include <fabrix/collectives/device_kernels.hpp>
#include <fabrix/collectives/notify.hpp>
#include <fabrix/collectives/options.hpp>
#include <fabrix/detail/little_endian.hpp>
#include <fabrix/result.hpp>

#include <algorithm>
#include <array>
#include <string>

namespace fabrix::coll::detail {

inline result<void> check_options(const options& o, int ranks) {
  if (o.slots < 2 || o.slots % 2 != 0 || o.slots > (1u << 15))
    return unexpected(status::invalid_argument, "collectives: slots must be even, between 2 and 32768");
  if (o.tag < 1 || o.tag > max_tag) return unexpected(status::invalid_argument, "collectives: tag must be 1..15");
  if (o.chunk_bytes < 8 || o.chunk_bytes % 8 != 0 || o.chunk_bytes > (std::size_t{1} << 30))
    return unexpected(status::invalid_argument, "collectives: chunk_bytes must be a multiple of 8 up to 1 GiB");
  if (ranks > max_ranks) return unexpected(status::invalid_argument, "collectives: at most 1024 ranks");
  return {};
}

// Device scratch needs a provider that registers device memory itself. (A
// device_kernels may also serve host memory: then any provider does.)
inline result<void> check_memory(const options& o, const capabilities& caps, std::string_view provider) {
  if (o.device == nullptr || o.device->location().kind == memory_kind::host) return {};
  if (caps.gpu != gpu_path::direct)
    return unexpected(status::unsupported, "collectives: device memory needs a provider that registers it directly (" +
                                               std::string(provider) + " does not; e.g. cuda_ipc does)");
  return {};
}

// Collective: every rank's chunk_bytes, slots, scratch memory kind,
// zero_copy_min_bytes and tag equal this rank's, and every rank is `ready`
// (false: its completion_router refused the tag; that rank returns its own
// error, the others this one, instead of waiting for it at the next step).
inline result<void> agree(bootstrap& boot, const options& o, bool ready) {
  std::array<std::byte, 23> mine{};
  fabrix::detail::le_writer w(mine.data());
  w.put<std::uint64_t>(o.chunk_bytes);
  w.put<std::uint32_t>(o.slots);
  w.put<std::uint8_t>(o.device == nullptr ? 0 : 1);
  w.put<std::uint64_t>(o.zero_copy_min_bytes);
  w.put<std::uint8_t>(static_cast<std::uint8_t>(o.tag));
  w.put<std::uint8_t>(ready ? 1 : 0);
  auto all = boot.allgather(mine);
  if (!all) return unexpected(std::move(all).error());
  const std::size_t compared = mine.size() - 1;  // all but `ready`
  for (std::size_t r = 0; r < all->size(); ++r) {
    const auto& theirs = (*all)[r];
    if (theirs.size() != mine.size() || !std::equal(mine.begin(), mine.begin() + compared, theirs.begin()))
      return unexpected(status::invalid_argument,
                        "collectives: rank " + std::to_string(r) +
                            " uses other chunk_bytes/slots/scratch memory/zero_copy_min_bytes/tag than this rank");
    if (theirs[compared] != std::byte{1})
      return unexpected(status::invalid_argument, "collectives: rank " + std::to_string(r) + " could not take tag " +
                                                      std::to_string(o.tag) +
                                                      " on its completion_router (another lane there claims it)");
  }
  return {};
}

}  // namespace fabrix::coll::detail
