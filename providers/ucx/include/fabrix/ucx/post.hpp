// Posting one validated operation on a UCX endpoint.
//
// Mapping: write -> ucp_put_nbx per local slice; read -> ucp_get_nbx;
// fetch_add / compare_swap -> ucp_atomic_op_nbx (ADD / CSWAP, 8 bytes);
// send / recv -> tagged messages (tag = sending domain's nonce);
// flush -> ucp_ep_flush_nbx; write_with_imm -> put(s), then an endpoint flush
// (every earlier put and AMO on the endpoint is complete at the target), then
// an active message carrying the 32-bit value. The target's handler queues
// the notification, so it can only be seen after the data is in place.
#pragma once

#include <fabrix/detail/validate.hpp>
#include <fabrix/operation.hpp>
#include <fabrix/ucx/progress.hpp>
#include <fabrix/ucx/rma.hpp>
#include <fabrix/ucx/state.hpp>

#include <cstring>

namespace fabrix::ucx::detail {

// The endpoint's unpacked rkey for `rb`: unpacked once per remote region (not
// per operation), after checking that the peer of this endpoint made `rb`
// and that nothing in it was changed (its seal). nullptr when refused.
inline rkey_cache::entry* rkey_for(peer_state& p, const remote_buffer& rb) {
  if (rkey_cache::entry* e = p.rkeys.find(rb)) return e;
  if (rb.owner != p.recv_tag || rb.seal != rb.compute_seal(p.peer_secret)) return nullptr;
  ucp_rkey_h rkey = nullptr;
  if (ucp_ep_rkey_unpack(p.ep, rb.key.data(), &rkey) != UCS_OK) return nullptr;
  rkey_cache::entry* e = p.rkeys.add(rb, rkey);
  // Memory the peer had UCX allocate may be a shared-memory segment UCX has
  // mapped here (sysv, posix): then it is used directly (direct_op).
  void* mapped = nullptr;
  if (p.same_node && (rb.epoch & ucx_allocated) != 0 && ucp_rkey_ptr(rkey, rb.address, &mapped) == UCS_OK)
    e->mapped = static_cast<std::byte*>(mapped);
  return e;
}

// A one-sided operation on a peer's UCX-allocated shared-memory segment,
// mapped in this process: plain copies and CPU atomics (coherent with the
// target's, which run on the same memory), done at once — what UCX's own
// sysv/posix RMA does, without its per-operation cost. After the target
// deregisters the region the segment lives on only in the processes that
// still map it (sysv: IPC_RMID at creation; posix: unlinked), so an
// operation first checks the region's slot in the target's key table
// (direct_refusal); without a table or slot it would complete ok into the
// orphaned segment (README: deregistration).
inline void direct_op(const operation& o, std::byte* base) {
  std::byte* at = base + o.remote.offset;
  const local_slice& first = o.locals()[0];
  switch (o.code) {
    case opcode::write:
    case opcode::write_with_imm:
      for (const local_slice& l : o.locals()) {
        if (l.length) std::memcpy(at, l.address, l.length);
        at += l.length;
      }
      // The bytes before whatever announces them (a notification, a flag the
      // caller writes next). gcc refuses thread fences under TSan, which
      // cannot see this process-shared segment's other side anyway.
#if defined(__SANITIZE_THREAD__)
      __atomic_signal_fence(__ATOMIC_RELEASE);
#else
      __atomic_thread_fence(__ATOMIC_RELEASE);
#endif
      break;
    case opcode::read:
      for (const local_slice& l : o.locals()) {
        if (l.length) std::memcpy(l.address, at, l.length);
        at += l.length;
      }
      break;
    case opcode::fetch_add: {
      const std::uint64_t old = __atomic_fetch_add(reinterpret_cast<std::uint64_t*>(at), o.operand, __ATOMIC_SEQ_CST);
      std::memcpy(first.address, &old, 8);
      break;
    }
    case opcode::compare_swap: {
      std::uint64_t expected = o.compare;
      __atomic_compare_exchange_n(reinterpret_cast<std::uint64_t*>(at), &expected, o.operand, false, __ATOMIC_SEQ_CST,
                                  __ATOMIC_SEQ_CST);
      std::memcpy(first.address, &expected, 8);
      break;
    }
    default: break;
  }
}

// Why a direct operation through `rb` must not run (status::ok: it may):
// the target cleared the region's key-table slot (stale_key), or closed its
// whole domain (peer_unreachable). One acquire load while the region lives.
inline status direct_refusal(const peer_state& p, const remote_buffer& rb) noexcept {
  const std::uint32_t slot = key_slot_of(rb.epoch);
  if (slot == 0 || !p.peer_keys.mapped() || p.peer_keys.load(slot) == rb.epoch) return status::ok;
  return p.peer_keys.load(0) != 0 ? status::stale_key : status::peer_unreachable;
}

inline status post_one(peer_state& p, const operation& o) {
  domain_state& d = *p.dom;
  if (p.failed) return status::peer_unreachable;

  rkey_cache::entry* held = nullptr;
  std::uint64_t raddr = 0;
  if (fabrix::detail::uses_remote(o.code)) {
    held = rkey_for(p, *o.remote.buffer);
    if (held == nullptr) return status::invalid_argument;
    raddr = o.remote.buffer->address + o.remote.offset;
  }
  ucp_rkey_h rkey = held != nullptr ? held->key : nullptr;
  op_slot* op = o.code == opcode::recv ? d.recvs.take() : d.ops.take();
  if (op == nullptr) return status::again;
  op->seq = ++d.next_seq;
  op->rkey = held;
  if (held != nullptr) rkey_cache::hold(held);
  op->in_use = true;
  op->dom = &d;
  op->peer = &p;
  op->c.token = o.token;
  op->c.op = o.code;
  op->c.flags = o.flags;
  op->c.imm = o.imm;
  op->c.bytes = o.code == opcode::flush ? 0 : o.local_bytes();
  op->st = stage::data;
  op->pending = 1;  // held while posting, so the op cannot finish half-posted

  ucp_request_param_t prm = request_param(op);
  const local_slice& first = o.locals()[0];
  if (held != nullptr && (p.checked_rma || held->mapped)) {
    if (o.code == opcode::write_with_imm) {
      op->header.imm = o.imm;
      op->header.bytes = o.remote.length;
      op->header.sender = d.nonce;
      ++p.imm_in_progress;
    }
    if (held->mapped) {  // done now (or refused): completes below
      const status refused = direct_refusal(p, *o.remote.buffer);
      if (refused == status::ok)
        direct_op(o, held->mapped);
      else if (refused == status::stale_key)
        op->remote_status = refused;
      else
        op->first_error = UCS_ERR_UNREACHABLE;  // the peer is gone: fails it, and what waits on it (deliver)
    } else {
      post_checked(p, op, o, raddr);
    }
    request_done(op, UCS_OK);
    return status::ok;
  }
  switch (o.code) {
    case opcode::write_with_imm:
      op->header.imm = o.imm;
      op->header.bytes = o.remote.length;
      op->header.sender = d.nonce;
      ++p.imm_in_progress;
      [[fallthrough]];
    case opcode::write:
    case opcode::read:
      prm.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      for (const local_slice& l : o.locals()) {
        if (l.length == 0) continue;
        prm.memh = static_cast<ucp_mem_h>(l.descriptor);
        track(op, o.code == opcode::read ? ucp_get_nbx(p.ep, l.address, l.length, raddr, rkey, &prm)
                                         : ucp_put_nbx(p.ep, l.address, l.length, raddr, rkey, &prm));
        raddr += l.length;
      }
      break;
    case opcode::fetch_add:
    case opcode::compare_swap: {
      const bool cas = o.code == opcode::compare_swap;
      // UCX CSWAP: `buffer` holds the expected value, reply_buffer the value
      // to swap in; the old remote value then lands in reply_buffer.
      op->operand = cas ? o.compare : o.operand;
      if (cas) std::memcpy(first.address, &o.operand, 8);
      prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
      prm.datatype = ucp_dt_make_contig(8);
      prm.reply_buffer = first.address;
      track(op,
            ucp_atomic_op_nbx(p.ep, cas ? UCP_ATOMIC_OP_CSWAP : UCP_ATOMIC_OP_ADD, &op->operand, 1, raddr, rkey, &prm));
      break;
    }
    case opcode::send: track(op, ucp_tag_send_nbx(p.ep, first.address, first.length, p.send_tag, &prm)); break;
    case opcode::recv:
      // Generic datatype (progress.hpp): the buffer and its length are in
      // the slot; UCX hands every fragment to recv_unpack.
      prm.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL | UCP_OP_ATTR_FIELD_DATATYPE;
      prm.datatype = d.recv_dt;
      prm.cb.recv = on_recv_done;
      op->c.bytes = 0;
      op->c.peer = p.peer_id;
      op->local[0] = ucp_dt_iov_t{first.address, first.length};
      op->nlocal = 1;
      track_recv(op, [&] { return ucp_tag_recv_nbx(d.worker, op, 1, p.recv_tag, ~ucp_tag_t{0}, &prm); });
      break;
    case opcode::flush:
      op->st = stage::user_flush;
      if (p.imm_in_progress > 0 || p.checked_in_flight > 0) {  // earlier notifications and checked requests first
        op->pending = 0;
        p.parked_flushes.push_back(op);
        return status::ok;
      }
      track(op, ucp_ep_flush_nbx(p.ep, &prm));
      break;
    case opcode::remote_write_imm: break;  // refused by validation
  }
  request_done(op, UCS_OK);
  return status::ok;
}

}  // namespace fabrix::ucx::detail
