// Posting one validated operation on a UCX endpoint.
//
// Mapping: write -> ucp_put_nbx per local slice; read -> ucp_get_nbx;
// fetch_add / compare_swap -> ucp_atomic_op_nbx (ADD / CSWAP, 8 bytes);
// send / recv -> tagged messages (tag = sending domain's nonce);
// flush -> ucp_ep_flush_nbx; write_with_imm -> put(s), then an endpoint flush
// (every earlier put and AMO on the endpoint is complete at the target), then
// an active message carrying the 32-bit value. The target's handler queues
// the notification, so it can only be seen after the data is in place. The
// flush is skipped when no native put or AMO was posted since the last
// completed one (checked requests, direct copies and CMA are in place when
// they complete), and notifications ready together share one flush.
// One-sided operations on tcp / shared memory go as checked requests
// (rma.hpp), or as CPU copies on a peer's mapped segment (direct ops).
//
// The options (detail::options_of: the op's own and the queue pair's
// defaults), per path:
//  - completion_level::local: the UCX request's completion (the source may be
//    reused). delivered: a checked request completes when its reply is in
//    and a direct op when its copy is done, both already at the target; a
//    native put (write) or tagged send is followed by an endpoint flush
//    (stage delivery_flush) before it completes; write_with_imm already
//    flushes its data before the notification goes.
//  - unsignaled: the op slot is marked; where it would push a completion
//    (deliver) a successful one only counts in peer_state::finished, a failed
//    one pushes its error completion and counts too. A direct op needs no
//    slot at all: done in post(), and counted (unsignaled) or its completion
//    pushed at once (signaled, while ring + slots in use stay within
//    max_outstanding; else it takes a slot as before). An endpoint flush completes
//    after the requests posted before it, so a later flush finds them counted.
//  - fence: the op starts only when nothing earlier on the endpoint can still
//    be on its way: no checked request without its reply, no write_with_imm
//    unfinished, and no native operation since the last completed endpoint
//    flush (else one endpoint flush first, stage fence_flush). Until then it
//    waits on the peer's `parked` list with its target resolved (address,
//    rkey, epoch: the remote_buffer is not kept), and every op posted after it
//    waits behind it, in order. A fence with nothing in flight costs nothing.
//    (ucp_worker_fence is not used: UCX 1.13's orders per transport lane
//    only, and fabrix's checked requests and notifications are not UCX RMA.)
#pragma once

#include <fabrix/detail/completion_of.hpp>
#include <fabrix/detail/validate.hpp>
#include <fabrix/operation.hpp>
#include <fabrix/ucx/detail/cma.hpp>
#include <fabrix/ucx/detail/progress.hpp>
#include <fabrix/ucx/detail/rma.hpp>
#include <fabrix/ucx/detail/state.hpp>

#include <cstring>
#include <span>

namespace fabrix::ucx::detail {

// Whether the peer's key table confirms what `rb` claims (range and rights):
// a member of the job knows every peer's seal secret (it travels in the
// address blobs) and can seal a remote_buffer that claims more than the
// region (detail/key_table.hpp, confirms_claim).
inline bool owner_confirms(const peer_state& p, const remote_buffer& rb) noexcept {
  return fabrix::detail::confirms_claim(p.peer_keys, key_slot_of(rb.epoch), rb.epoch, rb.address, rb.length,
                                        static_cast<std::uint64_t>(rb.rights));
}

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
  // mapped here (sysv, posix): then it is used directly (direct_copy).
  // Both reach the peer's memory without the peer checking the range, so
  // both take only a remote_buffer whose claims the peer's key table confirms
  // (owner_confirms); any other goes as checked requests, which the peer
  // checks itself.
  void* mapped = nullptr;
  if (p.same_node && (rb.epoch & ucx_allocated) != 0 && owner_confirms(p, rb) &&
      ucp_rkey_ptr(rkey, rb.address, &mapped) == UCS_OK)
    e->mapped = static_cast<std::byte*>(mapped);
  // Host memory the peer registered itself, with a key-table slot: by CMA
  // (cma.hpp) while the kernel lets this process attach to the peer.
  e->by_cma = p.cma && (rb.epoch & ucx_allocated) == 0 && key_slot_of(rb.epoch) != 0 &&
              rb.location.kind == memory_kind::host && owner_confirms(p, rb);
  return e;
}

