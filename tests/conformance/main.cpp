// The conformance runner. A provider whose hardware is absent here (no GPU,
// no RDMA device) makes the whole run exit 77, which Meson reports as
// skipped, never as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include "providers.hpp"

#include <cstdio>

int main(int argc, char** argv) {
  if (const std::string why = fxt::unavailable_reason(); !why.empty()) {
    std::printf("conformance: %s: skipped: %s\n", fxt::provider_name, why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
