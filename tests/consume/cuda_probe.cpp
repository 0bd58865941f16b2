// A consumer of fabrix-cuda: compiles <fabrix/cuda_ipc.hpp> and the GPU
// memory helpers, links the CUDA runtime fabrix was built with, and asks
// whether a device is usable (a forked probe: works, and answers "no", on a
// machine without a GPU or driver). Exits 0 with the answer.
#include <fabrix/cuda/available.hpp>
#include <fabrix/cuda_ipc.hpp>
#include <fabrix/fabrix.hpp>

#include <cstdio>

int main() {
  const std::string why = fabrix::cuda::unavailable_reason();
  std::printf("cuda_probe: ok (%s)\n", why.empty() ? "a CUDA device is usable" : why.c_str());
  return 0;
}
