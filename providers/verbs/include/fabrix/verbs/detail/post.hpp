// Posting validated operations on an RC queue pair.
//
// Mapping: write -> IBV_WR_RDMA_WRITE (inline when it fits max_inline);
// write_with_imm -> IBV_WR_RDMA_WRITE_WITH_IMM (imm in network order on the
// wire, host order in completions); read -> IBV_WR_RDMA_READ; fetch_add /
// compare_swap -> IBV_WR_ATOMIC_FETCH_AND_ADD / _CMP_AND_SWP; send ->
// IBV_WR_SEND into the peer's shared receive queue; recv -> a software queue
// matched by progress.hpp; flush -> an 8-byte IBV_WR_RDMA_READ of the peer's
// flush word. Local slices become the work request's scatter-gather list.
//
// Options (detail::options_of, once per operation, with the queue pair's
// defaults):
//   unsignaled  the ring entry is marked; the work request is posted without
//               IBV_SEND_SIGNALED (unless it is an every-sq_depth/4-th one)
//               and retires with a later signaled request: then it only
//               adds to peer_state::finished, no completion (progress.hpp).
//               A failure still gives its error CQE (the device reports
//               errors for unsignaled requests too), with its own wr_id.
//   delivered   nothing to add: an RC write/send completes only when the
//               responder's ACK for it arrives, and the responder acks a
//               request after executing it (rxe copies the bytes into the
//               target's memory before it acks; a NIC acks after handing
//               them to the host's memory, ordered before anything later).
//               So completion_level::local costs the same as delivered here.
//   fence       IBV_SEND_FENCE on that work request: it waits until every
//               earlier RDMA read and atomic on the queue pair has
//               completed; earlier writes and sends are executed in order by
//               the RC responder anyway, so it starts after all of them.
//   flush       (the operation) an RDMA read, executed by the responder after
//               every earlier request and completed in order after them, so
//               its completion also retires every earlier unsignaled entry.
//
// A post call builds one chain of work requests in the queue pair's
// preallocated arrays (no allocation) and hands it to one ibv_post_send, or
// where the device offers the extended send API for every opcode above
// (ibv_qp_ex; domain_state::wr_api, FABRIX_VERBS_WR_API) to one
// ibv_wr_start ... ibv_wr_complete (post_chain_ex).
// Only the chain's last request that wants a completion (and every
// sq_depth/4-th) is signaled; the others complete with it (credits.hpp).
// When the send ring or the domain's CQ credits run out, the operations not
// yet taken get status::again.
#pragma once

#include <fabrix/detail/validate.hpp>
#include <fabrix/operation.hpp>
#include <fabrix/verbs/detail/progress.hpp>
#include <fabrix/verbs/detail/qp.hpp>
#include <fabrix/verbs/detail/state.hpp>

#include <endian.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace fabrix::verbs::detail {

// The rkey for `rb` on this queue pair: only for a region its peer made and
// sealed, checked once per region (then cached). False when refused.
inline bool rkey_for(peer_state& p, const remote_buffer& rb, std::uint32_t& rkey) {
  if (const auto* e = p.rkeys.find(rb)) {
    rkey = e->key;
    return true;
  }
  if (rb.owner != p.remote.nonce || rb.key_size != 4 || rb.seal != rb.compute_seal(p.remote.secret)) return false;
  rkey = fabrix::detail::load_le<std::uint32_t>(rb.key.data());
  p.rkeys.add(rb, rkey);
  return true;
}

// Fills the gather list; returns the byte count.
inline std::uint64_t fill_sges(const operation& o, ibv_sge* sge, int& num) noexcept {
  std::uint64_t total = 0;
  num = 0;
  for (const local_slice& l : o.locals()) {
    if (l.length == 0) continue;
    sge[num].addr = reinterpret_cast<std::uintptr_t>(l.address);
    sge[num].length = static_cast<std::uint32_t>(l.length);
    sge[num].lkey = static_cast<ibv_mr*>(l.descriptor)->lkey;
    total += l.length;
    ++num;
  }
  return total;
}

