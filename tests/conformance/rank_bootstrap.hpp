// Which bootstrap engine the harness's ranks run on (FABRIX_TEST_BOOTSTRAP),
// so that the conformance and collectives suites pass over every engine
// that runs here, not only over the built-in TCP store:
//
//   unset or "tcp"  ranks are forked by run_ranks; rank 0 hosts the built-in
//                   TCP store (bootstrap::listen / create).
//   "callbacks"     ranks are forked by run_ranks; each one's bootstrap is
//                   bootstrap::from_callbacks over a file_store: a fresh
//                   directory in which the n-th allgather of every rank is
//                   one file, the way a framework's own key-value service
//                   would carry the blobs between processes.
//   "launcher"      this process is one rank of a job a launcher started
//                   (mpirun -np N). The job's bootstrap is made once per
//                   process: launcher_bootstrap (set by main_mpi.cpp to
//                   fabrix::mpi::bootstrap(MPI_COMM_WORLD)) or else
//                   bootstrap::from_env() (PMIx under mpirun when fabrix has
//                   it). A case of n <= N ranks runs on ranks 0..n-1 through
//                   a subset_view of the job's bootstrap; ranks n..N-1 stand
//                   by, answering its collectives, until the case is over.
#pragma once

#include <fabrix/bootstrap.hpp>
#include <fabrix/bootstrap_engine.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fxt {

enum class rank_start { tcp, callbacks, launcher };

// FABRIX_TEST_BOOTSTRAP, or nullopt (with the reason in `why`) when it names
// nothing known.
inline std::optional<rank_start> rank_start_from_env(std::string& why) {
  const char* v = std::getenv("FABRIX_TEST_BOOTSTRAP");
  const std::string s = v ? v : "";
  if (s.empty() || s == "tcp") return rank_start::tcp;
  if (s == "callbacks") return rank_start::callbacks;
  if (s == "launcher") return rank_start::launcher;
  why = "FABRIX_TEST_BOOTSTRAP=" + s + " is not tcp, callbacks or launcher";
  return std::nullopt;
}

// A store of files for bootstrap::from_callbacks across forked ranks. Made
// by the supervising process before it forks; the round counter of each
// rank lives in that rank's own copy. A blob goes in under a temporary name
// and is renamed into place, so a reader sees all of it or nothing. The
// supervisor removes the directory (remove()) once the ranks have ended.
class file_store {
 public:
  explicit file_store(int size) : size_(size) {
    char tmpl[] = "/tmp/fabrix-test-store-XXXXXX";
    if (::mkdtemp(tmpl) != nullptr) dir_ = tmpl;
  }
  file_store(const file_store&) = delete;
  file_store& operator=(const file_store&) = delete;

  bool ok() const noexcept { return !dir_.empty(); }

  fabrix::bootstrap_callbacks callbacks_for(int rank) {
    fabrix::bootstrap_callbacks cb;
    cb.rank = rank;
    cb.size = size_;
    cb.name = "file store at " + dir_;
    auto rounds = std::make_shared<std::uint64_t>(0);
    cb.allgather_start = [this, rank, rounds](const std::byte* mine, std::byte* out,
                                              std::size_t bytes) -> fabrix::result<void*> {
      const std::uint64_t round = ++*rounds;
      const std::string final_name = path(round, rank);
      const std::string temp = final_name + ".part";
      if (!write_file(temp, mine, bytes) || ::rename(temp.c_str(), final_name.c_str()) != 0)
        return fabrix::unexpected(fabrix::status::provider_error, "file store: writing " + final_name + " failed",
                                  "file store");
      return static_cast<void*>(new request{round, out, bytes});
    };
    cb.test = [this](void* p) -> fabrix::result<bool> {
      auto* r = static_cast<request*>(p);
      for (int from = 0; from < size_; ++from) {
        const int fd = ::open(path(r->round, from).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return false;  // not there yet
        const ssize_t got = ::read(fd, r->out + static_cast<std::size_t>(from) * r->bytes, r->bytes);
        ::close(fd);
        if (got != static_cast<ssize_t>(r->bytes))
          return fabrix::unexpected(fabrix::status::invalid_argument,
                                    "file store: rank " + std::to_string(from) + "'s blob has the wrong size",
                                    "file store");
      }
      return true;
    };
    cb.release = [](void* p, bool) { delete static_cast<request*>(p); };
    return cb;
  }

  // Removes the directory and its files (supervisor, after the ranks).
  void remove() {
    if (dir_.empty()) return;
    std::string cmd = "rm -rf '" + dir_ + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "file store: could not remove %s\n", dir_.c_str());
    dir_.clear();
  }

