// How an operation moves from posted to completed, and what the CQ says.
//
// Completions: fi_cq_read (FI_CQ_FORMAT_DATA) drives progress and returns
// finished operations, whose context is their op_slot. An entry flagged
// FI_REMOTE_CQ_DATA is a peer's write_with_imm landing here: it becomes a
// remote_write_imm completion. Error entries (-FI_EAVAIL) are read with
// fi_cq_readerr; the operation completes with the matching fabrix status and
// native_code = -FI_E*, and fi_strerror / fi_cq_strerror text goes to
// domain_state::last_error.
//
// Parked operations (post.hpp) start from drain(), after completions have
// been handled — never from inside a libfabric call.
#pragma once

#include <fabrix/ofi/detail/state.hpp>
#include <fabrix/ofi/detail/status.hpp>

#include <rdma/fi_atomic.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <chrono>
#include <cstring>
#include <string>

namespace fabrix::ofi::detail {

// Operations that wait, parked, until nothing earlier is in flight on
// their queue pair (see post.hpp): flush, write_with_imm, and any operation
// posted with op_options::fence.
inline bool needs_quiet(const op_slot& op) noexcept {
  return op.fenced || op.c.op == opcode::flush || op.c.op == opcode::write_with_imm;
}

// Pushes the completion of `op` with status `s` and returns the slot. An
// unsignaled operation (op_options::unsignaled) is counted in its queue
// pair's finished() instead, and pushes a completion only when it failed:
// no software completion per successful unsignaled operation.
inline void finish(domain_state& d, op_slot* op, status s, int native = 0) {
  if (op->counted && op->peer) --op->peer->inflight;
  if (op->unsignaled) {
    if (op->peer) ++op->peer->finished;
    if (s == status::ok) {
      release_slot(d, op);
      return;
    }
  }
  op->c.status = s;
  op->c.native_code = native;
  if (s != status::ok && !(op->c.op == opcode::recv && s == status::truncated)) op->c.bytes = 0;
  d.ring.push(op->c);
  release_slot(d, op);
}

// The peer is gone: later posts are refused, parked operations complete now,
// and posted ones complete now too (libfabric may return them later; their
// slots go back to the pool then).
// `why`: the FI_E* (positive) reported, the native code of the completions;
// `s`: their status (by default what `why` maps to).
inline void fail_peer(domain_state& d, peer_state& p, int why, status s) {
  if (p.failed) return;
  p.failed = true;
  p.failure = why;
  p.failure_status = s;
  while (op_slot* op = p.parked.pop_front()) finish(d, op, s, -why);
  for (op_slot* op = d.ops.begin(); op != d.ops.end(); ++op) {
    if (op->st != slot_state::posted || op->peer != &p) continue;
    if (op->counted) --p.inflight;
    op->counted = false;
    op->st = slot_state::abandoned;
    completion c = op->c;
    c.status = s;
    c.native_code = -why;
    if (c.op != opcode::recv) c.bytes = 0;
    if (op->unsignaled) ++p.finished;  // failed: counted, and its error completion goes out
    d.ring.push(c);
  }
}

// An operation through a dead key waits (in domain_state::stale, never in
// libfabric) for one liveness period before it completes: a peer that
// leaves deregisters its regions first and closes its domain right after,
// and its peers' operations must then say peer_unreachable, not stale_key
// (resolve_stale).
// It counts as in flight on its queue pair, so that a flush or fenced
// operation posted after it waits for its verdict.
inline void hold_stale(domain_state& d, op_slot* op) {
  op->st = slot_state::parked;
  op->counted = true;
  ++op->peer->inflight;
  op->due = std::chrono::steady_clock::now() + domain_state::stale_verdict_delay;
  d.stale.push_back(op);
}

// Posts one operation to libfabric (a flush has nothing to post: it completes).
// Returns 0, -FI_EAGAIN, or another -FI_E*.
inline ssize_t submit(domain_state& d, op_slot* op) {
  peer_state& p = *op->peer;
  void* ctx = &op->ctx;
  const std::size_t i = d.index_of(op);
  switch (op->c.op) {
    case opcode::write:
    case opcode::write_with_imm:
    case opcode::read: {
      // A split write_with_imm: first its data, then the notification alone.
      const bool split = op->c.op == opcode::write_with_imm && d.split_imm;
      const bool data_only = split && !op->notify_stage && op->c.bytes > 0;
      const bool notify_only = split && !data_only;
      fi_rma_iov rma{op->raddr, notify_only ? 0 : op->c.bytes, op->rkey};
      fi_msg_rma msg{};
      msg.msg_iov = op->iov;
      msg.desc = op->desc;
      msg.iov_count = notify_only ? 0 : op->iov_count;
      msg.addr = p.addr;
      msg.rma_iov = &rma;
      msg.rma_iov_count = 1;
      msg.context = ctx;
      // A read not confirmed by the owner's key table carries
      // FI_DELIVERY_COMPLETE where shm would otherwise read it itself: then
      // it goes to the target, which checks key and range.
      if (op->c.op == opcode::read)
        return fi_readmsg(d.ep, &msg, FI_COMPLETION | (d.local_reads && !op->local_read ? FI_DELIVERY_COMPLETE : 0));
      if (notify_only && d.notify_by_message) {  // {imm, length} as a tagged message
        std::uint64_t* msg_words = &d.operands[operand_words * i];
        msg_words[0] = op->c.imm;
        msg_words[1] = op->c.bytes;
        msg_words[2] = d.nonce;  // names the sender: completion::peer at the target
        return fi_tsend(d.ep, msg_words, sizeof(domain_state::notify_rx::buf), d.operand_desc, p.addr, notify_tag_bit,
                        ctx);
      }
      std::uint64_t flags = FI_COMPLETION | (notify_only ? 0 : FI_DELIVERY_COMPLETE);
      if (op->c.op == opcode::write_with_imm && !data_only) {
        flags |= FI_REMOTE_CQ_DATA;
        msg.data = op->c.imm;
        if (d.cq_data_carries_length) {
          const std::uint64_t len = op->c.bytes > 0xffffffffu ? 0xffffffffu : op->c.bytes;
          msg.data |= len << 32;
        }
      }
      return fi_writemsg(d.ep, &msg, flags);
    }
    case opcode::fetch_add:
      return fi_fetch_atomic(d.ep, &d.operands[operand_words * i], 1, d.operand_desc, op->iov[0].iov_base, op->desc[0],
                             p.addr, op->raddr, op->rkey, FI_UINT64, FI_SUM, ctx);
    case opcode::compare_swap:
      return fi_compare_atomic(d.ep, &d.operands[operand_words * i], 1, d.operand_desc,
                               &d.operands[operand_words * i + 1], d.operand_desc, op->iov[0].iov_base, op->desc[0],
                               p.addr, op->raddr, op->rkey, FI_UINT64, FI_CSWAP, ctx);
    case opcode::send: {
      fi_msg_tagged msg{};
      msg.msg_iov = op->iov;
      msg.desc = op->desc;
      msg.iov_count = op->iov_count;
      msg.addr = p.addr;
      msg.tag = d.nonce;
      msg.context = ctx;
      return fi_tsendmsg(d.ep, &msg, FI_COMPLETION);
    }
    case opcode::recv: {
      fi_msg_tagged msg{};
      msg.msg_iov = op->iov;
      msg.desc = op->desc;
      msg.iov_count = op->iov_count;
      if (d.discard_mr) {  // op->iov has room: a recv has one local slice
        op->iov[op->iov_count] = iovec{d.discard.get(), domain_state::discard_size};
        op->desc[op->iov_count] = fi_mr_desc(d.discard_mr);
        msg.iov_count = op->iov_count + 1;
      }
      msg.addr = FI_ADDR_UNSPEC;
      msg.tag = p.nonce;
      msg.ignore = 0;
      msg.context = ctx;
      return fi_trecvmsg(d.ep, &msg, FI_COMPLETION);
    }
    case opcode::flush:
    case opcode::remote_write_imm: break;
  }
  return 0;
}

// Starts `op` now: posts it, or completes a flush. ok, again (nothing
// happened; the slot is still the caller's), or the error of a refused post.
inline status start(domain_state& d, op_slot* op, int& native) {
  native = 0;
  if (op->c.op == opcode::flush) {  // nothing earlier is in flight: everything is delivered
    finish(d, op, status::ok);
    return status::ok;
  }
  // A zero-length write or read moves nothing: it completes here, ok with
  // bytes 0, on every provider (shm 1.17 never completes a zero-length
  // FI_DELIVERY_COMPLETE write). Its range and key were checked like any
  // other's; a write_with_imm of zero bytes still carries its value.
  if ((op->c.op == opcode::write || op->c.op == opcode::read) && op->c.bytes == 0) {
    finish(d, op, status::ok);
    return status::ok;
  }
  ssize_t ret = 0;
  if (op->local_read) {
    // shm reads the target's memory itself, inside fi_readmsg (CMA): only
    // while the region's slot still holds its epoch, announced on our access
    // board, so that the target's deregistration waits for the copy
    // (detail/access_board.hpp, region.hpp).
    peer_state& p = *op->peer;
    if (fabrix::detail::board_enter(d.keys.map, p.peer_keys, p.nonce, op->rslot, op->repoch) !=
        fabrix::detail::board_verdict::go) {
      hold_stale(d, op);  // stale_key, or peer_unreachable when its domain closed (resolve_stale)
      return status::ok;
    }
    ret = submit(d, op);
    fabrix::detail::board_leave(d.keys.map);
  } else {
    ret = submit(d, op);
  }
  if (ret == 0) {
    op->st = slot_state::posted;
    op->posted_epoch = d.sweep_epoch;
    op->counted = op->c.op != opcode::recv;
    if (op->counted) ++op->peer->inflight;
    return status::ok;
  }
  native = static_cast<int>(ret);
  return ret == -FI_EAGAIN ? status::again : to_status(ret);
}

// Starts the peer's parked operations in order; a write_with_imm, flush or
// fenced operation at the front waits until nothing earlier is in flight. The front is
// unlinked before start(): a flush completes inside start(), and giving its
// slot back clears its link, which used to drop every operation parked
// behind it (accepted with ok, never posted, never completed).
inline void drain(domain_state& d, peer_state& p) {
  while (op_slot* op = p.parked.head) {
    if (needs_quiet(*op) && p.inflight > 0) return;
    p.parked.pop_front();
    int native = 0;
    const status s = start(d, op, native);
    if (s == status::again) {  // the send queue is full: retry on the next poll
      p.parked.push_front(op);
      return;
    }
    if (s != status::ok) finish(d, op, s, native);  // refused by libfabric: an error completion
  }
}

// Posts notification receive `i` (notify_by_message). Returns 0 or -FI_E*.
inline ssize_t post_notify_rx(domain_state& d, std::size_t i) {
  domain_state::notify_rx& r = d.notify_rxs[i];
  return fi_trecv(d.ep, r.buf, sizeof(r.buf), fi_mr_desc(d.notify_mr), FI_ADDR_UNSPEC, notify_tag_bit, ~notify_tag_bit,
                  &r.ctx);
}

// The notification receive whose context this is, or nullptr.
inline domain_state::notify_rx* notify_rx_of(domain_state& d, void* context) noexcept {
  if (!d.notify_rxs) return nullptr;
  auto* first = &d.notify_rxs[0];
  const auto at = reinterpret_cast<std::uintptr_t>(context), lo = reinterpret_cast<std::uintptr_t>(first),
             hi = reinterpret_cast<std::uintptr_t>(first + domain_state::notify_rx_count);
  return at >= lo && at < hi ? &d.notify_rxs[(at - lo) / sizeof(domain_state::notify_rx)] : nullptr;
}

// completion::peer of what arrived from libfabric address `src`: the peer
// id of the first queue pair to that address (unknown_peer when unknown: no FI_SOURCE,
// or no queue pair to the sender). A linear walk over the connected peers,
// paid by notifications only.
inline std::uint32_t peer_id_of(const domain_state& d, fi_addr_t src) noexcept {
  if (src == FI_ADDR_NOTAVAIL || src == FI_ADDR_UNSPEC) return completion::unknown_peer;
  for (const peer_state* p : d.peers)
    if (p->addr == src) return p->peer_id;
  return completion::unknown_peer;
}

// completion::peer of a notification message from the domain `nonce`.
inline std::uint32_t peer_id_of_nonce(const domain_state& d, std::uint64_t nonce) noexcept {
  for (const peer_state* p : d.peers)
    if (p->nonce == nonce) return p->peer_id;
  return completion::unknown_peer;
}

// A peer's notification message landed: a remote_write_imm; the receive is
// posted again at once. (Reposting can only fail if the endpoint is broken;
// then fewer receives remain and the rest wait as unexpected messages.)
inline void on_notify_message(domain_state& d, domain_state::notify_rx& r, std::size_t len) {
  if (len == sizeof(r.buf)) {
    completion c{};
    c.op = opcode::remote_write_imm;
    c.imm = static_cast<std::uint32_t>(r.buf[0]);
    c.bytes = r.buf[1];
    c.peer = peer_id_of_nonce(d, r.buf[2]);
    d.ring.push(c);
  } else {
    ++d.stray_errors;  // not a notification of ours: dropped
  }
  (void)post_notify_rx(d, static_cast<std::size_t>(&r - &d.notify_rxs[0]));
}

// One CQ entry of a finished operation, or a peer's notification.
inline void on_entry(domain_state& d, const fi_cq_data_entry& e, fi_addr_t src) {
  if (domain_state::notify_rx* r = notify_rx_of(d, e.op_context)) {
    on_notify_message(d, *r, e.len);
    return;
  }
  if (e.flags & FI_REMOTE_CQ_DATA) {
    completion c{};
    c.op = opcode::remote_write_imm;
    c.peer = peer_id_of(d, src);
    c.imm = static_cast<std::uint32_t>(e.data);
    c.bytes = d.cq_data_carries_length ? (e.data >> 32) : e.len;
    d.ring.push(c);
    return;
  }
  if (e.op_context == nullptr) {
    ++d.dropped_notifications;
    return;
  }
  op_slot* op = slot_of(e.op_context);
  if (op->st == slot_state::abandoned) {
    release_slot(d, op);
    return;
  }
  if (op->c.op == opcode::recv) {
    op->c.bytes = e.len;
    if (e.len > op->iov[0].iov_len) {  // spilled into the discard tail
      op->c.bytes = op->iov[0].iov_len;
      finish(d, op, status::truncated);
      return;
    }
  }
  if (op->c.op == opcode::write_with_imm && d.split_imm && !op->notify_stage && op->c.bytes > 0 && op->peer) {
    // The data is delivered: the notification goes next, ahead of what queued behind it.
    if (op->counted) --op->peer->inflight;
    op->counted = false;
    op->notify_stage = true;
    park(*op->peer, op, true);
    return;
  }
  finish(d, op, status::ok);
}

// The status of an error entry for an operation to `p` (null: none). A lost
// connection shows in several guises, all of which become peer_unreachable:
// rxm over tcp cancels what was queued on a connection that broke
// (FI_ECANCELED with prov_errno ENOTCONN) and fails the operation in flight
// with ENOTCONN/EPIPE/ECONNRESET; verbs reports a retry-exceeded or flushed
// work request (ibv_wc_status in prov_errno). And a peer on this node whose
// process is gone is unreachable whatever the entry says. verbs' other
// failures come as EIO, told apart by their ibv_wc_status
// (ibv_status_to_status). Only error entries pay for these checks.
inline status error_status(const domain_state& d, const fi_cq_err_entry& err, const peer_state* p) {
  const status s = to_status(err.err);
  if (s == status::peer_unreachable || s == status::truncated || s == status::access_denied) return s;
  // Canceled, but not by us: fabrix cancels only the receives of a queue
  // pair it closes, and those have no peer any more. So the provider flushed
  // the operation because its connection broke — what tcp;ofi_rxm does to
  // everything in flight when a peer dies (prov_errno is whatever errno was
  // left, rarely ENOTCONN).
  if (p && err.err == FI_ECANCELED) return status::peer_unreachable;
  if (d.errno_kind == prov_errno_kind::errno_value && to_status(err.prov_errno) == status::peer_unreachable)
    return status::peer_unreachable;
  if (d.errno_kind == prov_errno_kind::ibv_wc_status && ibv_status_means_peer_loss(err.prov_errno))
    return status::peer_unreachable;
  if (p && p->watched && fabrix::detail::process_gone(p->identity)) return status::peer_unreachable;
  if (d.errno_kind == prov_errno_kind::ibv_wc_status && err.err == EIO) return ibv_status_to_status(err.prov_errno);
  return s;
}

inline void on_error(domain_state& d) {
  fi_cq_err_entry err{};
  if (fi_cq_readerr(d.cq, &err, 0) < 0) return;
  char text[256] = {};
  const char* prov = fi_cq_strerror(d.cq, err.prov_errno, err.err_data, text, sizeof(text));
  d.last_error = std::string(fi_strerror(err.err)) + " (provider " + std::to_string(err.prov_errno) +
                 (prov && *prov ? ": " + std::string(prov) : std::string()) + ")";
  if (err.op_context == nullptr) {
    ++d.stray_errors;
    return;
  }
  if (domain_state::notify_rx* r = notify_rx_of(d, err.op_context)) {  // a bad notification: dropped
    ++d.stray_errors;
    if (err.err != FI_ECANCELED) (void)post_notify_rx(d, static_cast<std::size_t>(r - &d.notify_rxs[0]));
    return;
  }
  op_slot* op = slot_of(err.op_context);
  if (op->st == slot_state::abandoned) {
    release_slot(d, op);
    return;
  }
  peer_state* p = op->peer;
  const status s = error_status(d, err, p);
  if (op->c.op == opcode::recv && s == status::truncated) op->c.bytes = err.len;
  finish(d, op, s, -err.err);
  // Every other operation to the peer says peer_unreachable too, whatever
  // libfabric's code for this one (FI_ECANCELED for a flushed connection).
  if (p && s == status::peer_unreachable) fail_peer(d, *p, err.err, status::peer_unreachable);
}

// How many CQ entries one read_cq takes at most.
inline constexpr std::size_t cq_batch = 32;

// Reads up to one batch of CQ entries. Returns how many it handled (an
// error entry counts as one). With FI_SOURCE, fi_cq_readfrom also names each
// entry's sender.
inline std::size_t read_cq(domain_state& d) {
  fi_cq_data_entry entries[cq_batch];
  fi_addr_t src[cq_batch];
  const ssize_t n = d.source ? fi_cq_readfrom(d.cq, entries, cq_batch, src) : fi_cq_read(d.cq, entries, cq_batch);
  if (n > 0) {
    for (ssize_t i = 0; i < n; ++i) on_entry(d, entries[i], d.source ? src[i] : FI_ADDR_NOTAVAIL);
    return static_cast<std::size_t>(n);
  }
  if (n == -FI_EAVAIL) {
    on_error(d);
    return 1;
  }
  return 0;
}

// Peers on this node whose process is gone fail with ECONNRESET.
inline void check_liveness(domain_state& d) {
  bool drained = false;
  for (peer_state* p : d.peers) {
    if (!p->watched || p->failed || !fabrix::detail::process_gone(p->identity)) continue;
    // What the peer finished before it died is already here: collect those
    // completions first, so that only operations it never finished fail.
    for (int i = 0; !drained && i < 1024 && read_cq(d) != 0; ++i) {
    }
    drained = true;
    fail_peer(d, *p, FI_ECONNRESET, status::peer_unreachable);
  }
}

// Operations that libfabric might never complete and that fabrix therefore
// times out: those whose completion needs the target's answer. (A send or
// recv may wait for its peer's matching call as long as the peer likes.)
inline bool times_out(opcode op) noexcept {
  return op == opcode::write || op == opcode::write_with_imm || op == opcode::read || op == opcode::fetch_add ||
         op == opcode::compare_swap;
}

// The bounded fallback for operations the provider never completes. shm
// 1.17's target drops an RMA or atomic whose key or range fails its
// registration check (smr_progress_cmd_rma / _atomic return before writing
// the initiator's response), so the initiator's operation never completes
// and its endpoint's later responses queue behind it. An operation in
// flight longer than op_timeout therefore fails its peer with timed_out
// (ETIMEDOUT): the operation, and every other one in flight or parked to
// that peer, completes with that error, and later posts to it return
// peer_unreachable. Failing the peer, not just the operation, keeps the
// ordering promise: a write_with_imm or flush parked behind the lost
// operation must not go out as if it had been delivered.
// Cost: one integer store per post; this sweep of the pool runs at most
// every sweep_period, and only while something is in flight.
inline void expire_operations(domain_state& d) {
  ++d.sweep_epoch;
  bool any = false;
  for (const peer_state* p : d.peers) any = any || (!p->failed && p->inflight > 0);
  if (!any) return;
  // Ages are whole sweeps; an operation posted just before a sweep has age
  // 1 almost at once, so one sweep is not counted.
  const auto limit = static_cast<std::uint32_t>(d.op_timeout / domain_state::sweep_period) + 1;
  for (op_slot* op = d.ops.begin(); op != d.ops.end(); ++op) {
    if (op->st != slot_state::posted || op->peer == nullptr || op->peer->failed || !times_out(op->c.op)) continue;
    if (d.sweep_epoch - op->posted_epoch <= limit) continue;
    ++d.expired_operations;
    d.last_error = "no completion within " + std::to_string(d.op_timeout.count()) +
                   " ms (FABRIX_OFI_OP_TIMEOUT_MS): the target dropped the operation or stopped progressing";
    fail_peer(d, *op->peer, FI_ETIMEDOUT, status::timed_out);
  }
}

// Whether the peer's domain is still open, as its key table says.
inline bool peer_domain_open(const peer_state& p) noexcept { return !p.peer_keys.mapped() || p.peer_keys.load(0) != 0; }

// The verdict on operations through a peer's dead key, once they are due
// (hold_stale in post.hpp): stale_key if the peer's domain is still open
// and its process runs; otherwise the peer has left, and it fails as a
// whole (peer_unreachable). A queue pair closed meanwhile: canceled.
inline void resolve_stale(domain_state& d, std::chrono::steady_clock::time_point now) {
  while (op_slot* op = d.stale.head) {
    if (op->due > now) return;  // in order of due time
    d.stale.pop_front();
    peer_state* p = op->peer;
    if (p == nullptr) {
      finish(d, op, status::canceled);
      continue;
    }
    if (!p->failed && (!peer_domain_open(*p) || (p->watched && fabrix::detail::process_gone(p->identity))))
      fail_peer(d, *p, FI_ECONNRESET, status::peer_unreachable);
    if (p->failed)
      finish(d, op, p->failure_status, -p->failure);
    else
      finish(d, op, status::stale_key);
  }
}

// Throttled: about every 100 ms of polling, the liveness check of peers on
// this node and the operation timeout sweep; the stale-key verdicts.
inline void periodic_checks(domain_state& d) {
  std::chrono::steady_clock::time_point now;
  if (!d.poll_clock.sample(now)) return;
  if (d.liveness.due(now, fabrix::detail::liveness_period)) check_liveness(d);
  if (!d.stale.empty()) resolve_stale(d, now);
  if (d.op_timeout.count() > 0 && d.sweep.due(now, domain_state::sweep_period)) expire_operations(d);
}

// Whether wait() must wake up for periodic_checks rather than sleep on the fd.
inline bool needs_periodic_wakeup(const domain_state& d) noexcept {
  if (!d.stale.empty()) return true;
  for (const peer_state* p : d.peers) {
    if (p->failed) continue;
    if (p->watched || (d.op_timeout.count() > 0 && p->inflight > 0)) return true;
  }
  return false;
}

// One round of progress: the CQ, the periodic checks, the parked queues of
// the busy peers (no walk over every peer).
// Returns how many CQ entries it handled.
inline std::size_t progress(domain_state& d) {
  const std::size_t n = read_cq(d);
  periodic_checks(d);
  for (std::size_t i = 0; i < d.busy.size();) {  // by index: drain may park more
    peer_state* p = d.busy[i];
    drain(d, *p);
    if (p->parked.empty()) {
      p->busy = false;
      d.busy[i] = d.busy.back();
      d.busy.pop_back();
    } else {
      ++i;
    }
  }
  return n;
}

}  // namespace fabrix::ofi::detail
