// Wiring a job together through a bootstrap: one queue pair per rank (a full
// mesh, including a loopback queue pair to self) and the exchange of
// remote_buffers. Collective: every rank calls them in the same order.
#pragma once

#include <fabrix/bootstrap.hpp>
#include <fabrix/domain.hpp>
#include <fabrix/remote_buffer.hpp>

#include <string>
#include <vector>

namespace fabrix {

// queue_pairs[r] reaches rank r. Ends with a barrier, so when it returns
// every rank has created its endpoints.
template <provider P>
result<std::vector<queue_pair<P>>> connect_all(domain<P>& dom, bootstrap& boot) {
  auto mine = dom.address();
  if (!mine) return unexpected(std::move(mine).error());
  auto all = boot.allgather(*mine);
  if (!all) return unexpected(std::move(all).error());
  std::vector<queue_pair<P>> qps;
  qps.reserve(all->size());
  for (std::size_t r = 0; r < all->size(); ++r) {
    auto qp = dom.connect((*all)[r], static_cast<std::uint32_t>(r));
    if (!qp) {
      auto e = std::move(qp).error();
      e.message = "connect to rank " + std::to_string(r) + ": " + e.message;
      return unexpected(std::move(e));
    }
    qps.push_back(std::move(*qp));
  }
  if (auto b = boot.barrier(); !b) return unexpected(b.error());
  return qps;
}

// Every rank's remote_buffer for its region, indexed by rank.
inline result<std::vector<remote_buffer>> exchange(bootstrap& boot, const remote_buffer& mine) {
  auto all = boot.allgather(mine.encode());
  if (!all) return unexpected(std::move(all).error());
  std::vector<remote_buffer> out;
  out.reserve(all->size());
  for (std::size_t r = 0; r < all->size(); ++r) {
    auto rb = remote_buffer::decode((*all)[r]);
    if (!rb) {
      auto e = std::move(rb).error();
      e.message = "from rank " + std::to_string(r) + ": " + e.message;
      return unexpected(std::move(e));
    }
    out.push_back(*rb);
  }
  return out;
}

}  // namespace fabrix
