// The runner of a multi-rank suite (conformance or collectives: the suite's
// case library names it, suite_entry.cpp) under mpirun on the MPI bootstrap engine:
// each case's ranks bootstrap on fabrix::mpi::bootstrap(MPI_COMM_WORLD)
// (FABRIX_TEST_BOOTSTRAP=launcher, rank_bootstrap.hpp). The cases are the
// objects of the suite's executable; only this runner differs. Exit 77
// (skipped) where the provider cannot run here.
#define DOCTEST_CONFIG_IMPLEMENT
#include "../support/current_case.hpp"
#include "../support/suite_main.hpp"
#include "providers.hpp"

#include <fabrix/mpi.hpp>

#include <cstdio>

DOCTEST_REGISTER_LISTENER("current_case", 0, fxt::current_case_listener);

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (const std::string why = fxt::suite::skip_reason(); !why.empty()) {
    std::printf("%s: %s: skipped: %s\n", fxt::suite::name(), fxt::suite::provider(), why.c_str());
    MPI_Finalize();
    return 77;
  }
  fxt::launcher_bootstrap = [] { return fabrix::mpi::bootstrap(MPI_COMM_WORLD); };
  doctest::Context context(argc, argv);
  const int rc = context.run();
  fxt::end_launcher_job();
  MPI_Finalize();
  return rc;
}
