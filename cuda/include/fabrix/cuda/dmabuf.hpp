// A dma-buf file descriptor for a range of device memory, for NICs that
// register GPU memory natively (verbs: ibv_reg_dmabuf_mr(pd, offset, length,
// iova, fd, access); libfabric: FI_HMEM with a dmabuf fd).
//
//   auto h = fabrix::cuda::export_dmabuf(ptr, len);      // result<dmabuf_range>
//   ibv_reg_dmabuf_mr(pd, h->offset, len, (uintptr_t)ptr, h->fd, access);
//
// cuMemGetHandleForAddressRange needs a page-aligned start and length, so the
// exported range is [ptr rounded down, ptr+len rounded up) and `offset` is
// where `ptr` lies in it. Needs CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (open
// kernel modules, Linux >= 5.12); otherwise status::unsupported, and the
// provider falls back to staging (staging.hpp) or refuses the registration.
#pragma once

#include <fabrix/cuda/driver.hpp>
#include <fabrix/result.hpp>

#include <cuda.h>
#include <unistd.h>

#include <cstdint>
#include <utility>

namespace fabrix::cuda {

// Owns the fd; closes it on destruction (a NIC registration keeps its own reference).
class dmabuf_range {
 public:
  dmabuf_range(int fd, std::uint64_t offset, std::uintptr_t start, std::size_t length) noexcept
      : fd(fd), offset(offset), start(start), length(length) {}
  dmabuf_range(dmabuf_range&& o) noexcept
      : fd(std::exchange(o.fd, -1)), offset(o.offset), start(o.start), length(o.length) {}
  dmabuf_range& operator=(dmabuf_range&& o) noexcept {
    if (this != &o) {
      if (fd >= 0) ::close(fd);
      fd = std::exchange(o.fd, -1);
      offset = o.offset;
      start = o.start;
      length = o.length;
    }
    return *this;
  }
  dmabuf_range(const dmabuf_range&) = delete;
  dmabuf_range& operator=(const dmabuf_range&) = delete;
  ~dmabuf_range() {
    if (fd >= 0) ::close(fd);
  }

  int fd = -1;
  std::uint64_t offset = 0;  // of the caller's pointer within the dma-buf
  std::uintptr_t start = 0;  // page-aligned start of the exported range
  std::size_t length = 0;    // page-aligned length of the exported range
};

// Page-aligned cover of [ptr, ptr+len): {start, length, offset of ptr}.
struct page_cover {
  std::uintptr_t start;
  std::size_t length;
  std::uint64_t offset;
};
inline page_cover cover_pages(std::uintptr_t ptr, std::size_t len, std::size_t page) noexcept {
  const std::uintptr_t start = ptr / page * page;
  const std::uintptr_t end = (ptr + len + page - 1) / page * page;
  return {start, static_cast<std::size_t>(end - start), static_cast<std::uint64_t>(ptr - start)};
}

inline result<dmabuf_range> export_dmabuf(const void* ptr, std::size_t len) {
  if (ptr == nullptr || len == 0) return unexpected(status::invalid_argument, "export_dmabuf: empty range", "cuda");
  auto drv = driver();
  if (!drv) return unexpected(std::move(drv).error());
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const page_cover c = cover_pages(reinterpret_cast<std::uintptr_t>(ptr), len, page);
  int fd = -1;
  if (CUresult r = (*drv)->mem_get_handle_for_address_range(&fd, static_cast<CUdeviceptr>(c.start), c.length,
                                                            CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
      r != CUDA_SUCCESS)
    return driver_fail(r, "cuMemGetHandleForAddressRange(DMA_BUF_FD)");
  return dmabuf_range(fd, c.offset, c.start, c.length);
}

}  // namespace fabrix::cuda
