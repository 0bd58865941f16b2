// The device-side helpers of the cuda_ipc provider, compiled by nvcc into
// libfabrix_cuda_kernels (cuda/src/atomics.cu). A C ABI, so the header-only
// provider code compiled by the host compiler links against it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

extern "C" {

// One 8-byte atomic on `target` (8-aligned device memory, possibly a peer's
// memory mapped through CUDA IPC), enqueued on `stream`: fetch-and-add of
// `operand`, or, when `is_cas` is nonzero, compare-and-swap (`compare`
// expected, `operand` swapped in). The previous value is written to
// `old_value` (device memory). System-scope atomics, so they are atomic with
// respect to other GPUs and processes using the same memory.
// Returns the launch error (cudaSuccess when enqueued).
cudaError_t fabrix_cuda_atomic64(cudaStream_t stream, unsigned long long* target, unsigned long long* old_value,
                                 std::uint64_t operand, std::uint64_t compare, int is_cas);
}
