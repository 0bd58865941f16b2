// How a provider reaches cuda_device memory, decided once per domain, and
// the one refusal every provider gives when it cannot: never a silent wrong
// answer. Needs no CUDA headers, so every provider can include it.
//
//   gpu_path p = fabrix::cuda::choose_gpu_path(dmabuf_ok, staging_ok);
//   caps.gpu = p;                                       // the capability report
//   if (where.kind == memory_kind::cuda_device && p == gpu_path::none)
//     return fabrix::cuda::refuse_device_memory("verbs", "no dma-buf support and no CUDA runtime");
#pragma once

#include <fabrix/capabilities.hpp>
#include <fabrix/result.hpp>

#include <string>
#include <string_view>

namespace fabrix::cuda {

// direct when the transport touches device memory itself (dma-buf, peer
// memory, FI_HMEM, CUDA IPC); staged when it can only move host memory but a
// CUDA runtime is there to copy through pinned bounce buffers; none otherwise.
constexpr gpu_path choose_gpu_path(bool native, bool staging_available) noexcept {
  return native ? gpu_path::direct : staging_available ? gpu_path::staged : gpu_path::none;
}

using fabrix::to_string;  // gpu_path's, in capabilities.hpp

inline unexpected refuse_device_memory(std::string_view provider, std::string_view why) {
  return unexpected(status::unsupported,
                    std::string("cannot register cuda_device memory: ") + std::string(why) +
                        " (neither a direct GPU path nor staging through host memory is available)",
                    std::string(provider));
}

}  // namespace fabrix::cuda
