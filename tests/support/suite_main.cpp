// main() of the provider suites (conformance, collectives, the staged
// conformance, the VM's verbs liveness cases). A provider whose hardware is
// absent here makes the whole run exit 77, which Meson reports as skipped,
// never as passed. The MPI variants have their own (conformance/main_mpi.cpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include "suite_main.hpp"
#include "current_case.hpp"

#include <doctest/doctest.h>

#include <cstdio>

DOCTEST_REGISTER_LISTENER("current_case", 0, fxt::current_case_listener);

int main(int argc, char** argv) {
  if (const std::string why = fxt::suite::skip_reason(); !why.empty()) {
    std::printf("%s: %s: skipped: %s\n", fxt::suite::name(), fxt::suite::provider(), why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
