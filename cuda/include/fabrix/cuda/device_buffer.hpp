// fabrix::cuda::device_buffer — device memory for tests and examples:
// move-only, freed on destruction, made by create() (never half-built).
//
//   auto buf = fabrix::cuda::device_buffer::create(1 << 20).value();
//   auto mr  = dom.register_memory(buf.data(), buf.size(), buf.location(), fabrix::access::remote_write).value();
//
// allocation::legacy is cudaMalloc (shared through cudaIpcGetMemHandle);
// allocation::vmm is cuMemCreate + cuMemMap with the POSIX file descriptor
// handle type (shared by passing an fd), its size rounded up to the
// allocation granularity.
#pragma once

#include <fabrix/cuda/driver.hpp>
#include <fabrix/cuda/runtime.hpp>
#include <fabrix/memory.hpp>
#include <fabrix/result.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <utility>

namespace fabrix::cuda {

enum class allocation : std::uint8_t { legacy, vmm };

class device_buffer {
 public:
  static result<device_buffer> create(std::size_t size, int device = 0, allocation how = allocation::legacy) {
    if (size == 0) return unexpected(status::invalid_argument, "device_buffer: size 0", "cuda");
    device_guard on(device);
    if (how == allocation::legacy) {
      void* p = nullptr;
      if (cudaError_t e = cudaMalloc(&p, size); e != cudaSuccess)
        return cuda_fail(e, "cudaMalloc(" + std::to_string(size) + ")");
      return device_buffer(p, size, size, device, how);
    }
    auto drv = driver();
    if (!drv) return unexpected(std::move(drv).error());
    const driver_api& d = **drv;
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    std::size_t granularity = 0;
    if (CUresult r = d.mem_get_allocation_granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        r != CUDA_SUCCESS)
      return driver_fail(r, "cuMemGetAllocationGranularity");
    const std::size_t mapped = (size + granularity - 1) / granularity * granularity;
    CUmemGenericAllocationHandle handle = 0;
    if (CUresult r = d.mem_create(&handle, mapped, &prop, 0); r != CUDA_SUCCESS) return driver_fail(r, "cuMemCreate");
    CUdeviceptr va = 0;
    if (CUresult r = d.mem_address_reserve(&va, mapped, granularity, 0, 0); r != CUDA_SUCCESS) {
      d.mem_release(handle);
      return driver_fail(r, "cuMemAddressReserve");
    }
    CUresult r = d.mem_map(va, mapped, 0, handle, 0);
    d.mem_release(handle);  // the mapping keeps the allocation alive
    if (r != CUDA_SUCCESS) {
      d.mem_address_free(va, mapped);
      return driver_fail(r, "cuMemMap");
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if ((r = d.mem_set_access(va, mapped, &access, 1)) != CUDA_SUCCESS) {
      d.mem_unmap(va, mapped);
      d.mem_address_free(va, mapped);
      return driver_fail(r, "cuMemSetAccess");
    }
    return device_buffer(reinterpret_cast<void*>(static_cast<std::uintptr_t>(va)), size, mapped, device, how);
  }

  device_buffer(device_buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), size_(o.size_), mapped_(o.mapped_), device_(o.device_), how_(o.how_) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = o.size_;
      mapped_ = o.mapped_;
      device_ = o.device_;
      how_ = o.how_;
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { release(); }

  std::byte* data() const noexcept { return static_cast<std::byte*>(ptr_); }
  std::size_t size() const noexcept { return size_; }
  int device() const noexcept { return device_; }
  allocation kind() const noexcept { return how_; }
  memory_location location() const noexcept { return {memory_kind::cuda_device, device_}; }

  // Synchronous copies for tests and examples (not for the data path). They
  // return when the device holds the bytes: cudaMemcpy from pageable memory
  // and cudaMemset may return earlier, and work on other (non-blocking)
  // streams, like fabrix's, is not ordered after them; hence the device sync.
  status copy_from_host(std::size_t offset, std::span<const std::byte> src) {
    if (offset > size_ || src.size() > size_ - offset) return status::out_of_range;
    device_guard on(device_);
    if (cudaError_t e = cudaMemcpy(data() + offset, src.data(), src.size(), cudaMemcpyHostToDevice); e != cudaSuccess)
      return to_status(e);
    return to_status(cudaDeviceSynchronize());
  }
  status copy_to_host(std::size_t offset, std::span<std::byte> dst) const {
    if (offset > size_ || dst.size() > size_ - offset) return status::out_of_range;
    device_guard on(device_);
    return to_status(cudaMemcpy(dst.data(), data() + offset, dst.size(), cudaMemcpyDeviceToHost));
  }
  status fill(int byte_value) {
    device_guard on(device_);
    if (cudaError_t e = cudaMemset(ptr_, byte_value, size_); e != cudaSuccess) return to_status(e);
    return to_status(cudaDeviceSynchronize());
  }

 private:
  device_buffer(void* p, std::size_t size, std::size_t mapped, int device, allocation how)
      : ptr_(p), size_(size), mapped_(mapped), device_(device), how_(how) {}

  void release() noexcept {
    if (!ptr_) return;
    device_guard on(device_);
    cudaDeviceSynchronize();  // no copy may still use it
    if (how_ == allocation::legacy) {
      cudaFree(ptr_);
    } else if (auto drv = driver()) {
      const auto va = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(ptr_));
      (*drv)->mem_unmap(va, mapped_);
      (*drv)->mem_address_free(va, mapped_);
    }
    ptr_ = nullptr;
  }

  void* ptr_ = nullptr;
  std::size_t size_ = 0;
  std::size_t mapped_ = 0;
  int device_ = 0;
  allocation how_ = allocation::legacy;
};

}  // namespace fabrix::cuda