// The rkey entry an operation targets: its imported key's (one index, no
// search), or the cache's for its remote_buffer. nullptr when refused.
inline rkey_cache::entry* target_of(peer_state& p, const remote_slice& r) {
  if (r.key != nullptr) {
    rkey_cache::entry** e = p.imports.find(r.key->ref);
    return e ? *e : nullptr;
  }
  return rkey_for(p, *r.buffer);
}

// n bytes (sizeof(Word) <= n <= 2 * sizeof(Word)) as two Word moves that
// overlap where n is less than two words, as libc's small-size paths do.
template <class Word>
[[gnu::always_inline]] inline void copy_two_words(std::byte* d, const std::byte* s, std::size_t n) noexcept {
  Word head, tail;
  std::memcpy(&head, s, sizeof(Word));
  std::memcpy(&tail, s + n - sizeof(Word), sizeof(Word));
  std::memcpy(d, &head, sizeof(Word));
  std::memcpy(d + n - sizeof(Word), &tail, sizeof(Word));
}

// memcpy, with sizes of 16 bytes and less copied inline: for a small write
// on a mapped segment the library call was a third of fabrix's cost.
[[gnu::always_inline]] inline void copy_bytes(void* to, const void* from, std::size_t n) noexcept {
  auto* d = static_cast<std::byte*>(to);
  const auto* s = static_cast<const std::byte*>(from);
  if (n > 16)
    std::memcpy(d, s, n);
  else if (n >= 8)
    copy_two_words<std::uint64_t>(d, s, n);
  else if (n >= 4)
    copy_two_words<std::uint32_t>(d, s, n);
  else
    for (std::size_t i = 0; i < n; ++i) d[i] = s[i];
}

// After a direct write: its bytes before whatever announces them (a
// notification, a flag the caller writes next). gcc refuses thread fences
// under TSan, which cannot see this process-shared segment's other side
// anyway.
inline void publish_writes() noexcept {
#if defined(__SANITIZE_THREAD__)
  __atomic_signal_fence(__ATOMIC_RELEASE);
#else
  __atomic_thread_fence(__ATOMIC_RELEASE);
#endif
}

// A direct op: a one-sided operation on a peer's UCX-allocated
// shared-memory segment, mapped in this process: plain copies and CPU
// atomics (coherent with the target's, which run on the same memory), done
// at once — what UCX's own sysv/posix RMA does, without its per-operation
// cost. After the target deregisters the region the segment lives on only in
// the processes that still map it (sysv: IPC_RMID at creation; posix:
// unlinked), so an operation first checks the region's slot in the target's
// key table (direct_refusal); without a table or slot it would complete ok
// into the orphaned segment (README: deregistration).
//
// direct_copy does the operation `code` at `at` (this process's view of the
// segment) with the local slices `slices`; `result` is the atomics' 8-byte
// result buffer.
template <class Slices>
inline void direct_copy(opcode code, std::byte* at, const Slices& slices, void* result, std::uint64_t operand,
                        std::uint64_t compare) {
  switch (code) {
    case opcode::write:
    case opcode::write_with_imm:
      for (const auto& l : slices) {
        copy_bytes(at, slice_address(l), l.length);
        at += l.length;
      }
      publish_writes();
      break;
    case opcode::read:
      for (const auto& l : slices) {
        copy_bytes(slice_address(l), at, l.length);
        at += l.length;
      }
      break;
    case opcode::fetch_add: {
      const std::uint64_t old = __atomic_fetch_add(reinterpret_cast<std::uint64_t*>(at), operand, __ATOMIC_SEQ_CST);
      std::memcpy(result, &old, 8);
      break;
    }
    case opcode::compare_swap: {
      std::uint64_t expected = compare;
      __atomic_compare_exchange_n(reinterpret_cast<std::uint64_t*>(at), &expected, operand, false, __ATOMIC_SEQ_CST,
                                  __ATOMIC_SEQ_CST);
      std::memcpy(result, &expected, 8);
      break;
    }
    default: break;
  }
}

