// fabrix_cuda_atomic64: the cuda_ipc provider's fetch_add / compare_swap.
// One thread performs the atomic; the caller copies old_value back.
#include <fabrix/cuda/kernels.hpp>

namespace {

__global__ void atomic64_kernel(unsigned long long* target, unsigned long long* old_value, unsigned long long operand,
                                unsigned long long compare, int is_cas) {
  if (is_cas)
    *old_value = atomicCAS_system(target, compare, operand);
  else
    *old_value = atomicAdd_system(target, operand);
}

}  // namespace

extern "C" cudaError_t fabrix_cuda_atomic64(cudaStream_t stream, unsigned long long* target,
                                            unsigned long long* old_value, std::uint64_t operand,
                                            std::uint64_t compare, int is_cas) {
  atomic64_kernel<<<1, 1, 0, stream>>>(target, old_value, operand, compare, is_cas);
  return cudaGetLastError();
}
