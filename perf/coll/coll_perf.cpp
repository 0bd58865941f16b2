// coll-perf: fabrix collectives against OpenMPI's, on the same processes in
// the same run. Run it under mpirun:
//
//   mpirun -np 4 build/perf/coll/coll-perf [--op allreduce] [--min 8] [--max 256M]
//
// For each size, after a warm-up call each, the two implementations take
// turns: `rounds` rounds, each a batch of fabrix calls then a batch of MPI
// calls. A batch's time is the slowest rank's average per call; a size
// reports the median batch time of each, and the ratio column is the median
// of the per-round ratios with their 25th and 75th percentiles (rounds pair
// each fabrix batch with the MPI batch next to it in time, so load that
// comes and goes on the machine hits both sides alike). Sizes and
// bandwidths follow nccl-tests: size is the vector (allreduce), the whole
// output (allgather), the whole input (reduce_scatter) or one rank's send
// buffer (alltoall); algbw = size / time; busbw = algbw * 2(n-1)/n for
// allreduce and algbw * (n-1)/n for the others. The last column is fabrix
// busbw / MPI busbw. Elements are float, sum.
//
// fabrix uses UCX with the transport named by --transport (a UCX_TLS list;
// default: UCX's choice); choose MPI's with mpirun's own options (e.g.
// --mca btl self,tcp) so that both move bytes the same way.
#include <mpi.h>
#include <fabrix/collectives.hpp>
#include <fabrix/fabrix.hpp>
#include <fabrix/ucx.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace {

namespace coll = fabrix::coll;
using comm_t = coll::communicator<fabrix::ucx::provider>;

struct config {
  std::vector<std::string> ops{"allreduce", "allgather", "reduce_scatter", "alltoall"};
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{256} << 20;
  std::size_t factor = 2;
  int max_iters = 50;
  int rounds = 5;
  bool check = true;
  // plain: std::vector, not registered; registered: the same, registered
  // with the communicator; allocated: from communicator::allocate_memory.
  std::string buffers = "plain";
  std::string transport;
  coll::options opts;
};

std::size_t parse_size(const char* s) {
  char* end = nullptr;
  std::size_t v = std::strtoull(s, &end, 10);
  if (*end == 'K' || *end == 'k') v <<= 10;
  if (*end == 'M' || *end == 'm') v <<= 20;
  if (*end == 'G' || *end == 'g') v <<= 30;
  return v;
}

bool parse(int argc, char** argv, config& c) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--op" && v) {
      c.ops = {v};
      if (c.ops[0] == "all") c.ops = config{}.ops;
    } else if (a == "--min" && v) {
      c.min_bytes = parse_size(v);
    } else if (a == "--max" && v) {
      c.max_bytes = parse_size(v);
    } else if (a == "--factor" && v) {
      c.factor = std::max<std::size_t>(2, parse_size(v));
    } else if (a == "--iters" && v) {
      c.max_iters = std::max(1, std::atoi(v));
    } else if (a == "--rounds" && v) {
      c.rounds = std::max(1, std::atoi(v));
    } else if (a == "--chunk" && v) {
      c.opts.chunk_bytes = parse_size(v);
    } else if (a == "--slots" && v) {
      c.opts.slots = static_cast<std::uint32_t>(std::atoi(v));
    } else if (a == "--transport" && v) {
      c.transport = v;
    } else if (a == "--no-check") {
      c.check = false;
      continue;
    } else if (a == "--forward") {
      c.opts.forward_received = true;
      continue;
    } else if (a == "--registered" || a == "--allocated") {
      c.buffers = a.substr(2);
      continue;
    } else {
      return false;
    }
    ++i;
  }
  return true;
}

// Slowest rank's average seconds per call over `calls` calls of `fn`;
// negative when a call failed.
double time_batch(int calls, const std::function<bool()>& fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  bool ok = true;
  for (int i = 0; i < calls && ok; ++i) ok = fn();
  double mine = ok ? (MPI_Wtime() - t0) / calls : -1, worst = 0, least = 0;
  MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &least, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  return least < 0 ? -1 : worst;
}

// Nearest-rank percentile q (0..1) of `v` (not empty).
double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

struct timing {
  double fabrix = 0, mpi = 0;                    // median seconds per call
  double ratio = 0, ratio_lo = 0, ratio_hi = 0;  // fabrix speed / MPI speed: median, p25, p75 over rounds
};

