// Turning completion queue entries into fabrix completions. One CQ per
// domain serves every RC send queue, the shared receive queue and the UD
// handshake queue pair; the wr_id's top byte says which (state.hpp), and
// an RC send's wr_id also names its queue pair's slot (no lookup per CQE).
//
//   RC send queue   retire the ring through wr_id (credits.hpp): earlier
//                   unsignaled entries completed fine, this one has
//                   wc.status. An entry posted op_options::unsignaled that
//                   retires fine only adds to peer_state::finished (no
//                   completion); one that fails (its own error CQE, or
//                   flushed after the queue pair failed) completes with its
//                   token and error like any other, and is counted too.
//   SRQ receive     RECV_RDMA_WITH_IMM -> remote_write_imm (imm, byte_len);
//                   RECV -> matched to the queue pair's oldest recv() (copied
//                   out of the bounce buffer), or kept until one is posted;
//                   the buffer goes back to the SRQ at the end of its
//                   CQ batch either way (srq_refill.hpp)
//   UD receive      a handshake hello (handshake.hpp)
// The first error completion of a queue pair marks it failed (see
// endpoint.hpp); its native_code is the ibv_wc_status, whose text
// wc_text() / fabrix::verbs::describe() give.
#pragma once

#include <fabrix/verbs/detail/address.hpp>
#include <fabrix/verbs/detail/srq_refill.hpp>
#include <fabrix/verbs/detail/state.hpp>
#include <fabrix/verbs/detail/status.hpp>

#include <endian.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cstring>

namespace fabrix::verbs::detail {

inline void repost_ud(domain_state& d, std::uint64_t i) noexcept {
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(d.ud_recv_slot(i)), ud_slot_size, d.ud_mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = make_wr_id(wr_kind::ud_recv, i);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  (void)ibv_post_recv(d.ud_qp, &wr, &bad);
}

// Sends our hello for `p` to its peer's UD queue pair. False when no send
// slot is free (the caller retries later; hellos are repeated anyway).
inline bool send_hello(domain_state& d, peer_state& p, bool has_yours, bool is_reply = false) noexcept {
  if (d.ud_send_free == 0 || p.ah == nullptr) return false;
  const unsigned slot = static_cast<unsigned>(__builtin_ctz(d.ud_send_free));
  d.ud_send_free &= ~(1u << slot);
  hello h{has_yours, is_reply, d.nonce, p.remote.nonce, p.seq, p.qp->qp_num, p.my_psn};
  encode_hello(h, d.ud_send_slot(slot));
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(d.ud_send_slot(slot)), static_cast<std::uint32_t>(hello_size),
              d.ud_mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = make_wr_id(wr_kind::ud_send, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = p.ah;
  wr.wr.ud.remote_qpn = p.remote.ud_qpn;
  wr.wr.ud.remote_qkey = ud_qkey;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(d.ud_qp, &wr, &bad) != 0) {
    d.ud_send_free |= 1u << slot;
    return false;
  }
  return true;
}

inline void on_hello(domain_state& d, const hello& h) {
  if (h.to != d.nonce) {
    ++d.dropped_datagrams;
    return;
  }
  for (peer_state* p : d.peers) {
    if (p->remote.nonce != h.from || p->seq != h.seq) continue;
    if (p->connected) {  // the peer is still connecting: it missed our last hello
      if (!h.is_reply) send_hello(d, *p, true, true);
      return;
    }
    break;  // its connect() is running; it claims the hello from `pending`
  }
  for (auto& q : d.pending) {
    if (q.from == h.from && q.seq == h.seq) {
      // Keep "has yours" once seen: a repeated older hello arriving late must
      // not hide it (the peer stops sending once it is connected).
      const bool has_yours = q.has_yours || h.has_yours;
      q = h;
      q.has_yours = has_yours;
      return;
    }
  }
  if (d.pending.size() >= 4096) d.pending.pop_front();
  d.pending.push_back(h);
}

// A message from `p`'s peer: to the oldest waiting recv(), or kept.
inline void deliver_message(peer_state& p, const std::byte* data, std::uint64_t len) {
  domain_state& d = *p.dom;
  if (p.recv_head == p.recv_tail) {
    p.unexpected.emplace_back(data, data + len);
    return;
  }
  const recv_wanted w = p.recvs[p.recv_tail++ % p.recv_capacity];
  --d.posted_recvs;
  // Longer than the buffer: truncated, bytes = the buffer's length, which
  // holds the message's first bytes.
  const std::uint64_t n = std::min(len, w.length);
  if (n) std::memcpy(w.address, data, n);
  completion c{};
  c.token = w.token;
  c.flags = w.flags;
  c.op = opcode::recv;
  c.bytes = n;
  c.status = len > w.length ? status::truncated : status::ok;
  c.peer = p.peer_id;
  d.ring.push(c);
}

// Completes every recv() still waiting on `p` with `s` (in post order): the
// queue pair will deliver no more messages.
inline void fail_waiting_recvs(domain_state& d, peer_state& p, status s) {
  while (p.recv_tail != p.recv_head) {
    const recv_wanted w = p.recvs[p.recv_tail++ % p.recv_capacity];
    --d.posted_recvs;
    completion c{};
    c.token = w.token;
    c.flags = w.flags;
    c.op = opcode::recv;
    c.status = s;
    c.peer = p.peer_id;
    d.ring.push(c);
  }
}

inline void mark_failed(peer_state& p, ibv_wc_status s) {
  if (p.failed) return;
  p.failed = true;
  p.failure_code = s;
  p.failure_text = std::string("queue pair failed: ") + ibv_wc_status_str(s);
}

inline void on_send_completion(domain_state& d, const ibv_wc& wc) {
  const std::uint32_t slot = slot_of(wc.wr_id);
  // Gone, or the slot has a new queue pair since: a stale CQE.
  if (slot >= d.slots.size() || d.slots[slot] == nullptr || d.slots[slot]->qp->qp_num != wc.qp_num) return;
  peer_state& p = *d.slots[slot];
  if (wc.status != IBV_WC_SUCCESS) mark_failed(p, wc.status);
  std::uint32_t probes = 0;
  const std::uint32_t n =
      p.ring.retire_through(p.ring.seq_from(seq_bits_of(wc.wr_id)), [&](const sq_entry& e, bool last) {
        if (e.internal) {  // a liveness probe: its failure failed the queue pair above, nothing else to say
          ++probes;
          return;
        }
        const bool failed_here = last && wc.status != IBV_WC_SUCCESS;
        if (e.unsignaled) {
          ++p.finished;
          if (!failed_here) return;
        }
        completion c{};
        c.token = e.token;
        c.bytes = e.bytes;
        c.op = e.op;
        c.flags = e.flags;
        c.imm = e.imm;
        if (failed_here) {
          // Flushed because rdma_cm said the peer disconnected: that is the cause.
          c.status =
              wc.status == IBV_WC_WR_FLUSH_ERR && p.disconnected ? status::peer_unreachable : to_status(wc.status);
          c.native_code = wc.status;
          c.bytes = 0;
        }
        d.ring.push(c);
      });
  d.credits.give(n - probes);
  d.probes_in_flight -= probes;
  // A failed queue pair is in the error state (a dead peer: retries
  // exhausted; or any other error): no message can arrive on it any more,
  // so the recv()s waiting on it end now, after what it retired above.
  if (p.failed && p.recv_tail != p.recv_head) fail_waiting_recvs(d, p, status::peer_unreachable);
}

inline void on_srq_completion(domain_state& d, const ibv_wc& wc, srq_refill& refill) {
  const std::uint64_t i = index_of(wc.wr_id);
  if (wc.status == IBV_WC_SUCCESS) {
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      completion c{};
      c.op = opcode::remote_write_imm;
      c.imm = be32toh(wc.imm_data);
      c.bytes = wc.byte_len;
      // The SRQ's completion names the local queue pair it arrived on.
      const auto it = d.by_qpn.find(wc.qp_num);
      c.peer = it != d.by_qpn.end() ? it->second->peer_id : completion::unknown_peer;
      d.ring.push(c);
    } else if (wc.opcode == IBV_WC_RECV) {
      const auto it = d.by_qpn.find(wc.qp_num);
      if (it != d.by_qpn.end())
        deliver_message(*it->second, d.bounce_slot(i), wc.byte_len);
      else
        ++d.dropped_datagrams;
    }
  }
  refill.add(i);
}