 private:
  struct request {
    std::uint64_t round;
    std::byte* out;
    std::size_t bytes;
  };
  std::string path(std::uint64_t round, int rank) const {
    return dir_ + "/" + std::to_string(round) + "." + std::to_string(rank);
  }
  static bool write_file(const std::string& name, const std::byte* data, std::size_t bytes) {
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    std::size_t done = 0;
    while (done < bytes) {
      const ssize_t n = ::write(fd, data + done, bytes - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    return ::close(fd) == 0 && done == bytes;
  }

  int size_;
  std::string dir_;
};

// Set by a runner that owns the job's bootstrap (main_mpi.cpp); null: the
// launcher's bootstrap from the environment (bootstrap::from_env()).
inline fabrix::result<fabrix::bootstrap> (*launcher_bootstrap)() = nullptr;

inline std::optional<fabrix::bootstrap>& launcher_job_slot() {
  static std::optional<fabrix::bootstrap> job;
  return job;
}

// The job's bootstrap in launcher mode, made on first use and kept until
// end_launcher_job() (a PMIx or MPI runtime is set up once per process).
// Says which engine it runs on once, on stdout ("launcher bootstrap: ...").
inline fabrix::bootstrap& launcher_job() {
  auto& job = launcher_job_slot();
  if (!job) {
    auto made = launcher_bootstrap != nullptr ? launcher_bootstrap() : fabrix::bootstrap::from_env();
    if (!made) {
      std::fprintf(stderr, "launcher bootstrap: %s\n", made.error().describe().c_str());
      std::_Exit(1);
    }
    job.emplace(std::move(*made));
    std::printf("launcher bootstrap: rank %d of %d: %s\n", job->rank(), job->size(), job->describe().c_str());
    std::fflush(stdout);
  }
  return *job;
}

// Ends the job's bootstrap (before MPI_Finalize, which its communicator
// must not outlive).
inline void end_launcher_job() { launcher_job_slot().reset(); }

// A page of memory every rank of a case sees, made before run_ranks by
// every process that runs the case: for forked ranks an anonymous shared
// mapping they inherit; under a launcher, whose ranks are not forked from
// one process, a POSIX shared-memory object named after the launcher's job
// (PMIX_NAMESPACE, else the parent's pid) and the n-th page this process
// made, so that the ranks of one job open the same one. Starts zeroed.
class shared_page {
 public:
  static constexpr std::size_t bytes = 4096;

  shared_page() {
    std::string why;
    const auto start = rank_start_from_env(why);
    if (start == rank_start::launcher) {
      static unsigned made = 0;
      const char* job = std::getenv("PMIX_NAMESPACE");
      name_ = "/fabrix-test-" + (job ? std::string(job) : std::to_string(::getppid())) + "-" + std::to_string(++made);
      const int fd = ::shm_open(name_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
      if (fd >= 0) {
        if (::ftruncate(fd, bytes) == 0) at_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ::close(fd);
      }
    } else {
      at_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    }
    if (at_ == MAP_FAILED) at_ = nullptr;
  }
  ~shared_page() {
    if (at_ != nullptr) ::munmap(at_, bytes);
    if (!name_.empty()) ::shm_unlink(name_.c_str());  // the first to leave removes the name; the others find none
  }
  shared_page(const shared_page&) = delete;
  shared_page& operator=(const shared_page&) = delete;

  // Null when the page could not be made.
  void* data() const noexcept { return at_; }

 private:
  void* at_ = nullptr;
  std::string name_;
};

// Ranks 0..n-1 of a launcher's job as an n-rank bootstrap. Every allgather
// and barrier of the view is one allgather of the whole job whose blobs
// carry a state byte: `active` from the ranks of the view; ranks outside it
// send `idle` from stand_by() until the view's ranks have all sent
// `finished` (finish(), after the case).
class subset_view final : public fabrix::bootstrap_engine {
 public:
  static constexpr std::byte idle{0}, active{1}, finished{2};

  subset_view(fabrix::bootstrap& job, int n) : job_(job), n_(n) {}

  int rank() const noexcept override { return job_.rank(); }
  int size() const noexcept override { return n_; }
  std::string describe() const override { return "ranks 0-" + std::to_string(n_ - 1) + " of " + job_.describe(); }
  fabrix::result<std::vector<std::vector<std::byte>>> allgather(std::span<const std::byte> mine,
                                                                const std::function<void()>* progress) override {
    std::vector<std::byte> framed(mine.size() + 1);
    framed[0] = active;
    if (!mine.empty()) std::memcpy(framed.data() + 1, mine.data(), mine.size());
    auto all = progress != nullptr && *progress ? job_.allgather(framed, *progress) : job_.allgather(framed);
    if (!all) return fabrix::unexpected(all.error());
    std::vector<std::vector<std::byte>> view;
    for (int r = 0; r < n_; ++r) {
      auto& b = (*all)[static_cast<std::size_t>(r)];
      if (b.empty() || b[0] != active)
        return fabrix::unexpected(fabrix::status::provider_error,
                                  "subset view: rank " + std::to_string(r) + " is not in step with this collective",
                                  "harness");
      view.emplace_back(b.begin() + 1, b.end());
    }
    return view;
  }
  fabrix::result<void> barrier(const std::function<void()>* progress) override {
    auto r = allgather({}, progress);
    if (!r) return fabrix::unexpected(r.error());
    return {};
  }

  // This rank of the view is done with the case.
  fabrix::result<void> finish() {
    const std::byte done[1] = {finished};
    auto all = job_.allgather(done);
    if (!all) return fabrix::unexpected(all.error());
    return {};
  }

  // A rank outside the view: answers the view's collectives until every
  // rank of it has finished.
  static fabrix::result<void> stand_by(fabrix::bootstrap& job, int n) {
    const std::byte waiting[1] = {idle};
    for (;;) {
      auto all = job.allgather(waiting);
      if (!all) return fabrix::unexpected(all.error());
      int done = 0;
      for (int r = 0; r < n; ++r) {
        const auto& b = (*all)[static_cast<std::size_t>(r)];
        if (b.size() == 1 && b[0] == finished) ++done;
      }
      if (done == n) return {};
    }
  }

 private:
  fabrix::bootstrap& job_;
  int n_;
};

}  // namespace fxt
