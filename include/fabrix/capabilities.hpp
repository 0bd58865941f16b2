// Which provider a value belongs to, and what a provider can do.
#pragma once

#include <fabrix/detail/wire_names.hpp>

#include <cstdint>
#include <string_view>

namespace fabrix {

// Which provider made a value; travels inside encoded remote_buffers, so the
// number must be the same in every process of a job. The built-in providers
// have fixed numbers (below); any other provider's number is
// provider_id_of(its name), a hash of the name that every process computes
// alike, and registry.hpp maps numbers back to the names this process knows
// (register_provider_name). So the set is open: a provider written outside
// this tree, header-only or a run-time plugin, gets its number from its name.
enum class provider_id : std::uint16_t {
  none = 0,
  ucx = 1,
  verbs = 2,
  ofi = 3,
  cuda_ipc = 4,
};

// Numbers below this one are reserved for built-in providers.
inline constexpr std::uint16_t first_hashed_provider_id = 0x100;

namespace detail {
inline constexpr wire_name builtin_provider_names[] = {
    {static_cast<std::uint16_t>(provider_id::ucx), "ucx"},
    {static_cast<std::uint16_t>(provider_id::verbs), "verbs"},
    {static_cast<std::uint16_t>(provider_id::ofi), "ofi"},
    {static_cast<std::uint16_t>(provider_id::cuda_ipc), "cuda_ipc"},
};
}  // namespace detail

// The wire number of the provider called `name` ("none" for an empty name).
// Two names may share a number (a 16-bit hash); register_provider_name()
// refuses the second one in a process, so a job cannot confuse them.
constexpr provider_id provider_id_of(std::string_view name) noexcept {
  if (name.empty()) return provider_id::none;
  return static_cast<provider_id>(
      detail::wire_number_of(detail::builtin_provider_names, first_hashed_provider_id, 0x10000, name));
}

// How a provider reaches GPU memory.
enum class gpu_path : std::uint8_t {
  none,    // cuda_device registrations are refused with status::unsupported
  staged,  // through pinned host bounce buffers
  direct,  // the NIC / copy engine touches device memory itself
};

constexpr std::string_view to_string(gpu_path p) noexcept {
  switch (p) {
    case gpu_path::none: return "none";
    case gpu_path::staged: return "staged";
    case gpu_path::direct: return "direct";
  }
  return "unknown";
}

// What a provider can do. For a static provider these are compile-time
// constants (P::caps) and an unsupported operation is a static_assert; for
// any_provider they are known at run time only and the operation returns
// status::unsupported.
struct capabilities {
  bool rma = true;             // write, read
  bool write_with_imm = true;  // write + 32-bit notification after the data
  bool atomics = true;         // 8-byte fetch_add, compare_swap
  bool send_recv = true;       // small two-sided messages
  gpu_path gpu = gpu_path::none;
  std::uint32_t max_sge = 16;          // local slices per write/read
  bool needs_target_progress = false;  // one-sided ops complete only while the target polls
};

}  // namespace fabrix
