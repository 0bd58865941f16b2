// Wiring a job together through a bootstrap: one queue pair per rank (a full
// mesh, including a loopback queue pair to self) and the exchange of
// remote_buffers. Collective: every rank calls them in the same order.
//
// Progress while waiting: the overloads taking `polled` drive `dom` while
// they wait in the bootstrap, so that peers whose operations need this
// rank's progress (P::caps.needs_target_progress: UCX over tcp or shared
// memory) are not stalled until the last rank arrives. They call
// dom.poll() on the calling thread, from inside the bootstrap call, and
// append every completion it returns to `polled` — nothing is dropped; handle
// them after the call as if your own poll() had returned them. Completions
// of awaited operations (co_await) are not returned: poll() resumes their
// coroutines right there, inside the bootstrap call, and such a coroutine
// must not call the bootstrap (that call returns invalid_argument).
// bootstrap_progress(dom, polled) is the same callback for your own
// bootstrap calls: boot.barrier(fabrix::bootstrap_progress(dom, polled)),
// or bootstrap_options::progress.
#pragma once

#include <fabrix/bootstrap.hpp>
#include <fabrix/completion.hpp>
#include <fabrix/domain.hpp>
#include <fabrix/remote_buffer.hpp>

#include <array>
#include <functional>
#include <string>
#include <vector>

namespace fabrix {

// A bootstrap progress callback that polls `dom` and keeps what it returns
// in `polled` (both must outlive the calls it is given to).
template <provider P>
std::function<void()> bootstrap_progress(domain<P>& dom, std::vector<completion>& polled) {
  return [&dom, &polled] {
    std::array<completion, 32> batch;
    // Bounded: the bootstrap call goes back to its sockets after a few batches.
    for (int round = 0; round < 8; ++round) {
      const std::size_t n = dom.poll(batch);
      polled.insert(polled.end(), batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(n));
      if (n < batch.size()) break;
    }
  };
}

namespace detail {

// Every rank's address blob, indexed by rank (one allgather), driving
// `progress` while it waits when one is given.
template <provider P>
result<std::vector<std::vector<std::byte>>> gather_addresses(domain<P>& dom, bootstrap& boot,
                                                             const std::function<void()>* progress) {
  auto mine = dom.address();
  if (!mine) return unexpected(std::move(mine).error());
  return progress ? boot.allgather(*mine, *progress) : boot.allgather(*mine);
}

template <provider P>
result<std::vector<queue_pair<P>>> connect_all_with(domain<P>& dom, bootstrap& boot,
                                                    const std::function<void()>* progress) {
  auto all = gather_addresses(dom, boot, progress);
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
  if (auto b = progress ? boot.barrier(*progress) : boot.barrier(); !b) return unexpected(b.error());
  return qps;
}

inline result<std::vector<remote_buffer>> exchange_with(bootstrap& boot, const remote_buffer& mine,
                                                        const std::function<void()>* progress) {
  const auto blob = mine.encode();
  auto all = progress ? boot.allgather(blob, *progress) : boot.allgather(blob);
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

}  // namespace detail

// queue_pairs[r] reaches rank r. Ends with a barrier, so when it returns
// every rank has created its endpoints.
template <provider P>
result<std::vector<queue_pair<P>>> connect_all(domain<P>& dom, bootstrap& boot) {
  return detail::connect_all_with(dom, boot, nullptr);
}
// The same, driving `dom` while it waits; the completions polled meanwhile
// are appended to `polled` (see the top of this file).
template <provider P>
result<std::vector<queue_pair<P>>> connect_all(domain<P>& dom, bootstrap& boot, std::vector<completion>& polled) {
  const auto progress = bootstrap_progress(dom, polled);
  return detail::connect_all_with(dom, boot, &progress);
}

// Every rank's remote_buffer for its region, indexed by rank.
inline result<std::vector<remote_buffer>> exchange(bootstrap& boot, const remote_buffer& mine) {
  return detail::exchange_with(boot, mine, nullptr);
}
// The same, driving `dom` while it waits; the completions polled meanwhile
// are appended to `polled`.
template <provider P>
result<std::vector<remote_buffer>> exchange(bootstrap& boot, const remote_buffer& mine, domain<P>& dom,
                                            std::vector<completion>& polled) {
  const auto progress = bootstrap_progress(dom, polled);
  return detail::exchange_with(boot, mine, &progress);
}

}  // namespace fabrix