// Why a direct operation on the region of epoch `epoch` must not run
// (status::ok: it may): the target cleared the region's key-table slot
// (stale_key), or closed its whole domain (peer_unreachable). One acquire
// load while the region lives.
inline status direct_refusal(const peer_state& p, std::uint64_t epoch) noexcept {
  const std::uint32_t slot = key_slot_of(epoch);
  if (slot == 0 || !p.peer_keys.mapped() || p.peer_keys.load(slot) == epoch) return status::ok;
  return p.peer_keys.load(fabrix::detail::key_table_open_slot) != 0 ? status::stale_key : status::peer_unreachable;
}

// A direct or CMA op that ended in post (done, or refused with `st`): it
// completes with `st` (a gone peer also fails what waits on it: deliver),
// already at the target, so no delivery flush.
inline void settled_at_target(op_slot* op, status st) noexcept {
  if (st == status::peer_unreachable)
    op->first_error = UCS_ERR_UNREACHABLE;
  else
    op->remote_status = st;
  op->delivered = false;
}

// Whether an op fenced now would have to wait: something earlier on the
// endpoint may not be at the target yet.
inline bool fence_must_wait(const peer_state& p) noexcept {
  return p.imm_in_progress > 0 || p.checked_in_flight > 0 || p.native_posted != p.native_flushed;
}

// Whether the parked op at the head of p.parked may start now.
inline bool may_start(const peer_state& p, const op_slot* op) noexcept {
  if (p.fence_flushing) return false;
  if (op->st == stage::user_flush || op->fenced) return p.imm_in_progress == 0 && p.checked_in_flight == 0;
  return true;
}

// Starts the slot's operation from what the slot holds (post_one filled it;
// it may have waited parked since). Not from inside a UCX callback.
inline void start_op(peer_state& p, op_slot* op) {
  domain_state& d = *p.dom;
  op->pending = 1;  // held while posting, so the op cannot finish half-posted
  if (op->fenced && p.native_posted != p.native_flushed) {
    // Earlier native operations first: one endpoint flush, then the op
    // starts (stage_done -> fence_start -> run_deferred). Later ops park.
    op->st = stage::fence_flush;
    p.fence_flushing = true;
    post_ep_flush(p, op);
    request_done(op, UCS_OK);
    return;
  }
  const opcode code = op->c.op;
  if (code == opcode::write_with_imm) {
    op->imm_started = true;
    ++p.imm_in_progress;
  }
  rkey_cache::entry* held = op->rkey;
  if (held != nullptr && (p.checked_rma || held->mapped)) {
    if (held->mapped) {  // done now (or refused): completes below
      const status refused = direct_refusal(p, op->repoch);
      if (refused == status::ok)
        direct_copy(code, held->mapped + op->roffset, std::span(op->local.data(), op->nlocal), op->local[0].buffer,
                    op->operand, op->compare);
      settled_at_target(op, refused);
    } else if (by_cma(p, *held, code, op->rlength)) {
      const status st =
          cma_operation(p, *held, code, op->roffset, op->rlength, std::span(op->local.data(), op->nlocal));
      if (st == status::again)  // the kernel refused this peer: from now on checked requests
        post_checked(p, op);
      else
        settled_at_target(op, st);
    } else {
      post_checked(p, op);
    }
    request_done(op, UCS_OK);
    return;
  }
  ucp_request_param_t prm = request_param(op);
  ucp_rkey_h rkey = held != nullptr ? held->key : nullptr;
  std::uint64_t raddr = op->raddr;
  if (code != opcode::recv && code != opcode::flush) {
    ++p.native_posted;
    if (code != opcode::send) ++p.rma_posted;
  }
  switch (code) {
    case opcode::write:
    case opcode::write_with_imm:
    case opcode::read:
      prm.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      for (std::uint32_t i = 0; i < op->nlocal; ++i) {
        const ucp_dt_iov_t& l = op->local[i];
        prm.memh = op->memh[i];
        track(op, code == opcode::read ? ucp_get_nbx(p.ep, l.buffer, l.length, raddr, rkey, &prm)
                                       : ucp_put_nbx(p.ep, l.buffer, l.length, raddr, rkey, &prm));
        raddr += l.length;
      }
      break;
    case opcode::fetch_add:
    case opcode::compare_swap: {
      const bool cas = code == opcode::compare_swap;
      // UCX CSWAP: `buffer` holds the expected value, reply_buffer the value
      // to swap in; the old remote value then lands in reply_buffer.
      if (cas) {
        std::memcpy(op->local[0].buffer, &op->operand, 8);
        op->operand = op->compare;
      }
      prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
      prm.datatype = ucp_dt_make_contig(8);
      prm.reply_buffer = op->local[0].buffer;
      track(op,
            ucp_atomic_op_nbx(p.ep, cas ? UCP_ATOMIC_OP_CSWAP : UCP_ATOMIC_OP_ADD, &op->operand, 1, raddr, rkey, &prm));
      break;
    }
    case opcode::send:
      track(op, ucp_tag_send_nbx(p.ep, op->local[0].buffer, op->local[0].length, p.send_tag, &prm));
      break;
    case opcode::recv:
      // Generic datatype (progress.hpp): the buffer and its length are in
      // the slot; UCX hands every fragment to recv_unpack.
      prm.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL | UCP_OP_ATTR_FIELD_DATATYPE;
      prm.datatype = d.recv_dt;
      prm.cb.recv = on_recv_done;
      track_recv(op, [&] { return ucp_tag_recv_nbx(d.worker, op, 1, p.recv_tag, ~ucp_tag_t{0}, &prm); });
      break;
    case opcode::flush:  // nothing native unflushed: everything earlier is at the target already
      if (p.native_posted != p.native_flushed) post_ep_flush(p, op);
      break;
    case opcode::remote_write_imm: break;  // refused by validation
  }
  request_done(op, UCS_OK);
}