// Builds the work request for `o` (not linked, not yet signaled).
// Returns ok or the refusal for this operation.
inline status build(peer_state& p, const operation& o, ibv_send_wr& wr, ibv_sge* sge, sq_entry& e) {
  domain_state& d = *p.dom;
  wr = {};
  wr.sg_list = sge;
  std::uint32_t rkey = 0;
  std::uint64_t raddr = 0;
  if (fabrix::detail::uses_remote(o.code)) {
    if (o.remote.key != nullptr) {  // imported: one index, no search
      const auto* e = p.imports.find(o.remote.key->ref);
      if (e == nullptr) return status::invalid_argument;
      rkey = e->rkey;
      raddr = e->base + o.remote.offset;
    } else {
      if (!rkey_for(p, *o.remote.buffer, rkey)) return status::invalid_argument;
      raddr = o.remote.buffer->address + o.remote.offset;
    }
  }
  for (const local_slice& l : o.locals())
    if (l.length > 0xffffffffu) return status::invalid_argument;  // one SGE holds at most 4 GiB - 1
  e = {o.token, 0, o.imm, o.code, o.flags};
  const op_options eff = fabrix::detail::options_of(o, p.defaults);
  e.unsignaled = has(eff, op_options::unsignaled);
  if (has(eff, op_options::fence)) wr.send_flags |= IBV_SEND_FENCE;
  switch (o.code) {
    case opcode::write:
    case opcode::write_with_imm:
    case opcode::send: {
      const std::uint64_t n = fill_sges(o, sge, wr.num_sge);
      if (o.code == opcode::send && n > d.opts.msg_size) return status::invalid_argument;
      if (n > 0xffffffffu) return status::invalid_argument;
      e.bytes = n;
      if (n > 0 && n <= p.max_inline) wr.send_flags |= IBV_SEND_INLINE;
      if (o.code == opcode::send) {
        wr.opcode = IBV_WR_SEND;
        break;
      }
      wr.opcode = o.code == opcode::write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.imm_data = htobe32(o.imm);
      wr.wr.rdma.remote_addr = raddr;
      wr.wr.rdma.rkey = rkey;
      break;
    }
    case opcode::read:
      e.bytes = fill_sges(o, sge, wr.num_sge);
      if (e.bytes > 0xffffffffu) return status::invalid_argument;
      wr.opcode = IBV_WR_RDMA_READ;
      wr.wr.rdma.remote_addr = raddr;
      wr.wr.rdma.rkey = rkey;
      break;
    case opcode::fetch_add:
    case opcode::compare_swap: {
      const local_slice& l = o.locals()[0];
      // The core checked this already; an unaligned atomic must never reach the device.
      if (raddr % 8 != 0 || reinterpret_cast<std::uintptr_t>(l.address) % 8 != 0 || l.length != 8)
        return status::invalid_argument;
      fill_sges(o, sge, wr.num_sge);
      e.bytes = 8;
      // Host byte order on both sides: the responder adds to / compares its
      // memory as a native 64-bit integer and the old value lands here as one.
      wr.opcode = o.code == opcode::fetch_add ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
      wr.wr.atomic.remote_addr = raddr;
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.compare_add = o.code == opcode::fetch_add ? o.operand : o.compare;
      wr.wr.atomic.swap = o.operand;
      break;
    }
    case opcode::flush:
      sge[0] = {reinterpret_cast<std::uintptr_t>(d.scratch_word()), 8, d.scratch_mr->lkey};
      wr.num_sge = 1;
      wr.opcode = IBV_WR_RDMA_READ;
      wr.wr.rdma.remote_addr = p.remote.flush_addr;
      wr.wr.rdma.rkey = p.remote.flush_rkey;
      break;
    case opcode::recv:
    case opcode::remote_write_imm: return status::invalid_argument;
  }
  return status::ok;
}

// A user recv(): matched at once against a message that is already here.
// Bounded by domain_options::max_posted_recvs over the whole domain (again
// beyond it); takes no CQ credits, so it never holds back other operations.
inline status post_recv(peer_state& p, const operation& o) {
  const local_slice& l = o.locals()[0];
  domain_state& d = *p.dom;
  if (d.posted_recvs >= d.max_posted_recvs || p.recv_head - p.recv_tail == p.recv_capacity) return status::again;
  p.recvs[p.recv_head++ % p.recv_capacity] = {l.address, l.length, o.token, o.flags};
  ++d.posted_recvs;
  if (!p.unexpected.empty()) {
    std::vector<std::byte> m = std::move(p.unexpected.front());
    p.unexpected.pop_front();
    deliver_message(p, m.data(), m.size());
  }
  return status::ok;
}

