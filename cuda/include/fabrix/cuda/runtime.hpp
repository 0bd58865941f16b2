// CUDA runtime errors as fabrix errors, and a guard that makes a device
// current for the duration of a call (the runtime's current device is
// per-thread state the caller may change between fabrix calls).
#pragma once

#include <fabrix/result.hpp>

#include <cuda_runtime_api.h>

#include <string>

namespace fabrix::cuda {

inline status to_status(cudaError_t e) noexcept {
  switch (e) {
    case cudaSuccess: return status::ok;
    case cudaErrorNotReady: return status::in_progress;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle: return status::invalid_argument;
    case cudaErrorMemoryAllocation: return status::no_memory;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNotSupported: return status::unsupported;
    case cudaErrorPeerAccessUnsupported: return status::peer_unreachable;
    default: return status::provider_error;
  }
}

// "what: cudaErrorX (description)" as a result's error.
inline unexpected cuda_fail(cudaError_t e, const std::string& what, const char* provider = "cuda") {
  return unexpected(to_status(e), what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")", provider,
                    static_cast<long>(e));
}

// Makes `device` current until destruction, then restores the previous one.
// One cudaGetDevice when `device` is already current (every post and poll
// of a provider takes one of these).
class device_guard {
 public:
  explicit device_guard(int device) noexcept {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now == device) return;  // nothing to restore
    previous_ = now;
    cudaSetDevice(device);
  }
  ~device_guard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace fabrix::cuda
