// The CUDA IPC provider: one-sided operations between GPUs (and processes)
// of one node, by copy engines and a small atomic kernel. Including this
// header registers "cuda_ipc" with fabrix::open() as well (at a low
// priority: open("auto") prefers network providers, which also reach host
// memory; ask for "cuda_ipc" by name).
//
//   auto dom = fabrix::cuda_ipc::domain::create({.device = "0"}).value();
//   auto buf = fabrix::cuda::device_buffer::create(1 << 20).value();
//   auto mr  = dom.register_memory(buf.data(), buf.size(), buf.location(), fabrix::access::remote_write).value();
//
// Regions with remote rights must be CUDA device memory (cudaMalloc, or
// cuMemCreate with the POSIX fd handle type). See cuda/README.md.
//
// Stable: this header and <fabrix/cuda/ipc/native.hpp> (the native objects
// native() hands out). Everything under fabrix/cuda/ipc/detail/ is
// internal and may change in any release.
#pragma once

#include <fabrix/any_provider.hpp>
#include <fabrix/cuda/device_buffer.hpp>
#include <fabrix/cuda/ipc/detail/domain.hpp>
#include <fabrix/cuda/ipc/native.hpp>
#include <fabrix/domain.hpp>

namespace fabrix::cuda_ipc {

struct provider {
  static constexpr std::string_view name = "cuda_ipc";
  static constexpr provider_id id = provider_id::cuda_ipc;
  static constexpr capabilities caps = cuda::ipc::detail::cuda_ipc_caps;
  using domain_impl = cuda::ipc::detail::domain_impl;
  using endpoint_impl = cuda::ipc::detail::endpoint_impl;
  using region_impl = cuda::ipc::detail::region_impl;
};

static_assert(fabrix::provider<provider>);

using domain = fabrix::domain<provider>;
using queue_pair = fabrix::queue_pair<provider>;
using memory_region = fabrix::memory_region<provider>;

namespace detail {
inline const bool registered = fabrix::detail::register_provider<cuda_ipc::provider>(10);
}

}  // namespace fabrix::cuda_ipc
