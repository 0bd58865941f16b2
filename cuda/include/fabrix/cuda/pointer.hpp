// What a pointer is: host or CUDA device memory, on which device, and how
// its allocation can be shared (cuPointerGetAttributes + cuMemGetAddressRange).
#pragma once

#include <fabrix/cuda/driver.hpp>
#include <fabrix/memory.hpp>
#include <fabrix/result.hpp>

#include <cuda.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace fabrix::cuda {

// How another process can map an allocation.
enum class sharing : std::uint8_t {
  none,    // not shareable (host memory, managed memory, stream-ordered pools, VMM without an fd handle type)
  legacy,  // cudaMalloc: cudaIpcGetMemHandle / cudaIpcOpenMemHandle
  vmm,     // cuMemCreate with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: an fd passed over a Unix socket
};

struct pointer_info {
  memory_location location{};   // host for anything CUDA does not know as device memory
  bool managed = false;         // cudaMallocManaged memory (memory_kind has no name for it yet)
  std::uint64_t buffer_id = 0;  // unique within the process: a freed-and-reused address gets a new one
  std::uintptr_t base = 0;      // the allocation (or VMM mapping) holding the pointer
  std::size_t size = 0;
  fabrix::cuda::sharing sharing = sharing::none;
};

// Never fails for host memory (location.kind == host). Fails only when the
// driver cannot be loaded or refuses the query.
inline result<pointer_info> query_pointer(const void* ptr) {
  auto drv = driver();
  if (!drv) return unexpected(std::move(drv).error());
  const driver_api& d = **drv;
  // Every attribute lands in its own zeroed 8-byte slot: the driver writes
  // 4 bytes (unsigned int / int / bool-as-int) or 8 (unsigned long long).
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                 CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  constexpr unsigned n = sizeof(attrs) / sizeof(attrs[0]);
  std::uint64_t values[n] = {};
  void* data[n];
  for (unsigned i = 0; i < n; ++i) data[i] = &values[i];
  const auto dptr = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(ptr));
  if (CUresult r = d.pointer_get_attributes(n, attrs, data, dptr); r != CUDA_SUCCESS)
    return driver_fail(r, "cuPointerGetAttributes");

  pointer_info info;
  const auto type = static_cast<std::uint32_t>(values[0]);
  info.managed = static_cast<std::uint32_t>(values[3]) != 0;
  info.buffer_id = values[2];
  if (type != CU_MEMORYTYPE_DEVICE || info.managed) return info;  // host, pinned host, unknown or managed
  info.location = {memory_kind::cuda_device, static_cast<int>(static_cast<std::int32_t>(values[1]))};

  // The allocation (or, for cuMemCreate memory, the mapped region) holding
  // the pointer; the reserved range as a fallback where the driver does not
  // answer for a VMM mapping.
  CUdeviceptr base = 0;
  std::size_t size = 0;
  if (CUresult r = d.mem_get_address_range(&base, &size, dptr); r == CUDA_SUCCESS) {
    info.base = static_cast<std::uintptr_t>(base);
    info.size = size;
  } else if (values[6] != 0 && values[7] != 0) {
    info.base = static_cast<std::uintptr_t>(values[6]);
    info.size = static_cast<std::size_t>(values[7]);
  } else {
    return driver_fail(r, "cuMemGetAddressRange");
  }
  if (static_cast<std::uint32_t>(values[4]) != 0)
    info.sharing = sharing::legacy;
  else if (values[5] & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    info.sharing = sharing::vmm;
  return info;
}

// A provider's check_host_memory (concepts.hpp): refuses CUDA device memory
// described as host memory. Managed memory passes (the host can touch it;
// the provider decides). Ok where no driver loads (then there is no device
// memory to mistake).
inline result<void> refuse_device_memory_as_host(const void* addr, std::string_view provider) {
  auto info = query_pointer(addr);
  if (!info) return {};
  if (info->location.kind != memory_kind::host)
    return unexpected(status::invalid_argument,
                      "registered as host memory, but the pointer is CUDA device memory (device " +
                          std::to_string(info->location.device) + "); pass its memory_location",
                      std::string(provider));
  return {};
}

}  // namespace fabrix::cuda
