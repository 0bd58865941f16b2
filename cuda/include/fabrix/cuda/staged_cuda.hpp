// The staged adapter with the CUDA copy engine (cudaMemcpyAsync on one
// stream, pinned bounce memory): what real programs use.
//
//   using P = fabrix::cuda::staged_cuda<fabrix::ucx::provider>;
//   fabrix::cuda::enable_staged_providers();  // "ucx+staged", "ofi+staged", ... for fabrix::open()
//
// Without a CUDA device the domain still opens (host memory works) and
// reports gpu_path::none; registering device memory is then refused with
// the CUDA error as the reason.
#pragma once

#include <fabrix/cuda/staged.hpp>
#include <fabrix/cuda/staged_open.hpp>
#include <fabrix/cuda/stream_engine.hpp>

namespace fabrix::cuda {

template <provider P>
using staged_cuda = staged<P, stream_copy_engine>;

inline void enable_staged_providers() { enable_staged_providers<stream_copy_engine>(); }

}  // namespace fabrix::cuda
