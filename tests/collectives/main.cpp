// The collectives suite's runner: exit 77 (skipped) when the provider
// cannot run here.
#define DOCTEST_CONFIG_IMPLEMENT
#include "common.hpp"

#include <cstdio>

int main(int argc, char** argv) {
  if (const std::string why = fxt::unavailable_reason(); !why.empty()) {
    std::printf("collectives: %s: skipped: %s\n", fxt::provider_name, why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
