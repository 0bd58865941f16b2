// Is there a CUDA device here? Asked in a forked child, so the calling
// process never initializes CUDA: a process that forks workers afterwards
// (the test harnesses do) must not have touched CUDA before fork().
#pragma once

#include <cuda_runtime_api.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace fabrix::cuda {

// Empty when at least one device is usable; otherwise why not.
inline std::string unavailable_reason() {
  const pid_t pid = ::fork();
  if (pid < 0) return "fork failed while probing for CUDA devices";
  if (pid == 0) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    std::_Exit(e == cudaErrorInsufficientDriver ? 3 : e != cudaSuccess ? 2 : n == 0 ? 1 : 0);
  }
  int st = 0;
  if (::waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return "no CUDA device (the probe crashed)";
  switch (WEXITSTATUS(st)) {
    case 0: return {};
    case 1: return "no CUDA device (cudaGetDeviceCount returned 0)";
    case 3:
      return "no CUDA device usable: no driver, or a driver older than this CUDA runtime "
             "(cudaErrorInsufficientDriver)";
    default: return "no CUDA device (cudaGetDeviceCount failed)";
  }
}

}  // namespace fabrix::cuda