// Hands the chain of work requests at `first` to the device through the
// extended send API (ibv_wr_*): the same requests, without ibv_post_send's
// generic parsing. All or nothing: 0, or the error of ibv_wr_complete with
// none of them posted (*bad = first).
//
// Only single-buffer setters are used (post_chain sends a chain with a
// multi-SGE request through ibv_post_send): rxe's list setters in rdma-core
// 44 (Debian 12) and later releases, until fixed upstream in 2026, compute
// the length wrong (wr_set_sge_list: n times the first SGE's;
// wr_set_inline_data_list: zero bytes). wr_flags keeps
// IBV_SEND_INLINE: rxe's kernel side reads the inline payload only when
// the work request carries that flag; mlx5 ignores it there.
inline int post_chain_ex(peer_state& p, ibv_send_wr* first, ibv_send_wr** bad) {
  ibv_qp_ex* q = p.qpx;
  ibv_wr_start(q);
  for (const ibv_send_wr* wr = first; wr != nullptr; wr = wr->next) {
    q->wr_id = wr->wr_id;
    q->wr_flags = static_cast<unsigned>(wr->send_flags);
    switch (wr->opcode) {
      case IBV_WR_RDMA_WRITE: ibv_wr_rdma_write(q, wr->wr.rdma.rkey, wr->wr.rdma.remote_addr); break;
      case IBV_WR_RDMA_WRITE_WITH_IMM:
        ibv_wr_rdma_write_imm(q, wr->wr.rdma.rkey, wr->wr.rdma.remote_addr, wr->imm_data);
        break;
      case IBV_WR_RDMA_READ: ibv_wr_rdma_read(q, wr->wr.rdma.rkey, wr->wr.rdma.remote_addr); break;
      case IBV_WR_SEND: ibv_wr_send(q); break;
      case IBV_WR_ATOMIC_FETCH_AND_ADD:
        ibv_wr_atomic_fetch_add(q, wr->wr.atomic.rkey, wr->wr.atomic.remote_addr, wr->wr.atomic.compare_add);
        break;
      case IBV_WR_ATOMIC_CMP_AND_SWP:
        ibv_wr_atomic_cmp_swp(q, wr->wr.atomic.rkey, wr->wr.atomic.remote_addr, wr->wr.atomic.compare_add,
                              wr->wr.atomic.swap);
        break;
      default:  // build() makes no other opcode
        ibv_wr_abort(q);
        *bad = first;
        return EINVAL;
    }
    if (wr->num_sge == 0) {
      ibv_wr_set_sge_list(q, 0, nullptr);
    } else {
      const ibv_sge& s = wr->sg_list[0];
      if ((wr->send_flags & IBV_SEND_INLINE) != 0)
        ibv_wr_set_inline_data(q, reinterpret_cast<void*>(s.addr), s.length);
      else
        ibv_wr_set_sge(q, s.lkey, s.addr, s.length);
    }
  }
  const int e = ibv_wr_complete(q);
  if (e != 0) *bad = first;
  return e;
}