// Alternating batches of `fab` and `mpi` (see the top of the file); false
// when a fabrix call failed.
bool time_pair(int rounds, int calls, const std::function<bool()>& fab, const std::function<bool()>& mpi, timing& t) {
  if (!fab() || !mpi()) return false;  // warm-up
  std::vector<double> tf, tm, ratio;
  for (int r = 0; r < rounds; ++r) {
    tf.push_back(time_batch(calls, fab));
    tm.push_back(time_batch(calls, mpi));
    if (tf.back() < 0 || tm.back() < 0) return false;
    ratio.push_back(tm.back() / tf.back());
  }
  t = {percentile(tf, 0.5), percentile(tm, 0.5), percentile(ratio, 0.5), percentile(ratio, 0.25),
       percentile(ratio, 0.75)};
  return true;
}

// One size's buffers: `in` and `out` lie in the vectors, or with
// --allocated in memory from communicator::allocate_memory; both are
// registered with the communicator unless plain. Made once per size,
// outside the timed calls, as an application sets up the buffers it reuses.
struct buffers {
  std::vector<float> in_store, out_store;
  coll::registered_memory<fabrix::ucx::provider> in_reg, out_reg;
  std::span<float> in, out;

  fabrix::result<void> make(comm_t& comm, const std::string& kind, std::size_t in_n, std::size_t out_n) {
    if (kind == "allocated") {
      auto i = comm.allocate_memory(in_n * sizeof(float));
      if (!i) return fabrix::unexpected(std::move(i).error());
      auto o = comm.allocate_memory(out_n * sizeof(float));
      if (!o) return fabrix::unexpected(std::move(o).error());
      in_reg = std::move(*i);
      out_reg = std::move(*o);
      in = in_reg.as<float>();
      out = out_reg.as<float>();
      return {};
    }
    in_store.resize(in_n);
    out_store.resize(out_n);
    in = in_store;
    out = out_store;
    if (kind == "plain") return {};
    auto i = comm.register_memory(in);
    if (!i) return fabrix::unexpected(std::move(i).error());
    auto o = comm.register_memory(out);
    if (!o) return fabrix::unexpected(std::move(o).error());
    in_reg = std::move(*i);
    out_reg = std::move(*o);
    return {};
  }
};

