// The GPU test runner: exit 77 (skipped) without a CUDA device. The probe
// runs in a child process, so this process never initializes CUDA before
// the harness forks the ranks.
#include <doctest/doctest.h>
#include <fabrix/cuda/available.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  if (const std::string why = fabrix::cuda::unavailable_reason(); !why.empty()) {
    std::printf("gpu tests: skipped: %s\n", why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
