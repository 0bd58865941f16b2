// Which provider a value belongs to, and what a provider can do.
#pragma once

#include <cstdint>
#include <string_view>

namespace fabrix {

// Stable numbers: they travel inside encoded remote_buffers.
enum class provider_id : std::uint16_t {
  none = 0,
  ucx = 1,
  verbs = 2,
  ofi = 3,
  cuda_ipc = 4,
};

constexpr std::string_view to_string(provider_id p) noexcept {
  switch (p) {
    case provider_id::none: return "none";
    case provider_id::ucx: return "ucx";
    case provider_id::verbs: return "verbs";
    case provider_id::ofi: return "ofi";
    case provider_id::cuda_ipc: return "cuda_ipc";
  }
  return "unknown";
}

constexpr bool is_known(provider_id p) noexcept {
  return p == provider_id::ucx || p == provider_id::verbs || p == provider_id::ofi || p == provider_id::cuda_ipc;
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
