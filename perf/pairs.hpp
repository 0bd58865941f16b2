// fabrix-perf under a launcher (mpirun -np N, srun): the job's ranks run as
// N/2 pairs at once, ranks 2p (server) and 2p + 1 (client) measuring between
// them, as osu_mbw_mr does; the client of pair 0 prints the report. Each
// pair sees a two-rank bootstrap: a view of the job's, whose every
// allgather/barrier is the job's (all pairs run the same steps, so the
// sequences match) keeping the pair's two blobs. Setup only: nothing here
// runs while a measurement is timed.
#pragma once

#include <fabrix/bootstrap.hpp>

#include <memory>
#include <string>
#include <utility>

namespace fabrix::perf {

class pair_view final : public bootstrap_engine {
 public:
  explicit pair_view(bootstrap job) : job_(std::move(job)) {}

  int pair() const noexcept { return job_.rank() / 2; }
  int pairs() const noexcept { return job_.size() / 2; }
  int rank() const noexcept override { return job_.rank() % 2; }
  int size() const noexcept override { return 2; }
  std::string describe() const override {
    return "pair " + std::to_string(pair()) + " of " + std::to_string(pairs()) + " (ranks " +
           std::to_string(2 * pair()) + "-" + std::to_string(2 * pair() + 1) + ") of " + job_.describe();
  }
  result<std::vector<std::vector<std::byte>>> allgather(std::span<const std::byte> mine,
                                                        const std::function<void()>* progress) override {
    auto all = progress != nullptr ? job_.allgather(mine, *progress) : job_.allgather(mine);
    if (!all) return unexpected(all.error());
    std::vector<std::vector<std::byte>> two;
    two.push_back(std::move((*all)[static_cast<std::size_t>(2 * pair())]));
    two.push_back(std::move((*all)[static_cast<std::size_t>(2 * pair() + 1)]));
    return two;
  }
  result<void> barrier(const std::function<void()>* progress) override {
    return progress != nullptr ? job_.barrier(*progress) : job_.barrier();
  }

 private:
  bootstrap job_;
};

}  // namespace fabrix::perf
