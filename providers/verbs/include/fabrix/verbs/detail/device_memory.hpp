// Registering GPU (cuda_device) memory with the NIC, without depending on
// CUDA here. A GPU-memory backend installs hooks (fabrix/verbs/cuda.hpp
// does, for CUDA, when a program includes it); without one, cuda_device
// registrations are refused with status::unsupported saying so.
//
// Order tried for each registration (register_device_memory):
//   1. dma-buf: the backend exports the range as a dma-buf fd, and
//      ibv_reg_dmabuf_mr registers it (Linux >= 5.12, a NIC driver with
//      dma-buf support, CUDA open kernel modules);
//   2. peer memory: plain ibv_reg_mr on the device pointer, which the NIC
//      driver resolves through a peer-memory client (nvidia_peermem /
//      nv_peer_mem); tried only when that module is loaded and the backend
//      confirms the pointer is device memory, so that host memory mislabeled
//      as cuda_device is never registered by accident;
//   3. otherwise status::unsupported naming why each way failed.
// The domain probes this once at creation with a small device buffer
// (hooks::probe), so runtime_caps().gpu says direct only when it works.
#pragma once

#include <fabrix/result.hpp>

#include <infiniband/verbs.h>
#include <unistd.h>

#include <sys/stat.h>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace fabrix::verbs {

enum class gpu_registration : std::uint8_t { none, dmabuf, peer_memory };

inline const char* to_string(gpu_registration g) noexcept {
  switch (g) {
    case gpu_registration::dmabuf: return "dma-buf";
    case gpu_registration::peer_memory: return "peer memory";
    default: return "none";
  }
}

// What a GPU-memory backend supplies. Plain function pointers: no CUDA
// types cross into the provider. Called on the thread that registers.
struct device_memory_hooks {
  const char* name = nullptr;  // "CUDA"
  // A dma-buf fd covering [ptr, ptr+len) and ptr's offset in it; -1 (with
  // *why) when the backend cannot export it. The caller closes the fd.
  int (*export_dmabuf)(const void* ptr, std::size_t len, std::uint64_t* offset, std::string* why) = nullptr;
  // True when ptr is device memory of this backend.
  bool (*is_device_memory)(const void* ptr) = nullptr;
  // Registers a small device buffer on `pd` as register_device_memory
  // would and says which way worked (none, with *why, if neither).
  gpu_registration (*probe)(ibv_pd* pd, std::string* why) = nullptr;
};

namespace detail {

// The installed backend (null: none). Set once, before domains are created.
inline const device_memory_hooks*& installed_device_memory() noexcept {
  static const device_memory_hooks* hooks = nullptr;
  return hooks;
}

// A peer-memory client is loaded (MLNX_OFED's nv_peer_mem or the upstream
// nvidia_peermem module).
inline bool peer_memory_loaded() noexcept {
  struct stat st {};
  return ::stat("/sys/kernel/mm/memory_peers/nv_mem/version", &st) == 0 ||
         ::stat("/sys/module/nvidia_peermem", &st) == 0;
}

struct device_registration {
  ibv_mr* mr = nullptr;
  gpu_registration how = gpu_registration::none;
};

// The choice, over `ops` (real verbs calls below, or a fake in the unit
// tests): export_dmabuf / reg_dmabuf / close, then peer_memory / reg_mr.
// reg_* return null and set errno on failure, as ibv_reg_* do.
template <class Ops>
result<device_registration> register_device_memory(Ops& ops, void* ptr, std::size_t len, int flags) {
  std::string why_dmabuf, why_peer;
  std::uint64_t offset = 0;
  const int fd = ops.export_dmabuf(ptr, len, &offset, &why_dmabuf);
  if (fd >= 0) {
    ibv_mr* mr = ops.reg_dmabuf(offset, len, reinterpret_cast<std::uintptr_t>(ptr), fd, flags);
    const int e = errno;
    ops.close(fd);  // the registration holds its own reference to the dma-buf
    if (mr != nullptr) return device_registration{mr, gpu_registration::dmabuf};
    why_dmabuf = std::string("ibv_reg_dmabuf_mr: ") + std::strerror(e);
  }
  if (ops.peer_memory(ptr)) {
    ibv_mr* mr = ops.reg_mr(ptr, len, flags);
    if (mr != nullptr) return device_registration{mr, gpu_registration::peer_memory};
    why_peer = std::string("ibv_reg_mr on device memory: ") + std::strerror(errno);
  } else {
    why_peer = "no peer-memory module (nvidia_peermem) loaded, or not device memory";
  }
  return unexpected(status::unsupported,
                    "verbs: cannot register cuda_device memory: dma-buf: " + why_dmabuf + "; peer memory: " + why_peer,
                    "verbs");
}

// The real calls, on one protection domain.
struct verbs_device_ops {
  ibv_pd* pd;
  const device_memory_hooks* hooks;

  int export_dmabuf(const void* p, std::size_t n, std::uint64_t* off, std::string* why) {
    return hooks->export_dmabuf(p, n, off, why);
  }
  ibv_mr* reg_dmabuf(std::uint64_t off, std::size_t n, std::uint64_t iova, int fd, int flags) {
    return ibv_reg_dmabuf_mr(pd, off, n, iova, fd, flags);
  }
  void close(int fd) { ::close(fd); }
  bool peer_memory(const void* p) { return peer_memory_loaded() && hooks->is_device_memory(p); }
  ibv_mr* reg_mr(void* p, std::size_t n, int flags) { return ibv_reg_mr(pd, p, n, flags); }
};

}  // namespace detail
}  // namespace fabrix::verbs
