// Giving bounce buffers back to the shared receive queue, a batch at a time:
// the buffers one ibv_poll_cq batch consumed go back as one chained
// ibv_post_srq_recv (one doorbell per batch, not one per message).
#pragma once

#include <fabrix/verbs/detail/state.hpp>

#include <infiniband/verbs.h>

#include <cstddef>

namespace fabrix::verbs::detail {

// Collects buffer indices and posts them chained. Single-threaded like the
// domain it belongs to. Posts what it holds when full, on post(), and on
// destruction, so a batch cut short by an exception (a completion ring that
// could not grow) still returns every buffer it took. A buffer is reposted
// only after its message was copied out (progress.hpp), so the delay until
// the batch ends costs the sender nothing but, at worst, an RNR retry when
// the whole queue was consumed in one batch.
class srq_refill {
 public:
  static constexpr std::size_t capacity = 32;  // drive()'s ibv_poll_cq batch

  explicit srq_refill(domain_state& d) noexcept : d_(d) {}
  srq_refill(const srq_refill&) = delete;
  srq_refill& operator=(const srq_refill&) = delete;
  ~srq_refill() { post(); }

  void add(std::uint64_t i) noexcept {
    if (n_ == capacity) post();
    sge_[n_] = ibv_sge{reinterpret_cast<std::uintptr_t>(d_.bounce_slot(i)), d_.opts.msg_size, d_.bounce_mr->lkey};
    wr_[n_] = ibv_recv_wr{};
    wr_[n_].wr_id = make_wr_id(wr_kind::srq_recv, i);
    wr_[n_].sg_list = &sge_[n_];
    wr_[n_].num_sge = 1;
    if (n_ > 0) wr_[n_ - 1].next = &wr_[n_];
    ++n_;
  }

  // Posts what is held. A refusal (the device's queue full: cannot happen
  // while at most srq_depth buffers exist) leaves the SRQ one batch short,
  // as the per-message post it replaces would have.
  void post() noexcept {
    if (n_ == 0) return;
    ibv_recv_wr* bad = nullptr;
    (void)ibv_post_srq_recv(d_.srq, wr_, &bad);
    n_ = 0;
  }

 private:
  domain_state& d_;
  ibv_recv_wr wr_[capacity];
  ibv_sge sge_[capacity];
  std::size_t n_ = 0;
};

}  // namespace fabrix::verbs::detail
