// Posting one validated operation on a libfabric endpoint.
//
// Mapping: write -> fi_writemsg (FI_DELIVERY_COMPLETE); read -> fi_readmsg;
// write_with_imm -> fi_writemsg with FI_REMOTE_CQ_DATA | FI_DELIVERY_COMPLETE;
// fetch_add -> fi_fetch_atomic FI_SUM, compare_swap -> fi_compare_atomic
// FI_CSWAP, both FI_UINT64; send / recv -> fi_tsendmsg / fi_trecvmsg (the tag
// names the sending domain), a small local send -> fi_tinject (inject_send);
// flush -> nothing to post. Over shm, a write or read of a node-mate's
// confirmed host memory is fabrix's own CMA copy, complete at post (by_cma).
//
// Completion levels (completion.hpp). Every write, atomic and send is posted
// with FI_DELIVERY_COMPLETE, so its completion means its data is in place at
// the target: completion_level::delivered, which includes local, whichever
// the operation asked for (op_options::delivered costs nothing more). Not
// yet cheaper at local: a write posted with FI_INJECT_COMPLETE would leave
// flush, fence and write_with_imm needing a delivery-complete operation
// ordered after it, and 1.17 offers none that fits every case: a read needs
// remote_read rights on some live region of the peer (a refused RMA makes
// shm drop it unanswered and tcp;ofi_rxm drop the connection), shm never
// completes a zero-length FI_DELIVERY_COMPLETE write, and shm declares no
// RAW/WAW order. tcp;ofi_rxm does declare them, so there a flush could be a
// read of a small region of fabrix's own registered at every peer, ordered
// after the writes; but a write the target refuses (a region released while
// writes to it are in flight from another node, where no key table warns)
// makes the target drop the connection, and rxm opens a new one for the
// next operation without a word: the write completed at local, the flush's
// read succeeds on the new connection, and the lost write is never reported.
// So a local write is delivered too, and errors (stale key, refused key,
// peer death) keep arriving on the operation itself.
//
// Options, as detail::options_of gives them once per operation (fill_slot):
//   unsignaled: posted like any other (the slot still receives libfabric's
//     completion: it holds the operation until then, and an error entry
//     names it, hence its token); finish() then counts it in the queue
//     pair's finished() and frees the slot without a completion when it
//     succeeded, or pushes its error completion when it failed. No
//     allocation, no software completion per successful operation.
//   fence: neither tcp;ofi_rxm nor shm 1.17 has FI_FENCE, so a fenced
//     operation is parked like a flush (below) until nothing earlier on its
//     queue pair is in flight; with FI_DELIVERY_COMPLETE that means complete
//     at the target. The slot holds the resolved target (address, key), never
//     the caller's remote_buffer.
//
// Ordering. A write_with_imm, flush or fenced operation is *parked* in its
// queue pair's FIFO until every operation posted before it on that queue
// pair has completed (an operation held for a stale-key verdict counts as
// in flight); operations posted while something is parked queue behind it
// (no overtaking, so a stream cannot starve it). So a notification is never
// visible before its own data (libfabric writes the target's CQ entry after
// the data) nor before the data of earlier operations on the queue pair, and
// a flush completes after every earlier operation has completed at the
// target and every earlier unsignaled one is counted in finished(). The
// price: such an operation waits one completion round trip for earlier
// operations, if any are in flight.
//
// Back-pressure: an operation libfabric refuses with -FI_EAGAIN (rxm and
// shm still connecting to the peer, a full send queue, rxm reconnecting to
// a peer that died) waits in the queue pair's FIFO, holding its slot, and
// poll() posts it; the caller sees status::ok. Only an empty slot pool
// (domain_options::max_outstanding) is status::again. So the pool bounds
// what waits, and a dead peer's waiting operations fail with the peer
// (fail_peer) instead of the caller spinning on again.
#pragma once

#include <fabrix/detail/completion_of.hpp>
#include <fabrix/detail/validate.hpp>
#include <fabrix/ofi/detail/progress.hpp>
#include <fabrix/ofi/detail/state.hpp>

#include <array>
#include <cstring>
#include <span>

