// fabrix::lazy_mesh<P> — queue pairs to the ranks of a job, each made the
// first time it is asked for instead of a full mesh up front
// (connect_all). One allgather of address blobs at create(); after that a
// rank's memory and endpoints grow with the peers it actually talks to.
//
// Which side connects. On ucx and ofi a queue pair made on one side only
// works for every operation aimed at the peer: the peer answers one-sided
// operations without a queue pair back (UCX: the request proves the
// initiator holds the peer's address blob, providers/ucx/README.md; ofi: the
// endpoint is connectionless). Messages (send/recv) and write_with_imm
// notifications name their sender by queue pair: a peer that receives them
// calls to(sender) before it polls for them. On verbs connect() is
// symmetric (an RC QP is built by both sides at once, providers/verbs), so
// there both ranks must call to() for each other, in the same order per
// pair, as with connect_all. cuda_ipc: not tested from one side (no GPU in
// the test machines).
//
// Lifetime: the domain outlives the mesh and does not move while it lives
// (the mesh keeps its address). Queue pairs live until the mesh is
// destroyed. Threading: as the domain, one thread at a time.
#pragma once

#include <fabrix/bootstrap.hpp>
#include <fabrix/connect.hpp>
#include <fabrix/domain.hpp>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fabrix {

template <provider P>
class lazy_mesh {
 public:
  // Collective: every rank calls it (one allgather of address blobs).
  static result<lazy_mesh> create(domain<P>& dom, bootstrap& boot) { return create_with(dom, boot, nullptr); }
  // The same, driving `dom` while it waits; what it polled meanwhile is
  // appended to `polled` (connect.hpp).
  static result<lazy_mesh> create(domain<P>& dom, bootstrap& boot, std::vector<completion>& polled) {
    const auto progress = bootstrap_progress(dom, polled);
    return create_with(dom, boot, &progress);
  }

  // The queue pair to `rank` (its peer_id() is `rank`), connected by this
  // call if it is the first for that rank. out_of_range for a rank not in
  // the job; a failed connect is returned and tried again by the next call.
  result<queue_pair<P>*> to(std::size_t rank) {
    if (rank >= qps_.size())
      return unexpected(status::out_of_range,
                        "lazy_mesh: rank " + std::to_string(rank) + " of a job of " + std::to_string(qps_.size()));
    auto& slot = qps_[rank];
    if (!slot) {
      auto qp = dom_->connect(addresses_[rank], static_cast<std::uint32_t>(rank));
      if (!qp) {
        auto e = std::move(qp).error();
        e.message = "lazy_mesh: connect to rank " + std::to_string(rank) + ": " + e.message;
        return unexpected(std::move(e));
      }
      slot.emplace(std::move(*qp));
      ++connected_;
    }
    return &*slot;
  }

  std::size_t size() const noexcept { return qps_.size(); }
  // Queue pairs made so far.
  std::size_t connected() const noexcept { return connected_; }

 private:
  lazy_mesh(domain<P>& dom, std::vector<std::vector<std::byte>> addresses)
      : dom_(&dom), addresses_(std::move(addresses)), qps_(addresses_.size()) {}

  static result<lazy_mesh> create_with(domain<P>& dom, bootstrap& boot, const std::function<void()>* progress) {
    auto all = detail::gather_addresses(dom, boot, progress);
    if (!all) return unexpected(std::move(all).error());
    return lazy_mesh(dom, std::move(*all));
  }

  domain<P>* dom_;
  std::vector<std::vector<std::byte>> addresses_;  // rank r's address blob
  std::vector<std::optional<queue_pair<P>>> qps_;
  std::size_t connected_ = 0;
};

}  // namespace fabrix
