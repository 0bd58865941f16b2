// What one measurement produced, and the arithmetic that turns samples into
// the perftest columns. Samples are preallocated by the caller; nothing here
// runs inside a timed loop.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

namespace fabrix::perf {

struct bw_result {
  std::uint64_t bytes = 0;       // message size
  std::uint64_t iterations = 0;  // timed operations (this side)
  double seconds = 0;
  double peak_bytes_per_s = 0;  // best window of the run
  double avg_bytes_per_s = 0;   // this side, or both sides with -b
  double msg_rate_mpps = 0;
};

struct lat_result {
  std::uint64_t bytes = 0;
  std::uint64_t iterations = 0;
  double t_min_us = 0, t_max_us = 0, t_typical_us = 0, t_avg_us = 0, t_stdev_us = 0, t_p99_us = 0, t_p999_us = 0;
};

// Sorts `us` in place. Percentiles by the nearest-rank method.
inline lat_result latency_stats(std::span<double> us, std::uint64_t bytes) {
  lat_result r;
  r.bytes = bytes;
  r.iterations = us.size();
  if (us.empty()) return r;
  std::sort(us.begin(), us.end());
  auto rank = [&](double q) {
    const auto k = static_cast<std::size_t>(std::ceil(q * static_cast<double>(us.size())));
    return us[std::min(us.size() - 1, k == 0 ? 0 : k - 1)];
  };
  double sum = 0;
  for (double v : us) sum += v;
  r.t_avg_us = sum / static_cast<double>(us.size());
  double var = 0;
  for (double v : us) var += (v - r.t_avg_us) * (v - r.t_avg_us);
  r.t_stdev_us = std::sqrt(var / static_cast<double>(us.size()));
  r.t_min_us = us.front();
  r.t_max_us = us.back();
  r.t_typical_us = rank(0.5);
  r.t_p99_us = rank(0.99);
  r.t_p999_us = rank(0.999);
  return r;
}

}  // namespace fabrix::perf
