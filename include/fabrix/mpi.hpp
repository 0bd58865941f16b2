// fabrix::mpi::bootstrap — a fabrix::bootstrap over an MPI communicator, for
// applications that have called MPI_Init already.
//
//   auto boot = fabrix::mpi::bootstrap(MPI_COMM_WORLD).value();
//   auto qps  = fabrix::connect_all(dom, boot).value();
//
// Rank and size are the communicator's (a split or duplicated one works the
// same). The blobs travel by MPI_Iallgather on a duplicate of it
// (MPI_Comm_dup, collective over `comm`), so fabrix's messages never match
// the application's; the calls poll MPI_Test, running
// bootstrap_options::progress while they wait, and end at op_timeout. No
// socket or port of fabrix's own is opened. Trust model: the MPI library's.
//
// Lifetime: destroy the bootstrap before MPI_Finalize (it frees its
// duplicate then; after MPI_Finalize it frees nothing). Threading: the
// thread that calls the bootstrap must be allowed to call MPI (any thread
// level works from the thread that called MPI_Init).
// Build: this header needs <mpi.h>; the Meson dependency and pkg-config
// module `fabrix-mpi` add fabrix and the MPI library.
#pragma once

#include <fabrix/bootstrap.hpp>

// Only MPI's C API is used; the deprecated C++ bindings (Open MPI's do not
// compile warning-free) stay out unless the includer wants them.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <climits>
#include <memory>
#include <string>

namespace fabrix::mpi {

namespace detail {

// The duplicate communicator, freed with the last callback that holds it.
struct owned_comm {
  MPI_Comm comm = MPI_COMM_NULL;
  owned_comm() = default;
  owned_comm(const owned_comm&) = delete;
  owned_comm& operator=(const owned_comm&) = delete;
  ~owned_comm() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

inline unexpected mpi_failure(const char* call, int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
  return unexpected(status::provider_error, std::string(call) + " failed: " + std::string(text, length), "mpi", rc);
}

}  // namespace detail

inline result<fabrix::bootstrap> bootstrap(MPI_Comm comm, const bootstrap_options& opts = {}) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    return unexpected(status::invalid_argument, "fabrix::mpi::bootstrap: MPI is not initialized (or finalized)", "mpi");
  if (comm == MPI_COMM_NULL)
    return unexpected(status::invalid_argument, "fabrix::mpi::bootstrap: MPI_COMM_NULL", "mpi");
  auto own = std::make_shared<detail::owned_comm>();
  if (int rc = MPI_Comm_dup(comm, &own->comm); rc != MPI_SUCCESS) return detail::mpi_failure("MPI_Comm_dup", rc);
  // Errors come back as codes (and then as fabrix errors), not as an abort.
  MPI_Comm_set_errhandler(own->comm, MPI_ERRORS_RETURN);

  bootstrap_callbacks cb;
  MPI_Comm_rank(own->comm, &cb.rank);
  MPI_Comm_size(own->comm, &cb.size);
  cb.name = "MPI communicator";
  cb.allgather_start = [own](const std::byte* mine, std::byte* out, std::size_t bytes) -> result<void*> {
    if (bytes > static_cast<std::size_t>(INT_MAX))
      return unexpected(status::invalid_argument, "an MPI allgather of " + std::to_string(bytes) + " bytes", "mpi");
    auto request = std::make_unique<MPI_Request>(MPI_REQUEST_NULL);
    const int count = static_cast<int>(bytes);
    if (int rc = MPI_Iallgather(mine, count, MPI_BYTE, out, count, MPI_BYTE, own->comm, request.get());
        rc != MPI_SUCCESS)
      return detail::mpi_failure("MPI_Iallgather", rc);
    return static_cast<void*>(request.release());
  };
  cb.test = [](void* request) -> result<bool> {
    int done = 0;
    if (int rc = MPI_Test(static_cast<MPI_Request*>(request), &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS)
      return detail::mpi_failure("MPI_Test", rc);
    return done != 0;
  };
  // MPI cannot cancel or free a running collective: one given up on stays
  // with MPI (fabrix keeps its buffers), only its handle's storage leaks.
  cb.release = [](void* request, bool finished) {
    if (finished) delete static_cast<MPI_Request*>(request);
  };
  return fabrix::bootstrap::from_callbacks(std::move(cb), opts);
}

}  // namespace fabrix::mpi
