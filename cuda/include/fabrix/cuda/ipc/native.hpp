// The CUDA objects behind a fabrix::cuda_ipc domain and queue pair, as
// domain::native() and queue_pair::native() hand them out (its regions are
// the caller's own device memory and have no handle of their own).
//
// This header and <fabrix/cuda_ipc.hpp> are the cuda_ipc provider's stable
// surface; everything else under fabrix/cuda/ipc/ is internal and may change
// in any release.
//
// The stream stays fabrix's: valid while the queue pair lives, never to be
// destroyed by the caller. Work the caller enqueues on it is ordered with
// the queue pair's copies (after those posted before, before those posted
// after), which is what it is for; fabrix's completions do not cover it.
#pragma once

#include <cuda_runtime_api.h>

namespace fabrix::cuda_ipc {

struct native_domain {
  int device;  // the CUDA device the domain's copies run on
};

struct native_queue_pair {
  cudaStream_t stream;  // the queue pair's copy stream (null once closed)
};

}  // namespace fabrix::cuda_ipc
