// A consumer of fabrix-mpi: links <fabrix/mpi.hpp> with the MPI library and,
// without MPI_Init (no launcher needed), checks the documented refusal:
// fabrix::mpi::bootstrap on an uninitialized MPI returns invalid_argument.
// Exits 1 with a message otherwise.
#include <fabrix/fabrix.hpp>
#include <fabrix/mpi.hpp>

#include <cstdio>

int main() {
  auto b = fabrix::mpi::bootstrap(MPI_COMM_WORLD);
  if (b) {
    std::fprintf(stderr, "mpi_uninitialized: FAIL: bootstrap succeeded before MPI_Init\n");
    return 1;
  }
  if (b.error().code != fabrix::status::invalid_argument) {
    std::fprintf(stderr, "mpi_uninitialized: FAIL: expected invalid_argument, got %s\n", b.error().describe().c_str());
    return 1;
  }
  std::printf("mpi_uninitialized: ok (%s)\n", b.error().describe().c_str());
  return 0;
}
