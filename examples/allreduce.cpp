// Ring allreduce over fabrix: every rank contributes a vector, every rank
// ends with the element-wise sum. Run it under mpirun:
//
//   mpirun -np 4 build/examples/allreduce
//
// or with the built-in bootstrap (one command per rank):
//
//   FABRIX_SIZE=2 FABRIX_BOOTSTRAP=127.0.0.1:29500 FABRIX_RANK=1 ./allreduce &
//   FABRIX_SIZE=2 FABRIX_BOOTSTRAP=127.0.0.1:29500 FABRIX_RANK=0 ./allreduce
//
// Optional argument: the element count (default 1,000,003 — not a multiple
// of anything, on purpose). UCX_TLS chooses UCX's transport.
#include <fabrix/collectives.hpp>
#include <fabrix/fabrix.hpp>
#include <fabrix/ucx.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

namespace coll = fabrix::coll;

int main(int argc, char** argv) {
  const std::size_t count = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1000003;

  // 1. Find the other ranks: FABRIX_* variables, or mpirun's / srun's own.
  auto boot = fabrix::bootstrap::from_env();
  if (!boot) return std::fprintf(stderr, "bootstrap: %s\n", boot.error().describe().c_str()), 1;
  const int rank = boot->rank();
  const int size = boot->size();

  // 2. Open a domain and build the communicator: it connects every rank and
  //    registers its scratch once; nothing is registered per call.
  auto dom = fabrix::ucx::domain::create();
  if (!dom) return std::fprintf(stderr, "domain: %s\n", dom.error().describe().c_str()), 1;
  coll::options opts;
  opts.timeout = std::chrono::seconds(20);  // a dead peer makes calls fail, never hang
  auto comm = coll::communicator<fabrix::ucx::provider>::create(*dom, *boot, opts);
  if (!comm) return std::fprintf(stderr, "communicator: %s\n", comm.error().describe().c_str()), 1;

  // 3. The vector, in memory the communicator allocates and registers once
  //    (as MPI_Alloc_mem): large calls then write chunks straight from and
  //    into it instead of copying them through the scratch (with UCX over
  //    shared memory, the peers map it). Plain memory works too, or memory
  //    you register with comm->register_memory(span). The handle owns it.
  auto mem = comm->allocate_memory(count * sizeof(std::int64_t));
  if (!mem) return std::fprintf(stderr, "allocate_memory: %s\n", mem.error().describe().c_str()), 1;
  const std::span<std::int64_t> x = mem->as<std::int64_t>();

  // 4. Each rank's input: x[i] = rank + i (mod 1000), so the sum is known.
  for (std::size_t i = 0; i < count; ++i) x[i] = rank + static_cast<std::int64_t>(i % 1000);

  // 5. Sum in place across all ranks.
  if (auto r = coll::allreduce(*comm, x, coll::reduce_op::sum); !r)
    return std::fprintf(stderr, "rank %d: allreduce: %s\n", rank, r.error().describe().c_str()), 1;

  // 6. Check every element: sum over ranks of (rank + i%1000).
  const std::int64_t ranks_sum = std::int64_t{size} * (size - 1) / 2;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i)
    if (x[i] != ranks_sum + std::int64_t{size} * static_cast<std::int64_t>(i % 1000)) ++wrong;

  // 7. The max of everyone's error count: zero everywhere, or report.
  std::int64_t worst = static_cast<std::int64_t>(wrong);
  if (auto r = coll::allreduce(*comm, std::span(&worst, 1), coll::reduce_op::max); !r)
    return std::fprintf(stderr, "rank %d: allreduce: %s\n", rank, r.error().describe().c_str()), 1;
  if (rank == 0)
    std::printf("allreduce of %zu int64 over %d ranks (%s; bootstrap: %s): %s\n", count, size, dom->describe().c_str(),
                boot->describe().c_str(), worst == 0 ? "every element correct" : "WRONG RESULTS");
  if (auto r = comm->barrier(); !r) return 1;
  return worst == 0 ? 0 : 1;
}