// Starts p's parked ops, in order, as far as they may (may_start). Not from
// inside a UCX callback.
inline void start_parked(peer_state& p) {
  while (op_slot* op = p.parked.head) {
    if (p.failed || !may_start(p, op)) return;
    p.parked.pop_front();
    start_op(p, op);
  }
}

// The common case, apart so that it stays small: a write or read of one
// local slice through an imported key of a peer's mapped segment, signaled
// or not, with nothing parked, fenced or failed on the endpoint. Done at
// once, as post_general's direct path would do it; false: nothing was done
// (post_general takes the operation).
inline bool post_direct_fast(peer_state& p, const operation& o) {
  if ((o.code != opcode::write && o.code != opcode::read) || o.remote.key == nullptr || !o.gather.empty()) return false;
  const op_options opts = fabrix::detail::options_of(o, p.defaults);
  if (has(opts, op_options::fence) || p.failed || !p.parked.empty() || p.fence_flushing) return false;
  rkey_cache::entry** e = p.imports.find(o.remote.key->ref);
  if (e == nullptr || (*e)->mapped == nullptr) return false;
  const rkey_cache::entry& held = **e;
  const bool unsignaled = has(opts, op_options::unsignaled);
  domain_state& d = *p.dom;
  if (!unsignaled && d.ring.size() + d.ops.in_use() >= d.ops.capacity()) return false;
  if (direct_refusal(p, held.verified.epoch) != status::ok) return false;
  std::byte* at = held.mapped + o.remote.offset;
  if (o.code == opcode::write) {
    copy_bytes(at, o.local.address, o.local.length);
    publish_writes();
  } else {
    copy_bytes(o.local.address, at, o.local.length);
  }
  if (unsignaled)
    ++p.finished;
  else
    d.ring.push(fabrix::detail::completion_of(o));
  return true;
}

