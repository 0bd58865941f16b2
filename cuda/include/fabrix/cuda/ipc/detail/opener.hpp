// Opens a peer's allocation in this process, for mapping_cache:
//   legacy: cudaIpcOpenMemHandle(cudaIpcMemLazyEnablePeerAccess) on the
//           current device; closed with cudaIpcCloseMemHandle.
//   vmm:    the allocation's fd (fetched from the exporter over the Unix
//           socket by `fetch_fd`) -> cuMemImportFromShareableHandle ->
//           cuMemAddressReserve + cuMemMap of the whole allocation ->
//           cuMemSetAccess(read-write) for this device; closed with
//           cuMemUnmap + cuMemAddressFree.
#pragma once

#include <fabrix/cuda/driver.hpp>
#include <fabrix/cuda/ipc/detail/handle.hpp>
#include <fabrix/cuda/ipc/detail/socket.hpp>
#include <fabrix/cuda/runtime.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>

namespace fabrix::cuda::ipc {

struct cuda_mapping {
  std::byte* base = nullptr;  // the allocation's first byte in this process
  handle_kind kind = handle_kind::legacy;
  std::size_t size = 0;
};

class cuda_opener {
 public:
  using mapping = cuda_mapping;
  // Fetches the fd of export `export_id` from domain `owner`.
  using fetch_fn = result<unique_fd> (*)(void* context, std::uint64_t owner, std::uint64_t export_id);

  cuda_opener(int device, fetch_fn fetch, void* context) : device_(device), fetch_(fetch), context_(context) {}

  result<mapping> open(std::uint64_t owner, const ipc_handle& h) {
    device_guard on(device_);
    if (h.kind == handle_kind::legacy) {
      cudaIpcMemHandle_t mh;
      static_assert(sizeof(mh) == legacy_handle_size);
      std::memcpy(&mh, h.handle.data(), sizeof(mh));
      void* p = nullptr;
      if (cudaError_t e = cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess)
        return cuda_fail(e, "cudaIpcOpenMemHandle (peer allocation " + std::to_string(h.buffer_id) + ")", "cuda_ipc");
      return mapping{static_cast<std::byte*>(p), h.kind, static_cast<std::size_t>(h.allocation_size)};
    }
    auto drv = driver();
    if (!drv) return unexpected(std::move(drv).error());
    const driver_api& d = **drv;
    auto fd = fetch_(context_, owner, h.export_id());
    if (!fd) return unexpected(std::move(fd).error());
    CUmemGenericAllocationHandle handle = 0;
    // For POSIX fds the "OS handle" argument is the fd value itself.
    CUresult r =
        d.mem_import_from_shareable_handle(&handle, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd->get())),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    fd->reset();
    if (r != CUDA_SUCCESS) return driver_fail(r, "cuMemImportFromShareableHandle", "cuda_ipc");
    const auto size = static_cast<std::size_t>(h.allocation_size);
    CUdeviceptr va = 0;
    if ((r = d.mem_address_reserve(&va, size, 0, 0, 0)) != CUDA_SUCCESS) {
      d.mem_release(handle);
      return driver_fail(r, "cuMemAddressReserve", "cuda_ipc");
    }
    r = d.mem_map(va, size, 0, handle, 0);
    d.mem_release(handle);  // the mapping holds the allocation from here on
    if (r != CUDA_SUCCESS) {
      d.mem_address_free(va, size);
      return driver_fail(r, "cuMemMap", "cuda_ipc");
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device_;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if ((r = d.mem_set_access(va, size, &access, 1)) != CUDA_SUCCESS) {
      d.mem_unmap(va, size);
      d.mem_address_free(va, size);
      return driver_fail(r, "cuMemSetAccess", "cuda_ipc");
    }
    return mapping{reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(va)), h.kind, size};
  }

  void close(mapping& m) noexcept {
    if (!m.base) return;
    device_guard on(device_);
    if (m.kind == handle_kind::legacy) {
      cudaIpcCloseMemHandle(m.base);
    } else if (auto drv = driver()) {
      const auto va = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(m.base));
      (*drv)->mem_unmap(va, m.size);
      (*drv)->mem_address_free(va, m.size);
    }
    m.base = nullptr;
  }

 private:
  int device_;
  fetch_fn fetch_;
  void* context_;
};

}  // namespace fabrix::cuda::ipc
