// How a UCX operation moves from posted to completed. UCX calls back from
// inside ucp_worker_progress; callbacks only count down and queue work —
// every new UCX call a stage needs is made from run_deferred(), after
// progress has returned, never from inside a callback. That includes
// starting parked ops (a flush or fenced op whose wait is over, and the ops
// behind it): callbacks only set domain_state::start_parked.
// A finished op becomes a completion in deliver(); an unsignaled one that
// succeeded only counts in its peer's `finished`.
#pragma once

#include <fabrix/ucx/detail/state.hpp>
#include <fabrix/ucx/detail/status.hpp>

#include <algorithm>
#include <cstring>

namespace fabrix::ucx::detail {

inline void stage_done(op_slot* op);
inline void send_replies(domain_state& d);         // rma.hpp
inline void start_op(peer_state& p, op_slot* op);  // post.hpp
inline void start_parked(peer_state& p);           // post.hpp

// Returns a finished slot to its pool, letting go of its rkey.
inline void release_slot(op_slot* op) noexcept {
  if (op->rkey != nullptr) rkey_cache::release(op->rkey);
  op->rkey = nullptr;
  if (op->from_recv_pool) {
    op->dom->recvs.give_back(op);
    op->from_recv_pool = true;  // give_back reset the slot
  } else {
    op->dom->ops.give_back(op);
  }
}

// One UCX request of the op's current stage finished with `s`.
inline void request_done(op_slot* op, ucs_status_t s) noexcept {
  if (s != UCS_OK && op->first_error == UCS_OK) op->first_error = s;
  if (--op->pending != 0) return;
  if (op->abandoned) {  // its completion went out when the peer died
    release_slot(op);
    return;
  }
  stage_done(op);
}

inline void on_send_done(void* request, ucs_status_t s, void* user) {
  auto* op = static_cast<op_slot*>(user);
  op->request = nullptr;
  request_done(op, s);
  ucp_request_free(request);
}

// Recvs use a generic datatype (domain_state::recv_dt) whose size is
// unbounded, so UCX never truncates: unpack() keeps what fits in the buffer
// (the message's first bytes), and the completion says truncated when the
// message was longer. (UCX itself copies nothing of a fragment that does not
// fit: UCS_ERR_MESSAGE_TRUNCATED with the buffer's bytes undefined.)
inline void* recv_start_unpack(void*, void* buffer, size_t) { return buffer; }  // buffer: the op slot
inline void* recv_start_pack(void*, const void*, size_t) { return nullptr; }
inline size_t recv_packed_size(void*) { return std::size_t{1} << 46; }
inline size_t recv_pack(void*, size_t, void*, size_t) { return 0; }
inline ucs_status_t recv_unpack(void* state, size_t offset, const void* src, size_t length) {
  auto* op = static_cast<op_slot*>(state);
  const std::size_t cap = op->local[0].length;
  if (offset < cap)
    std::memcpy(static_cast<std::byte*>(op->local[0].buffer) + offset, src, std::min(length, cap - offset));
  op->recv_length = std::max<std::uint64_t>(op->recv_length, offset + length);
  return UCS_OK;
}
inline void recv_finish(void*) {}
inline ucp_generic_dt_ops_t recv_dt_ops{recv_start_pack, recv_start_unpack, recv_packed_size,
                                        recv_pack,       recv_unpack,       recv_finish};

inline void on_recv_done(void* request, ucs_status_t s, const ucp_tag_recv_info_t* info, void* user) {
  auto* op = static_cast<op_slot*>(user);
  if (s == UCS_OK && info) {
    const std::uint64_t cap = op->local[0].length;
    op->c.bytes = std::min<std::uint64_t>(info->length, cap);
    if (info->length > cap) s = UCS_ERR_MESSAGE_TRUNCATED;  // the buffer holds the first `cap` bytes
  }
  op->request = nullptr;
  request_done(op, s);
  ucp_request_free(request);
}

// Accounts for one posted request: immediate completion, immediate error,
// or a request whose callback comes later.
inline void track(op_slot* op, ucs_status_ptr_t p) noexcept {
  ++op->pending;
  if (UCS_PTR_IS_PTR(p)) {
    op->request = p;
    return;
  }
  request_done(op, UCS_PTR_STATUS(p));
}

// track() for a receive posted with UCP_OP_ATTR_FLAG_NO_IMM_CMPL: UCX runs
// the callback inside the call itself when the message has already arrived
// (and frees the request there), so the request is counted before the call
// and its pointer kept only if the callback has not run yet.
template <class Post>
inline void track_recv(op_slot* op, Post&& post) {
  const std::uint32_t counted = ++op->pending;
  const ucs_status_ptr_t p = post();
  if (!UCS_PTR_IS_PTR(p)) {
    request_done(op, UCS_PTR_STATUS(p));
  } else if (op->pending == counted) {
    op->request = p;
  }
}

inline ucp_request_param_t request_param(op_slot* op) noexcept {
  ucp_request_param_t prm{};
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  prm.cb.send = on_send_done;
  prm.user_data = op;
  return prm;
}

inline void fail_peer(domain_state& d, peer_state& p, ucs_status_t why);

// Whatever waited on the peer's notifications and checked requests may
// start: run_deferred starts its parked ops (safe inside callbacks).
inline void wake_parked(domain_state& d, peer_state& p) noexcept {
  if (!p.parked.empty()) d.start_parked = true;
}

// Pushes the op's completion and settles write_with_imm accounting. An
// unsignaled op is counted in its peer's `finished` and pushes nothing
// unless it failed.
inline void deliver(op_slot* op) {
  domain_state& d = *op->dom;
  op->c.status = op->first_error != UCS_OK ? to_status(op->first_error) : op->remote_status;
  op->c.native_code = static_cast<std::int32_t>(op->first_error);
  if (op->c.status != status::ok && op->c.op != opcode::recv) op->c.bytes = 0;
  if (op->unsignaled && op->peer) ++op->peer->finished;
  if (!op->unsignaled || op->c.status != status::ok) d.ring.push(op->c);
  if (op->peer && op->c.status == status::peer_unreachable && !op->peer->failed) {
    // The endpoint is broken (without UCX's peer-failure mode this is how it
    // shows): it is never reused, and what else waits on it ends now.
    fail_peer(d, *op->peer, op->first_error);
  }
  if (op->imm_started && op->peer) {
    op->imm_started = false;
    peer_state& p = *op->peer;
    if (--p.imm_in_progress == 0 && p.checked_in_flight == 0) wake_parked(d, p);
  }
}

// A checked request's reply is in (or will never come): the peer's count of
// them drops, and what waited for it to reach zero moves on.
inline void checked_done(op_slot* op) {
  op->checked = false;
  if (op->peer == nullptr) return;
  peer_state& p = *op->peer;
  if (--p.checked_in_flight != 0) return;
  domain_state& d = *op->dom;
  while (op_slot* w = p.parked_imms.pop_front()) d.deferred.push_back(w);
  if (p.imm_in_progress == 0) wake_parked(d, p);
}

// Delivers the completion and returns the slot to the pool.
inline void complete(op_slot* op) {
  deliver(op);
  op->in_use = false;
  release_slot(op);
}

inline void stage_done(op_slot* op) {
  if (op->peer == nullptr && op->first_error == UCS_OK) op->first_error = UCS_ERR_CANCELED;  // detached
  if (op->checked) checked_done(op);
  const bool ok = op->first_error == UCS_OK && op->remote_status == status::ok;
  if (op->flushing) {  // an endpoint flush ended: what it covered is at the target
    op->flushing = false;
    if (peer_state* p = op->peer) {
      --p->flushes_in_flight;
      if (ok && op->flush_mark > p->native_flushed) p->native_flushed = op->flush_mark;
      if (ok && op->flush_rma_mark > p->rma_flushed) p->rma_flushed = op->flush_rma_mark;
      // Notifications that waited for it look again (run_deferred): covered
      // now, or a later flush to wait for or to post.
      while (op_slot* w = p->flush_waiters.pop_front()) op->dom->deferred.push_back(w);
    }
  }
  if (op->st == stage::fence_flush) {
    if (ok) {  // everything before it is at the target: it starts (run_deferred), still before later ops
      op->st = stage::fence_start;
      op->dom->deferred.push_back(op);
      return;
    }
    if (op->peer) {  // what waited behind it goes on (and fails or not) by itself
      op->peer->fence_flushing = false;
      wake_parked(*op->dom, *op->peer);
    }
  }
  if (op->delivered && op->st == stage::data && ok) {
    op->st = stage::delivery_flush;
    op->dom->deferred.push_back(op);
    return;
  }
  if (op->c.op == opcode::write_with_imm && op->first_error == UCS_OK && op->remote_status == status::ok) {
    if (op->st == stage::data) {
      op->st = stage::imm_flush;
      // Checked requests posted earlier on this queue pair must be in place
      // before the notification goes (their replies say so).
      if (op->peer->checked_in_flight > 0)
        op->peer->parked_imms.push_back(op);
      else
        op->dom->deferred.push_back(op);
      return;
    }
    if (op->st == stage::imm_flush) {
      op->st = stage::imm_notify;
      op->dom->deferred.push_back(op);
      return;
    }
  }
  complete(op);
}

// Posts an endpoint flush as the op's current stage.
inline void post_ep_flush(peer_state& p, op_slot* op) {
  ucp_request_param_t prm = request_param(op);
  op->flush_mark = p.native_posted;
  op->flush_rma_mark = p.rma_posted;
  op->flushing = true;
  ++p.flushes_in_flight;
  p.rma_flush_posted = p.rma_posted;
  track(op, ucp_ep_flush_nbx(p.ep, &prm));
}

// The body of run_deferred, out of line: most polls have nothing to do.
[[gnu::noinline]] inline void run_deferred_work(domain_state& d) {
  do {
    while (op_slot* op = d.deferred.pop_front()) {
      if (op->peer == nullptr || op->peer->failed) {
        const ucs_status_t why = op->peer ? op->peer->failure : UCS_ERR_CANCELED;
        if (op->first_error == UCS_OK) op->first_error = why != UCS_OK ? why : UCS_ERR_CANCELED;
        complete(op);
        continue;
      }
      peer_state& p = *op->peer;
      if (op->st == stage::fence_start) {  // its fence flush is done: it starts, then what waits behind it
        p.fence_flushing = false;
        op->st = stage::data;
        start_op(p, op);
        wake_parked(d, p);
        continue;
      }
      if (op->st == stage::imm_flush) {
        // The notification follows every native put and atomic posted before
        // it: none since the last completed flush, and it goes now; one
        // already covered by a flush in flight, and it waits for that flush.
        if (p.rma_flushed >= p.rma_posted) {
          op->st = stage::imm_notify;
        } else if (p.flushes_in_flight > 0 && p.rma_flush_posted >= p.rma_posted) {
          p.flush_waiters.push_back(op);
          continue;
        }
      }
      op->pending = 1;
      if (op->st == stage::imm_notify) {
        ucp_request_param_t prm = request_param(op);
        ++p.native_posted;
        track(op, ucp_am_send_nbx(p.ep, am_notify, &op->header, sizeof(op->header), nullptr, 0, &prm));
      } else {  // imm_flush, delivery_flush
        post_ep_flush(p, op);
      }
      request_done(op, UCS_OK);
    }
    if (d.start_parked) {
      d.start_parked = false;
      for (peer_state* p : d.connected)
        if (!p->parked.empty()) start_parked(*p);
    }
  } while (!d.deferred.empty() || d.start_parked);
  if (d.replies_head != nullptr) send_replies(d);
}

// Starts the next stage of every queued op, then the parked ops that may
// start now, then sends queued replies. Called by poll()/wait() after
// ucp_worker_progress, and by teardown. An idle call is three loads.
inline void run_deferred(domain_state& d) {
  if (!d.deferred.empty() || d.start_parked || d.replies_head != nullptr) run_deferred_work(d);
}

// Active-message handler for notifications: queues a remote_write_imm
// completion. A malformed header from a peer is counted and dropped.
inline ucs_status_t on_notify(void* arg, const void* header, size_t header_length, void*, size_t,
                              const ucp_am_recv_param_t*) {
  auto* d = static_cast<domain_state*>(arg);
  notify_header h;
  if (header_length != sizeof(h)) {
    ++d->dropped_notifications;
    return UCS_OK;
  }
  std::memcpy(&h, header, sizeof(h));
  if (h.magic != notify_magic) {
    ++d->dropped_notifications;
    return UCS_OK;
  }
  completion c{};
  c.op = opcode::remote_write_imm;
  c.imm = h.imm;
  c.bytes = h.bytes;
  const peer_state* from = d->find_peer(h.sender);
  c.peer = from ? from->peer_id : unknown_peer;
  d->ring.push(c);
  return UCS_OK;
}

// A checked request whose reply will not come (its peer failed or its queue
// pair closed) stops waiting for it.
inline void drop_reply(op_slot* op, ucs_status_t why) noexcept {
  if (!op->awaiting_reply) return;
  op->awaiting_reply = false;
  request_done(op, why);
}

// The peer is gone: later posts are refused, and every operation waiting on
// it completes now with `why` — recvs included: they wait in the worker's tag
// matching, not on the endpoint, so UCX never fails them; they are canceled
// after progress (cancel_recvs). UCX keeps the other requests; the slots
// return to the pool only when UCX completes them. Makes no UCX call, so it is
// safe inside callbacks; queued stages of the peer's ops end in run_deferred().
inline void fail_peer(domain_state& d, peer_state& p, ucs_status_t why) {
  p.failed = true;
  p.failure = why;
  while (op_slot* f = p.parked.pop_front()) d.deferred.push_back(f);
  while (op_slot* w = p.parked_imms.pop_front()) d.deferred.push_back(w);
  while (op_slot* w = p.flush_waiters.pop_front()) d.deferred.push_back(w);
  d.each_slot([&](op_slot* op) {
    if (!op->in_use || op->abandoned || op->peer != &p || op->pending == 0) return;
    if (op->first_error == UCS_OK) op->first_error = why;
    op->abandoned = true;
    if (op->c.op == opcode::recv) d.cancel_abandoned_recvs = true;
    deliver(op);
    drop_reply(op, why);  // may release the slot
  });
}

// Cancels the UCX requests of recvs whose completion went out early (their
// peer failed). Not from inside a callback.
inline void cancel_recvs(domain_state& d) {
  if (!d.cancel_abandoned_recvs) return;
  d.cancel_abandoned_recvs = false;
  for (op_slot* op = d.recvs.begin(); op != d.recvs.end(); ++op)
    if (op->in_use && op->abandoned && op->request) ucp_request_cancel(d.worker, op->request);
}

// Looks at the watched peers, at most once per liveness period.
[[gnu::noinline]] inline void check_liveness_at(domain_state& d, std::chrono::steady_clock::time_point now) {
  if (!d.liveness.due(now, fabrix::detail::liveness_period)) return;
  bool failed = false;
  for (peer_state* p : d.watched) {
    if (!p->failed && process_gone(p->identity)) {
      // What the peer sent before it died (e.g. get replies still in a
      // socket or fifo) is taken in first, so that it lands in buffers whose
      // operations have not been reported done yet — not after.
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
      while (ucp_worker_progress(d.worker) != 0 && std::chrono::steady_clock::now() < until) {
        if (d.replies_head != nullptr) send_replies(d);  // before the next progress (reply_ep)
      }
      fail_peer(d, *p, UCS_ERR_CONNECTION_RESET);
      failed = true;
    }
  }
  if (failed) run_deferred(d);  // end the dead peers' queued stages now
}

// Throttled: looks at watched peers about every 100 ms of polling; the
// clock is read on one call in 64 (poll_clock), the rest are a count.
inline void check_liveness(domain_state& d) {
  if (d.watched.empty()) return;
  if (std::chrono::steady_clock::time_point now; d.poll_clock.sample(now)) check_liveness_at(d, now);
}

// UCX gave up on the peer (error-handling endpoints): everything on it ends
// now, recvs included.
inline void on_peer_error(void* arg, ucp_ep_h, ucs_status_t s) {
  auto* p = static_cast<peer_state*>(arg);
  if (p->failed) {  // closing (which watches `failure`), or already failed
    if (p->failure == UCS_OK) p->failure = s;
    return;
  }
  fail_peer(*p->dom, *p, s);
}

}  // namespace fabrix::ucx::detail
