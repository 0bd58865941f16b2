// The CUDA driver functions fabrix uses, looked up once through the CUDA
// runtime (cudaGetDriverEntryPointByVersion) instead of linking libcuda: a
// binary built with fabrix's CUDA support then starts on a machine without a
// driver, and reports "no CUDA device" instead of failing to load.
//
// driver() loads on first use (thread-safe, C++ static init) and returns
// nullptr-free tables only: if a function is missing, driver() fails with a
// message naming it.
#pragma once

#include <fabrix/cuda/runtime.hpp>
#include <fabrix/result.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>

namespace fabrix::cuda {

struct driver_api {
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuPointerGetAttributes) pointer_get_attributes = nullptr;
  decltype(&::cuMemGetAddressRange) mem_get_address_range = nullptr;
  decltype(&::cuMemGetHandleForAddressRange) mem_get_handle_for_address_range = nullptr;
  decltype(&::cuMemRetainAllocationHandle) mem_retain_allocation_handle = nullptr;
  decltype(&::cuMemRelease) mem_release = nullptr;
  decltype(&::cuMemExportToShareableHandle) mem_export_to_shareable_handle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) mem_import_from_shareable_handle = nullptr;
  decltype(&::cuMemGetAllocationPropertiesFromHandle) mem_get_allocation_properties_from_handle = nullptr;
  decltype(&::cuMemGetAllocationGranularity) mem_get_allocation_granularity = nullptr;
  decltype(&::cuMemCreate) mem_create = nullptr;
  decltype(&::cuMemAddressReserve) mem_address_reserve = nullptr;
  decltype(&::cuMemAddressFree) mem_address_free = nullptr;
  decltype(&::cuMemMap) mem_map = nullptr;
  decltype(&::cuMemUnmap) mem_unmap = nullptr;
  decltype(&::cuMemSetAccess) mem_set_access = nullptr;
  decltype(&::cuMemcpyAsync) memcpy_async = nullptr;
};

namespace detail {

// `version`: the ABI of the prototypes in the cuda.h we compiled with
// (CUDA_VERSION), or the driver's own version when that is older (asking
// for a newer version than the driver's is an error).
template <class Fn>
bool load_symbol(const char* name, Fn& out, unsigned version, std::string& missing) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found);
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == nullptr) {
    if (!missing.empty()) missing += ", ";
    missing += name;
    return false;
  }
  out = reinterpret_cast<Fn>(fn);
  return true;
}

struct driver_load {
  driver_api api{};
  std::string missing;
  cudaError_t init = cudaSuccess;

  driver_load() {
    init = cudaFree(nullptr);  // initializes the runtime and loads the driver
    if (init != cudaSuccess) return;
    int driver_version = 0;
    unsigned v = CUDA_VERSION;
    if (cudaDriverGetVersion(&driver_version) == cudaSuccess && driver_version > 0 &&
        static_cast<unsigned>(driver_version) < v)
      v = static_cast<unsigned>(driver_version);
    load_symbol("cuGetErrorString", api.get_error_string, v, missing);
    load_symbol("cuPointerGetAttributes", api.pointer_get_attributes, v, missing);
    load_symbol("cuMemGetAddressRange", api.mem_get_address_range, v, missing);
    load_symbol("cuMemGetHandleForAddressRange", api.mem_get_handle_for_address_range, v, missing);
    load_symbol("cuMemRetainAllocationHandle", api.mem_retain_allocation_handle, v, missing);
    load_symbol("cuMemRelease", api.mem_release, v, missing);
    load_symbol("cuMemExportToShareableHandle", api.mem_export_to_shareable_handle, v, missing);
    load_symbol("cuMemImportFromShareableHandle", api.mem_import_from_shareable_handle, v, missing);
    load_symbol("cuMemGetAllocationPropertiesFromHandle", api.mem_get_allocation_properties_from_handle, v, missing);
    load_symbol("cuMemGetAllocationGranularity", api.mem_get_allocation_granularity, v, missing);
    load_symbol("cuMemCreate", api.mem_create, v, missing);
    load_symbol("cuMemAddressReserve", api.mem_address_reserve, v, missing);
    load_symbol("cuMemAddressFree", api.mem_address_free, v, missing);
    load_symbol("cuMemMap", api.mem_map, v, missing);
    load_symbol("cuMemUnmap", api.mem_unmap, v, missing);
    load_symbol("cuMemSetAccess", api.mem_set_access, v, missing);
    load_symbol("cuMemcpyAsync", api.memcpy_async, v, missing);
  }
};

}  // namespace detail

// The driver table, or why there is none (no driver, or a driver too old
// for a function fabrix needs).
inline result<const driver_api*> driver() {
  static const detail::driver_load loaded;
  if (loaded.init != cudaSuccess) return cuda_fail(loaded.init, "initializing the CUDA runtime");
  if (!loaded.missing.empty())
    return unexpected(status::unsupported, "the CUDA driver lacks " + loaded.missing, "cuda");
  return &loaded.api;
}

// "what: CUDA_ERROR_X (description)" for a driver error.
inline unexpected driver_fail(CUresult r, const std::string& what, const char* provider = "cuda") {
  std::string text = "CUresult " + std::to_string(static_cast<int>(r));
  if (auto d = driver()) {
    const char* s = nullptr;
    if ((*d)->get_error_string(r, &s) == CUDA_SUCCESS && s) text = s;
  }
  status code = status::provider_error;
  if (r == CUDA_ERROR_INVALID_VALUE) code = status::invalid_argument;
  if (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_NOT_PERMITTED) code = status::unsupported;
  if (r == CUDA_ERROR_OUT_OF_MEMORY) code = status::no_memory;
  return unexpected(code, what + ": " + text, provider, static_cast<long>(r));
}

}  // namespace fabrix::cuda
