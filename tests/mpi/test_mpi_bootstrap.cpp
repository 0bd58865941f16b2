// The bootstraps that run under mpirun (tests/mpi/run.sh, 4 ranks):
// fabrix::mpi::bootstrap over MPI_COMM_WORLD and over a split communicator
// (even and odd ranks), and bootstrap::from_pmix on mpirun's PMIx server
// (when fabrix has PMIx). For each, every rank checks rank/size/describe(), allgathers of blobs of differing sizes
// (every byte compared), barriers, and a real fabric job bootstrapped by
// it: connect_all + exchange over UCX, then a write_with_imm to the next
// rank whose bytes the receiver compares. Last, progress while waiting:
// rank 0 joins an allgather late and the others' progress callback runs
// meanwhile. Exits non-zero on any failed check; rank 0 prints the verdict.
#include <fabrix/connect.hpp>
#include <fabrix/mpi.hpp>
#include <fabrix/ucx.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {

int failures = 0;

void check(bool ok, int rank, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "rank %d: check failed: %s\n", rank, what.c_str());
}

std::vector<std::byte> blob_of(int rank, std::size_t bytes) {
  std::vector<std::byte> b(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    b[i] = static_cast<std::byte>((i * 31 + static_cast<std::size_t>(rank)) & 0xff);
  return b;
}

// The bootstrap itself: rank, size, describe, allgathers, barrier.
void check_collectives(fabrix::bootstrap& boot, int rank, int size, const std::string& label, const char* engine) {
  check(boot.rank() == rank && boot.size() == size, rank, label + ": rank/size");
  check(boot.describe().find(engine) != std::string::npos, rank, label + ": describe() says " + boot.describe());
  for (std::size_t base : {std::size_t{0}, std::size_t{7}, std::size_t{100000}}) {
    auto all = boot.allgather(blob_of(rank, base + static_cast<std::size_t>(rank) * 3));
    if (!all) {
      check(false, rank, label + ": allgather: " + all.error().describe());
      return;
    }
    check(all->size() == static_cast<std::size_t>(size), rank, label + ": allgather count");
    for (int r = 0; r < size && r < static_cast<int>(all->size()); ++r)
      check((*all)[static_cast<std::size_t>(r)] == blob_of(r, base + static_cast<std::size_t>(r) * 3), rank,
            label + ": blob of rank " + std::to_string(r));
    check(static_cast<bool>(boot.barrier()), rank, label + ": barrier");
  }
}

// A fabric job bootstrapped by it: each rank writes its pattern into the
// next rank's buffer with write_with_imm; the receiver checks the bytes.
void check_fabric_job(fabrix::bootstrap& boot, const std::string& label) {
  const int rank = boot.rank(), size = boot.size();
  auto dom = fabrix::ucx::domain::create();
  if (!dom) return check(false, rank, label + ": domain: " + dom.error().describe());
  std::vector<std::byte> buf(4096), src = blob_of(rank + 100, 4096);
  auto mr = dom->register_memory(buf, fabrix::access::remote_write);
  auto ms = dom->register_memory(src, fabrix::access::local);
  if (!mr || !ms) return check(false, rank, label + ": register_memory");
  std::vector<fabrix::completion> polled;
  auto qps = fabrix::connect_all(*dom, boot, polled);
  if (!qps) return check(false, rank, label + ": connect_all: " + qps.error().describe());
  auto peers = fabrix::exchange(boot, mr->remote(), *dom, polled);
  if (!peers) return check(false, rank, label + ": exchange: " + peers.error().describe());
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  const auto s = (*qps)[static_cast<std::size_t>(next)].write_with_imm(
      ms->slice(0, 4096), (*peers)[static_cast<std::size_t>(next)].slice(0, 4096), 1000u + static_cast<unsigned>(rank),
      7);
  check(s == fabrix::status::ok, rank, label + ": post");
  bool wrote = false, notified = false;
  for (const auto& c : polled) {
    wrote = wrote || (c.token == 7 && c.op != fabrix::opcode::remote_write_imm);
    notified = notified || c.op == fabrix::opcode::remote_write_imm;
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  fabrix::completion done[8];
  while ((!wrote || !notified) && std::chrono::steady_clock::now() < until) {
    const std::size_t n = dom->poll(done);
    for (std::size_t i = 0; i < n; ++i) {
      if (done[i].op == fabrix::opcode::remote_write_imm) {
        notified = true;
        check(done[i].imm == 1000u + static_cast<unsigned>(prev), rank, label + ": imm");
      } else if (done[i].token == 7) {
        wrote = true;
        check(done[i].status == fabrix::status::ok, rank, label + ": write status");
      }
    }
  }
  check(wrote && notified, rank, label + ": write and notification arrived");
  check(buf == blob_of(prev + 100, 4096), rank, label + ": bytes from rank " + std::to_string(prev));
  check(static_cast<bool>(boot.barrier(fabrix::bootstrap_progress(*dom, polled))), rank, label + ": last barrier");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  {
    auto world = fabrix::mpi::bootstrap(MPI_COMM_WORLD);
    if (!world) {
      check(false, rank, "world: " + world.error().describe());
    } else {
      check_collectives(*world, rank, size, "world", "MPI");
      check_fabric_job(*world, "world");

      // Progress while waiting: rank 0 comes 300 ms late.
      int calls = 0;
      if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      auto all = world->allgather(blob_of(rank, 16), [&calls] { ++calls; });
      check(static_cast<bool>(all), rank, "late allgather");
      if (rank != 0) check(calls > 0, rank, "progress ran while waiting for rank 0");
    }
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    {
      auto split = fabrix::mpi::bootstrap(half);
      if (!split) {
        check(false, rank, "split: " + split.error().describe());
      } else {
        check_collectives(*split, rank / 2, (size + 1 - rank % 2) / 2, "split", "MPI");
        if (split->size() > 1) check_fabric_job(*split, "split");
      }
    }
    MPI_Comm_free(&half);
    check(fabrix::mpi::bootstrap(MPI_COMM_NULL).code() == fabrix::status::invalid_argument, rank, "MPI_COMM_NULL");

    // mpirun's PMIx server, beside MPI's own use of it.
    auto pmix = fabrix::bootstrap::from_pmix();
    if (!pmix && pmix.code() == fabrix::status::unsupported && rank == 0)
      std::printf("PMIx: %s (not checked)\n", pmix.error().describe().c_str());
    if (pmix) {
      check_collectives(*pmix, rank, size, "pmix", "PMIx");
      check_fabric_job(*pmix, "pmix");
    }
  }  // every bootstrap is gone before MPI_Finalize
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    if (total == 0)
      std::printf("mpi bootstrap: every check passed on %d ranks (world and split communicators, PMIx)\n", size);
    else
      std::printf("mpi bootstrap: %d failed checks\n", total);
  }
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
