// The runner of a multi-rank suite (conformance, or collectives with
// -DFX_SUITE_NAME="collectives") under mpirun on the MPI bootstrap engine:
// each case's ranks bootstrap on fabrix::mpi::bootstrap(MPI_COMM_WORLD)
// (FABRIX_TEST_BOOTSTRAP=launcher, rank_bootstrap.hpp). The cases are the
// objects of the suite's executable; only this runner differs. Exit 77
// (skipped) where the provider cannot run here.
#define DOCTEST_CONFIG_IMPLEMENT
#include "providers.hpp"

#include <fabrix/mpi.hpp>

#include <cstdio>

#ifndef FX_SUITE_NAME
#define FX_SUITE_NAME "conformance"
#endif

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (const std::string why = fxt::unavailable_reason(); !why.empty()) {
    std::printf(FX_SUITE_NAME ": %s: skipped: %s\n", fxt::provider_name, why.c_str());
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