namespace fabrix::ofi::detail {

// Whether the peer's key table confirms what `rb` claims (range and rights):
// every member of a job knows every peer's seal secret and can seal a
// remote_buffer that claims more than the region, and a read shm does
// itself (local_read) is checked by nothing else (detail/key_table.hpp,
// confirms_claim; a stale region's operations are refused by key_is_stale
// and again inside the access board).
inline bool owner_confirms(const peer_state& p, const remote_key& key, const remote_buffer& rb) noexcept {
  return fabrix::detail::confirms_claim(p.peer_keys, key.slot, rb.epoch, rb.address, rb.length,
                                        static_cast<std::uint64_t>(rb.rights));
}

// The key for `rb` on this endpoint: verified once per remote region (not per
// operation) — the peer of this endpoint made it, nothing in it was changed
// (its seal), and its key bytes decode. nullptr when refused.
// The pointer is good until the next key_for on this endpoint (which may
// drop the entry): operations copy the key when they are posted.
inline const remote_key* key_for(peer_state& p, const remote_buffer& rb) {
  if (const auto* e = p.regions.find(rb)) return &e->key;
  if (rb.owner != p.nonce || rb.seal != rb.compute_seal(p.peer_secret)) return nullptr;
  auto key = decode_key(rb.key_bytes());
  if (!key) return nullptr;
  key->confirmed = p.dom->local_reads && owner_confirms(p, *key, rb);
  key->host = rb.location.kind == memory_kind::host;
  return &p.regions.add(rb, *key)->key;
}

// Whether the peer's key table says the region of `key` (registered with
// `epoch`) is gone. One acquire load; false when the peer's table is not
// mapped (another node) or the region has no slot.
inline bool key_is_stale(const peer_state& p, const remote_key& key, std::uint64_t epoch) noexcept {
  return p.peer_keys.mapped() && key.slot != 0 && key.slot < key_table_slots && p.peer_keys.load(key.slot) != epoch;
}

// The region an operation targets: its imported key's (one index), or the
// verified region of its remote_buffer. False when refused.
struct target {
  const remote_key* key = nullptr;
  std::uint64_t base = 0;
  std::uint64_t epoch = 0;
};
inline bool target_of(peer_state& p, const remote_slice& r, target& t) {
  if (r.key != nullptr) {
    const imported_region* e = p.imports.find(r.key->ref);
    if (e == nullptr) return false;
    t = {&e->key, e->base, e->epoch};
    return true;
  }
  t = {key_for(p, *r.buffer), r.buffer->address, r.buffer->epoch};
  return t.key != nullptr;
}

// Fills a slot from `o`, whose effective options (detail::options_of) are
// `opts`. `t.key` is null for operations without a remote side.
inline void fill_slot(domain_state& d, peer_state& p, op_slot* op, const operation& o, const target& t,
                      op_options opts = op_options::none) {
  op->peer = &p;
  op->unsignaled = has(opts, op_options::unsignaled);
  op->fenced = has(opts, op_options::fence);
  op->c = fabrix::detail::completion_of(o);
  op->c.peer = o.code == opcode::recv ? p.peer_id : 0;  // its tag names the sender: this queue pair's peer
  op->iov_count = 0;
  if (o.code != opcode::flush) {
    for (const local_slice& l : o.locals()) {
      op->iov[op->iov_count] = iovec{l.address, static_cast<std::size_t>(l.length)};
      op->desc[op->iov_count] = l.descriptor;
      ++op->iov_count;
    }
  }
  if (t.key) {
    op->raddr = t.key->target(t.base, o.remote.offset);
    op->rkey = t.key->key;
    op->local_read = o.code == opcode::read && t.key->confirmed;
    op->rslot = t.key->slot;
    op->repoch = t.epoch;
  }
  const std::size_t i = d.index_of(op);
  if (o.code == opcode::fetch_add) d.operands[operand_words * i] = o.operand;
  if (o.code == opcode::compare_swap) {
    d.operands[operand_words * i] = o.operand;      // the value to swap in
    d.operands[operand_words * i + 1] = o.compare;  // the expected value
  }
}

// Posts a filled slot now, or parks it (see above). On anything but ok the
// slot is back in the pool. A recv is never parked: it is ordered only with
// other recvs (all posted straight away, so in call order), and parked
// behind a flush it could deadlock: tcp;ofi_rxm stops reading a connection
// whose next message has no receive, so the completion the flush waits for,
// queued behind that message, would never be read.
inline status post_slot(peer_state& p, op_slot* op) {
  domain_state& d = *p.dom;
  const bool recv = op->c.op == opcode::recv;
  if (!recv && (!p.parked.empty() || (needs_quiet(*op) && p.inflight > 0))) {
    park(p, op);
    return status::ok;
  }
  int native = 0;
  const status s = start(d, op, native);
  if (s == status::again && !recv) {  // connecting, or the provider's queue is full: poll() posts it
    park(p, op);
    return status::ok;
  }
  if (s != status::ok) release_slot(d, op);
  return s;
}

// Whether an operation that completes at post (inject_send, post_by_cma)
// may: it takes no slot, so its completion waiting in the ring counts
// against max_ops instead, and the ring (sized for that, state.hpp) never
// grows for operations of ours.
inline bool ring_has_room(const domain_state& d) noexcept { return d.ops_in_use + d.ring.size() < d.max_ops; }

// The end of an operation that completed inside post() with status `s`: an
// unsignaled one is counted in finished() and pushes a completion only when
// it failed (then with bytes 0); a signaled one pushes its completion.
inline void complete_at_post(domain_state& d, peer_state& p, const operation& o, op_options opts, status s) {
  const bool unsignaled = has(opts, op_options::unsignaled);
  if (unsignaled) ++p.finished;
  if (unsignaled && s == status::ok) return;
  completion c = fabrix::detail::completion_of(o);
  c.status = s;
  if (s != status::ok) c.bytes = 0;
  d.ring.push(c);
}

// A send of host memory, at most inject_size bytes, at completion_level::
// local, not fenced, with nothing parked before it on its queue pair and
// room in the ring for its completion: fi_tinject has copied it when it
// returns, so it completes here, with no slot and no libfabric completion
// (over tcp;ofi_rxm each of those costs a signal socket write and read).
// Like every local send, its completion promises nothing about delivery; a
// later flush does not wait for it (it was never in flight here).
inline bool injectable(const domain_state& d, const peer_state& p, const operation& o, op_options opts) noexcept {
  return o.code == opcode::send && o.locals().size() == 1 && o.locals()[0].length <= d.inject_size &&
         o.locals()[0].location.kind == memory_kind::host && !has(opts, op_options::fence) &&
         !has(opts, op_options::delivered) && p.parked.empty() && ring_has_room(d);
}

// again: libfabric had no room; the caller posts it the usual way.
inline status inject_send(domain_state& d, peer_state& p, const operation& o, op_options opts) {
  const local_slice& l = o.locals()[0];
  const ssize_t ret = fi_tinject(d.ep, l.address, l.length, p.addr, d.nonce);
  if (ret == -FI_EAGAIN) return status::again;
  if (ret != 0) return to_status(ret);
  complete_at_post(d, p, o, opts, status::ok);
  return status::ok;
}

// A write or read of at least cma_min_bytes (default: any size) to a
// node-mate's host memory whose range and rights its key table confirmed
// (key_for), from host memory, not fenced, with nothing parked before it on
// its queue pair and room in the ring for its completion: fabrix copies it
// itself by CMA (detail/cma.hpp) inside the access board, and it completes here, its
// bytes in place at the target (completion_level::delivered) — no slot, no
// libfabric call, no progress needed at the target. libfabric's shm would
// instead send the target a command per write and wait for its answer
// (FI_DELIVERY_COMPLETE, above); its own CMA ("fast RMA") for writes has no
// target-side check and could complete before the target has the bytes
// where shm turns CMA off (FI_HMEM, FI_SHM_DISABLE_CMA). A flush or fence
// after it has nothing to wait for: it is complete when post() returns.
inline bool by_cma(const domain_state& d, const peer_state& p, const operation& o, const target& t,
                   op_options opts) noexcept {
  if (!p.cma || t.key == nullptr || !t.key->confirmed || !t.key->host) return false;
  if ((o.code != opcode::write && o.code != opcode::read) || o.remote.length < d.cma_min_bytes) return false;
  if (has(opts, op_options::fence) || !p.parked.empty() || !ring_has_room(d)) return false;
  for (const local_slice& l : o.locals())
    if (l.location.kind != memory_kind::host) return false;
  return true;
}

// again: nothing was copied (the region was released, the peer's domain
// closed or its process left, or the kernel refused to attach to it, which
// turns CMA off for the peer): the caller posts it the usual way, which gives
// the verdict (stale_key after hold_stale, peer_unreachable) or the transfer.
inline status post_by_cma(domain_state& d, peer_state& p, const operation& o, const target& t, op_options opts) {
  using fabrix::detail::cma_verdict;
  std::array<iovec, max_iov> local{};
  std::size_t n = 0;
  for (const local_slice& l : o.locals()) local[n++] = iovec{l.address, static_cast<std::size_t>(l.length)};
  const fabrix::detail::cma_target ct{&p.peer_keys, p.nonce, t.key->slot, t.epoch, p.identity.pid};
  status s = status::ok;
  switch (fabrix::detail::cma_under_board(d.keys.map, ct, o.code, t.base + o.remote.offset, o.remote.length,
                                          std::span<const iovec>(local.data(), n))) {
    case cma_verdict::done: break;
    case cma_verdict::fault: s = status::access_denied; break;  // not mapped on one side: no complete copy
    case cma_verdict::not_permitted: p.cma = false; return status::again;
    case cma_verdict::stale:
    case cma_verdict::closed:
    case cma_verdict::gone: return status::again;
  }
  ++d.cma_operations;
  complete_at_post(d, p, o, opts, s);
  return status::ok;
}

inline status post_one(peer_state& p, const operation& o) {
  domain_state& d = *p.dom;
  if (p.failed) return status::peer_unreachable;
  if (o.locals().size() > d.iov_limit && o.code != opcode::flush) return status::invalid_argument;
  target t;
  if (fabrix::detail::uses_remote(o.code) && !target_of(p, o.remote, t)) return status::invalid_argument;
  const op_options opts = fabrix::detail::options_of(o, p.defaults);
  if (by_cma(d, p, o, t, opts)) {
    if (const status s = post_by_cma(d, p, o, t, opts); s != status::again) return s;
  }
  if (injectable(d, p, o, opts)) {
    if (const status s = inject_send(d, p, o, opts); s != status::again) return s;
  }
  op_slot* op = take_slot(d, o.code == opcode::recv);
  if (op == nullptr) return status::again;
  fill_slot(d, p, op, o, t, opts);
  // The target deregistered the region (its key table says so, detail/key_table.hpp):
  // nothing goes to libfabric, which would drop (shm) or disconnect (tcp).
  if (t.key && key_is_stale(p, *t.key, t.epoch)) {
    hold_stale(d, op);
    return status::ok;
  }
  return post_slot(p, op);
}

}  // namespace fabrix::ofi::detail
