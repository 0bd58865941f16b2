// communicator::barrier() and the greeting every communicator::create()
// ends with: rounds of barrier notifications (notify.hpp) counted per peer
// and round in the channels (channel.hpp: barrier_seen). Out-of-class
// members of communicator (communicator.hpp includes this file).
#pragma once

#include <fabrix/collectives/communicator.hpp>

#include <cstdint>

namespace fabrix::coll {

template <provider P>
result<void> communicator<P>::barrier() {
  if (auto h = health(); !h) return h;
  const auto until = deadline();
  ++barrier_epoch_;
  int round = 0;
  for (int dist = 1; dist < size(); dist *= 2, ++round) {
    const int to = (rank() + dist) % size();
    const int from = (rank() - dist + size()) % size();
    if (auto r = notify_until(to, detail::notify_kind::barrier, static_cast<std::uint64_t>(round), until); !r) return r;
    while (channels_[from].barrier_seen[round] < barrier_epoch_) {
      if (auto r = idle(until); !r) return r;
    }
  }
  return finish(until);
}

template <provider P>
result<void> communicator<P>::greet_all() {
  const auto until = deadline();
  for (int p = 0; p < size(); ++p)
    if (p != rank())
      if (auto r = notify_until(p, detail::notify_kind::barrier, greet_round, until); !r) return r;
  for (int p = 0; p < size(); ++p) {
    while (p != rank() && channels_[p].barrier_seen[greet_round] == 0) {
      if (auto r = idle(until); !r) return r;
    }
  }
  return finish(until);
}

}  // namespace fabrix::coll