// Every other operation (and a direct one that post_direct_fast left).
// Kept out of line so that post_one, which the batch loop calls per
// operation, stays small.
[[gnu::noinline]] inline status post_general(peer_state& p, const operation& o) {
  domain_state& d = *p.dom;
  if (p.failed) return status::peer_unreachable;
  const op_options opts = fabrix::detail::options_of(o, p.defaults);
  const bool fenced = has(opts, op_options::fence);
  // Nothing of this endpoint waits to start: an op may start now.
  const bool in_order = p.parked.empty() && !p.fence_flushing;

  rkey_cache::entry* held = nullptr;
  std::uint64_t raddr = 0;
  if (fabrix::detail::uses_remote(o.code)) {
    held = target_of(p, o.remote);
    if (held == nullptr) return status::invalid_argument;
    raddr = held->verified.address + o.remote.offset;
    // Fast path: a direct op needs no slot. It is done now; unsignaled, it
    // is counted; signaled, its completion goes to the ring at once while
    // the ring and the slots in use together stay within max_outstanding
    // (past that it takes the slot path, as every direct op did before).
    // The same for CMA, whose refusals and failures go the slot path: it
    // asks again and completes the operation with the answer.
    const bool unsignaled = has(opts, op_options::unsignaled);
    const bool now = o.code != opcode::write_with_imm && in_order &&
                     (unsignaled || d.ring.size() + d.ops.in_use() < d.ops.capacity()) &&
                     !(fenced && fence_must_wait(p));
    bool done = false;
    if (now && held->mapped && direct_refusal(p, held->verified.epoch) == status::ok) {
      direct_copy(o.code, held->mapped + o.remote.offset, o.locals(), o.locals()[0].address, o.operand, o.compare);
      done = true;
    } else if (now && by_cma(p, *held, o.code, o.remote.length)) {
      done = cma_operation(p, *held, o.code, o.remote.offset, o.remote.length, o.locals()) == status::ok;
    }
    if (done) {
      if (unsignaled)
        ++p.finished;
      else
        d.ring.push(fabrix::detail::completion_of(o));
      return status::ok;
    }
  }
  op_slot* op = o.code == opcode::recv ? d.recvs.take() : d.ops.take();
  if (op == nullptr) return status::again;
  op->seq = ++d.next_seq;
  op->rkey = held;
  if (held != nullptr) rkey_cache::hold(held);
  op->in_use = true;
  op->dom = &d;
  op->peer = &p;
  op->c = fabrix::detail::completion_of(o);
  op->st = o.code == opcode::flush ? stage::user_flush : stage::data;
  op->unsignaled = has(opts, op_options::unsignaled);
  op->fenced = fenced && o.code != opcode::flush;  // a flush waits for everything before it anyway
  // delivered costs an endpoint flush on native lanes only (start_op clears
  // it for checked and direct ops, which complete at the target anyway).
  op->delivered = has(opts, op_options::delivered) && (o.code == opcode::write || o.code == opcode::send);
  op->raddr = raddr;
  if (held != nullptr) {
    op->roffset = o.remote.offset;
    op->rlength = o.remote.length;
    op->repoch = held->verified.epoch;
  }
  op->operand = o.operand;
  op->compare = o.compare;
  if (o.code == opcode::write_with_imm) {
    op->header.imm = o.imm;
    op->header.bytes = o.remote.length;
    op->header.sender = d.nonce;
  }
  op->nlocal = 0;
  if (o.code == opcode::recv) {
    op->c.bytes = 0;
    op->c.peer = p.peer_id;
    op->local[0] = ucp_dt_iov_t{o.local.address, o.local.length};
    op->nlocal = 1;
  } else if (o.code != opcode::flush) {
    const bool keep_empty = o.code == opcode::send;  // its one buffer, even empty
    for (const local_slice& l : o.locals()) {
      if (l.length == 0 && !keep_empty) continue;
      op->memh[op->nlocal] = static_cast<ucp_mem_h>(l.descriptor);
      op->local[op->nlocal++] = ucp_dt_iov_t{l.address, l.length};
    }
  }
  if (o.code != opcode::recv && (!in_order || !may_start(p, op))) {
    p.parked.push_back(op);  // started by start_parked, in order
    return status::ok;
  }
  start_op(p, op);
  return status::ok;
}

inline status post_one(peer_state& p, const operation& o) {
  return post_direct_fast(p, o) ? status::ok : post_general(p, o);
}

}  // namespace fabrix::ucx::detail