// Posts the first `n` staged work requests as one chain; `went` says how
// many the device took (all of them unless it refused the call).
inline status post_chain(peer_state& p, std::uint32_t n, std::uint32_t& went) {
  went = 0;
  if (n == 0) return status::ok;
  const std::uint32_t point = p.ring.signal_point(n);
  std::uint32_t last_signaled = n;  // none
  bool multi_sge = false;
  for (std::uint32_t i = 0; i < n; ++i) {
    ibv_send_wr& wr = p.wrs[i];
    multi_sge |= wr.num_sge > 1;
    wr.wr_id = rc_wr_id(p.slot, p.ring.next_seq() + i);
    wr.next = i + 1 < n ? &p.wrs[i + 1] : nullptr;
    if (p.ring.must_signal(i, point)) {
      wr.send_flags |= IBV_SEND_SIGNALED;
      last_signaled = i;
    }
  }
  ibv_send_wr* bad = nullptr;
  const bool by_wr_api = p.qpx != nullptr && !multi_sge;
  const int e = by_wr_api ? post_chain_ex(p, p.wrs.get(), &bad) : ibv_post_send(p.qp, p.wrs.get(), &bad);
  went = e == 0 ? n : static_cast<std::uint32_t>(bad - p.wrs.get());
  if (last_signaled < went) p.ring.note_signaled(last_signaled);
  p.ring.commit(went);
  p.dom->credits.take(went);
  if (e != 0) {
    // Requests before `bad` are on the queue, perhaps none of them signaled:
    // put the queue pair in error so each of them completes (flushed) and
    // none is lost; it is not used again.
    mark_failed(p, IBV_WC_GENERAL_ERR);
    p.failure_text = std::string(by_wr_api ? "ibv_wr_complete" : "ibv_post_send") + " failed: " + std::strerror(e);
    to_error(p.qp);
    return status::peer_unreachable;
  }
  return status::ok;
}

// Liveness probes. RC has no keepalive: a queue pair whose peer died
// notices only when it sends, so recv()s waiting on a queue pair that sends
// nothing would wait forever (rdma_cm's DISCONNECTED covers closed
// connections, not every death, and the bootstrap path has no such event).
// So every options::probe_ms, each queue pair with recv()s waiting and
// no signaled request in flight gets one signaled 8-byte RDMA read of its peer
// domain's flush word. A live peer's NIC answers (no completion reaches the
// user); a dead one's does not, the read fails with RETRY_EXC_ERR after the
// RC retries, and the queue pair fails with its recv()s (progress.hpp).
// Unsignaled requests still in flight retire with the probe's completion
// (counted in finished(), or failing with their own error CQE first).
// Probes take a send-ring slot and one of max_probes
// CQ entries reserved for them, never a user's CQ credit. Run from poll()
// (every 64th call) and wait(); nothing allocates.
inline void post_probe(peer_state& p) {
  domain_state& d = *p.dom;
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(d.scratch_word()), 8, d.scratch_mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = rc_wr_id(p.slot, p.ring.next_seq());
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = p.remote.flush_addr;
  wr.wr.rdma.rkey = p.remote.flush_rkey;
  sq_entry& e = p.ring.staged(0);
  e = {};
  e.op = opcode::flush;
  e.internal = true;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(p.qp, &wr, &bad) != 0) return;  // tried again next round
  p.ring.note_signaled(0);
  p.ring.commit(1);
  ++d.probes_in_flight;
}

inline void probe_idle_peers(domain_state& d) {
  if (d.opts.probe_ms == 0 || d.posted_recvs == 0) return;
  std::chrono::steady_clock::time_point now;
  if (!d.poll_clock.sample(now) || !d.probe.due(now, std::chrono::milliseconds(d.opts.probe_ms))) return;
  for (peer_state* p : d.peers) {
    if (d.probes_in_flight >= max_probes) break;
    if (p->connected && !p->failed && p->recv_head != p->recv_tail && !p->ring.cqe_due() && p->ring.room() > 0)
      post_probe(*p);
  }
}

inline status post_ops(peer_state& p, std::span<const operation> ops, std::size_t& posted) {
  posted = 0;
  if (p.failed) return status::peer_unreachable;
  domain_state& d = *p.dom;
  std::uint32_t staged = 0, went = 0;
  status refusal = status::ok;
  for (const operation& o : ops) {
    if (o.code == opcode::recv) {
      const status s = post_chain(p, staged, went);
      posted += went;
      if (s != status::ok) return s;
      staged = 0;
      if ((refusal = post_recv(p, o)) != status::ok) break;
      ++posted;
      continue;
    }
    if (staged == p.ring.room() || staged >= d.credits.available()) {
      refusal = status::again;
      break;
    }
    ibv_send_wr& wr = p.wrs[staged];
    if ((refusal = build(p, o, wr, &p.sges[staged * p.max_sge], p.ring.staged(staged))) != status::ok) break;
    ++staged;
  }
  const status s = post_chain(p, staged, went);
  posted += went;
  return s != status::ok ? s : refusal;
}

}  // namespace fabrix::verbs::detail