// The whole measurement; returns the exit status.
int run(const config& cfg, int rank, int n) {
  auto fail = [&](const char* what, const fabrix::error& e) {
    std::fprintf(stderr, "rank %d: %s: %s\n", rank, what, e.describe().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  };
  auto boot = fabrix::bootstrap::from_env();
  if (!boot) return fail("bootstrap", boot.error());
  fabrix::domain_options dopts;
  dopts.transport = cfg.transport;
  auto dom = fabrix::ucx::domain::create(dopts);
  if (!dom) return fail("domain", dom.error());
  auto comm = comm_t::create(*dom, *boot, cfg.opts);
  if (!comm) return fail("communicator", comm.error());

  if (rank == 0) {
    std::printf("# coll-perf: %d ranks; fabrix: %s, chunk %zu B, %u slots%s%s; MPI: %s\n", n, dom->describe().c_str(),
                cfg.opts.chunk_bytes, cfg.opts.slots, cfg.opts.forward_received ? ", forwarding" : "",
                cfg.buffers == "plain" ? "" : (", " + cfg.buffers + " buffers").c_str(),
                "OpenMPI (its default algorithms and transports)");
    std::printf(
        "# busbw as nccl-tests; %d rounds of alternating batches; times: median batch (slowest rank's "
        "average per call); ratio = fabrix busbw / MPI busbw, median and p25-p75 over rounds\n",
        cfg.rounds);
  }
  const double un = n;
  bool all_ok = true;
  for (const std::string& op : cfg.ops) {
    const bool is_ar = op == "allreduce", is_ag = op == "allgather", is_rs = op == "reduce_scatter",
               is_a2a = op == "alltoall";
    if (!is_ar && !is_ag && !is_rs && !is_a2a) continue;
    const double bus = is_ar ? 2 * (un - 1) / un : (un - 1) / un;
    if (rank == 0) {
      std::printf("\n# %s\n", op.c_str());
      std::printf("%12s %10s | %10s %9s %9s | %10s %9s %9s | %6s %11s %s\n", "size(B)", "count", "fabrix(us)", "algbw",
                  "busbw", "MPI(us)", "algbw", "busbw", "ratio", "p25-p75", "check");
    }
    for (std::size_t size = cfg.min_bytes; size <= cfg.max_bytes; size *= cfg.factor) {
      // Elements per rank block (allgather, reduce_scatter, alltoall) or in the vector (allreduce).
      const std::size_t elems = size / sizeof(float);
      const std::size_t block = is_ar ? elems : std::max<std::size_t>(1, elems / static_cast<std::size_t>(n));
      const std::size_t total = is_ar ? elems : block * static_cast<std::size_t>(n);
      if (total == 0) continue;
      const std::size_t bytes = total * sizeof(float);
      const std::size_t in_n = is_ag ? block : total, out_n = is_rs ? block : total;
      buffers b;
      if (auto r = b.make(*comm, cfg.buffers, in_n, out_n); !r) return fail("buffers", r.error());
      std::fill(b.out.begin(), b.out.end(), 0.0f);
      for (std::size_t i = 0; i < in_n; ++i) b.in[i] = static_cast<float>((rank + 3 * i) % 17);
      const int iters = static_cast<int>(std::clamp<std::size_t>((std::size_t{64} << 20) / bytes, 3, cfg.max_iters));
      const int ci = static_cast<int>(block);
      std::function<bool()> fab, mpi;
      if (is_ar) {
        fab = [&] { return bool(coll::allreduce(*comm, std::span<const float>(b.in), b.out, coll::reduce_op::sum)); };
        mpi = [&] {
          return MPI_Allreduce(b.in.data(), b.out.data(), ci, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS;
        };
      } else if (is_ag) {
        fab = [&] { return bool(coll::allgather(*comm, std::span<const float>(b.in), b.out)); };
        mpi = [&] {
          return MPI_Allgather(b.in.data(), ci, MPI_FLOAT, b.out.data(), ci, MPI_FLOAT, MPI_COMM_WORLD) == MPI_SUCCESS;
        };
      } else if (is_rs) {
        fab = [&] {
          return bool(coll::reduce_scatter(*comm, std::span<const float>(b.in), b.out, coll::reduce_op::sum));
        };
        mpi = [&] {
          return MPI_Reduce_scatter_block(b.in.data(), b.out.data(), ci, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) ==
                 MPI_SUCCESS;
        };
      } else {
        fab = [&] { return bool(coll::alltoall(*comm, std::span<const float>(b.in), b.out)); };
        mpi = [&] {
          return MPI_Alltoall(b.in.data(), ci, MPI_FLOAT, b.out.data(), ci, MPI_FLOAT, MPI_COMM_WORLD) == MPI_SUCCESS;
        };
      }
      // Correctness: fabrix's output must equal MPI's, element for element.
      int same = 1;
      if (cfg.check) {
        if (!fab()) return fail(op.c_str(), comm->health().error());
        const std::vector<float> mine(b.out.begin(), b.out.end());
        if (!mpi()) same = 0;
        same = same && std::equal(mine.begin(), mine.end(), b.out.begin(), b.out.end());
        int all_same = 0;
        MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        same = all_same;
        all_ok = all_ok && same;
      }
      timing t;
      const int calls = std::max(1, (iters + cfg.rounds - 1) / cfg.rounds);
      if (!time_pair(cfg.rounds, calls, fab, mpi, t)) return fail(op.c_str(), comm->health().error());
      if (rank == 0) {
        const double af = bytes / t.fabrix / 1e9, am = bytes / t.mpi / 1e9;
        std::printf("%12zu %10zu | %10.1f %9.3f %9.3f | %10.1f %9.3f %9.3f | %6.2f %5.2f-%-5.2f %s\n", bytes, total,
                    t.fabrix * 1e6, af, af * bus, t.mpi * 1e6, am, am * bus, t.ratio, t.ratio_lo, t.ratio_hi,
                    cfg.check ? (same ? "ok" : "MISMATCH") : "-");
        std::fflush(stdout);
      }
    }
  }
  if (rank == 0) std::printf("\n# GB/s = 1e9 bytes per second\n");
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  config cfg;
  if (!parse(argc, argv, cfg)) {
    if (rank == 0)
      std::fprintf(
          stderr,
          "usage: coll-perf [--op all|allreduce|allgather|reduce_scatter|alltoall] [--min B] [--max B] "
          "[--factor F] [--iters N] [--rounds R] [--chunk B] [--slots N] [--forward] [--registered|--allocated] "
          "[--transport UCX_TLS] "
          "[--no-check]\n");
    MPI_Finalize();
    return 2;
  }
  const int status = run(cfg, rank, n);  // fabrix objects are gone before MPI_Finalize
  MPI_Finalize();
  return status;
}
