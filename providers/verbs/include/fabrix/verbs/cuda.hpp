// Opt-in: lets the verbs provider register cuda_device memory natively.
// Include it (once is enough, anywhere in the program) and build with both
// fabrix-verbs and fabrix-cuda; the verbs provider itself never depends on
// CUDA. It installs the CUDA backend of device_memory.hpp before main():
//   - dma-buf fds from fabrix::cuda::export_dmabuf (cuMemGetHandleForAddressRange)
//     for ibv_reg_dmabuf_mr;
//   - fabrix::cuda::query_pointer to confirm device memory before the
//     peer-memory fallback (plain ibv_reg_mr);
//   - a probe at domain creation: a 2 MiB buffer on the current CUDA device
//     registered the same way, so domain.caps().gpu is direct only when
//     registration works there (and describe() says which way, or why not).
// The probe initializes CUDA in the process that creates the domain.
#pragma once

#include <fabrix/cuda/device_buffer.hpp>
#include <fabrix/cuda/dmabuf.hpp>
#include <fabrix/cuda/pointer.hpp>
#include <fabrix/verbs.hpp>
#include <fabrix/verbs/detail/device_memory.hpp>

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

namespace fabrix::verbs::cuda_backend {

inline int export_dmabuf(const void* ptr, std::size_t len, std::uint64_t* offset, std::string* why) {
  auto r = fabrix::cuda::export_dmabuf(ptr, len);
  if (!r) {
    *why = r.error().message;
    return -1;
  }
  *offset = r->offset;
  return std::exchange(r->fd, -1);  // the caller closes it
}

inline bool is_device_memory(const void* ptr) {
  auto info = fabrix::cuda::query_pointer(ptr);
  return info && info->location.kind == memory_kind::cuda_device;
}

inline gpu_registration probe(ibv_pd* pd, std::string* why);

inline const device_memory_hooks hooks{"CUDA", &export_dmabuf, &is_device_memory, &probe};

inline gpu_registration probe(ibv_pd* pd, std::string* why) {
  int count = 0, device = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    *why = std::string("no CUDA device (") + (e != cudaSuccess ? cudaGetErrorString(e) : "none found") + ")";
    return gpu_registration::none;
  }
  (void)cudaGetDevice(&device);
  auto buf = fabrix::cuda::device_buffer::create(std::size_t{2} << 20, device);
  if (!buf) {
    *why = "probe buffer: " + buf.error().message;
    return gpu_registration::none;
  }
  detail::verbs_device_ops ops{pd, &hooks};
  auto r = detail::register_device_memory(ops, buf->data(), buf->size(),
                                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (!r) {
    *why = r.error().message;
    return gpu_registration::none;
  }
  ibv_dereg_mr(r->mr);
  return r->how;
}

inline const bool installed = [] {
  detail::installed_device_memory() = &hooks;
  return true;
}();

}  // namespace fabrix::verbs::cuda_backend