inline void on_ud_completion(domain_state& d, const ibv_wc& wc) {
  const std::uint64_t i = index_of(wc.wr_id);
  if (kind_of(wc.wr_id) == wr_kind::ud_send) {
    d.ud_send_free |= 1u << i;
    return;
  }
  if (wc.status == IBV_WC_SUCCESS && wc.byte_len >= 40) {
    // The first 40 bytes are the GRH (present or not); the hello follows.
    const std::span<const std::byte> body(d.ud_recv_slot(i) + 40,
                                          std::min<std::uint32_t>(wc.byte_len, ud_slot_size) - 40);
    if (auto h = parse_hello(body))
      on_hello(d, *h);
    else
      ++d.dropped_datagrams;
  }
  if (wc.status != IBV_WC_WR_FLUSH_ERR) repost_ud(d, i);
}

inline void process(domain_state& d, const ibv_wc& wc, srq_refill& refill) {
  switch (kind_of(wc.wr_id)) {
    case wr_kind::rc_send: on_send_completion(d, wc); break;
    case wr_kind::srq_recv: on_srq_completion(d, wc, refill); break;
    case wr_kind::ud_recv:
    case wr_kind::ud_send: on_ud_completion(d, wc); break;
  }
}

// Polls the CQ in batches until it is empty or the ring holds `enough`
// completions. Returns how many CQ entries were processed.
inline std::size_t drive(domain_state& d, std::size_t enough = 64) {
  ibv_wc wc[srq_refill::capacity];
  srq_refill refill(d);
  std::size_t total = 0;
  for (;;) {
    const int n = ibv_poll_cq(d.cq, static_cast<int>(srq_refill::capacity), wc);
    if (n <= 0) break;
    for (int i = 0; i < n; ++i) process(d, wc[i], refill);
    refill.post();  // before the next batch: buffers back as soon as this one is handled
    total += static_cast<std::size_t>(n);
    if (n < 32 || d.ring.size() >= enough) break;
  }
  return total;
}

}  // namespace fabrix::verbs::detail
