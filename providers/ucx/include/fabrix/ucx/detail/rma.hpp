// Checked one-sided operations: write, read, fetch_add and compare_swap
// carried by fabrix itself as active messages, checked by the target.
//
// Why: where a transport has no hardware RMA (tcp, shared memory for memory
// the user allocated, self), UCX 1.13 emulates put/get/atomics in software
// (ucp_rma_sw.c, ucp_amo_sw.c): the target's UCX writes to, or reads from,
// the raw address in the message without looking at any key. After the
// target deregisters a region (ucp_mem_unmap), writes through its old
// remote_buffer still land — in freed memory, or in an unmapped page, where
// the target dies of SIGSEGV inside ucp_put_handler. There is nothing to
// revoke. So on such endpoints (peer_state::checked_rma) fabrix sends each
// operation as an AM to its own handler at the target, which looks the
// region up in its table of live registrations (epoch, bounds, rights)
// before it touches a byte, and answers with a status:
//
//   initiator                              target (on_rma, inside progress)
//   am_rma {slot, seq, epoch, addr, len}   region live? in bounds? rights?
//     + a write's bytes (forced eager)     write: copy; read: copy out;
//                                          atomic: __atomic op on the word
//   on_rma_reply <-----------------------  am_rma_reply {status, value}
//     + a read's bytes                       (sent after progress returns)
//
// Answers without bytes (writes, atomics) queued for one peer in one
// progress round go back as one AM, up to max_batched_replies of them
// (fold_replies): over tcp, a message per answer held small writes below
// ucx_perftest's bandwidth (perf/results/2026-12-05). A read's answer goes
// alone.
// A deregistered region's epoch is gone from the table: the reply says
// stale_key and not one byte changes. The operation completes when its reply
// is in: a write is then in place at the target (stronger than UCX's put).
// So it is at completion_level::delivered whatever the op asked.
// Ordering with write_with_imm, flush and fenced ops: each waits until the
// peer's checked requests posted before it have their replies (peer_state::
// checked_in_flight); write_with_imm and flush then flush the endpoint for
// anything else, a fenced op only when native operations are unflushed
// (post.hpp).
//
// Cost: no allocation per operation (headers live in the op slot, replies
// in a pool whose read buffers keep their capacity); a hash lookup at the
// target; a read is copied once more at the target. Forced eager AMs are
// assembled by UCX at the target for large writes (UCX allocates there).
#pragma once

#include <fabrix/ucx/detail/progress.hpp>
#include <fabrix/ucx/detail/state.hpp>

#include <array>
#include <cstring>

namespace fabrix::ucx::detail {

inline bool grants(access rights, access need) noexcept { return (rights & need) == need; }

// The target's check of one request against its live registrations.
inline status check_request(const domain_state& d, const rma_header& h, std::size_t payload) noexcept {
  const auto it = d.regions.find(h.epoch);
  if (it == d.regions.end()) return status::stale_key;
  const region_entry& r = it->second;
  if (h.address < r.address || h.length > r.length || h.address - r.address > r.length - h.length)
    return status::out_of_range;
  switch (h.kind) {
    case rma_kind::write:
      if (payload != h.length) return status::invalid_argument;
      return grants(r.rights, access::remote_write) ? status::ok : status::access_denied;
    case rma_kind::read: return grants(r.rights, access::remote_read) ? status::ok : status::access_denied;
    case rma_kind::fetch_add:
    case rma_kind::compare_swap:
      if (h.length != 8 || h.address % 8 != 0) return status::invalid_argument;
      return grants(r.rights, access::remote_atomic) ? status::ok : status::access_denied;
  }
  return status::invalid_argument;
}

inline void queue_reply(domain_state& d, reply_slot* r) noexcept {
  if (d.replies_tail)
    d.replies_tail->next = r;
  else
    d.replies_head = r;
  d.replies_tail = r;
}

// Copies an AM's fixed header into `h`: false (the message is malformed)
// when its length is not sizeof(H) or it came by rendezvous, which neither
// checked requests nor their answers use.
template <class H>
bool take_header(const void* header, size_t header_length, const ucp_am_recv_param_t* param, H& h) noexcept {
  if (header_length != sizeof(h) || (param && (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))) return false;
  std::memcpy(&h, header, sizeof(h));
  return true;
}

// What a sender puts in rma_header::proof for a target whose address blob
// gave it `target_secret`: a keyed hash of its own nonce. Every rank of the
// job holds the blob (the bootstrap's allgather), a process outside it does
// not.
inline std::uint64_t sender_proof(const fabrix::detail::seal_key& target_secret, std::uint64_t sender) noexcept {
  std::array<std::byte, 8> in;
  std::memcpy(in.data(), &sender, in.size());
  return fabrix::detail::siphash24(target_secret, in);
}

// Whether `ep` is one this domain is closing (a queue pair it closed whose
// peer still sends): no answer goes there.
inline bool closing(const domain_state& d, ucp_ep_h ep) noexcept {
  for (const closing_endpoint& c : d.closing)
    if (c.peer && c.peer->ep == ep) return true;
  return false;
}

// Target: one checked request. Runs inside ucp_worker_progress; the reply is
// sent from run_deferred. A request from a domain this one has no queue pair
// to — it connected, this one did not (a queue pair made on first use, a
// client that came later) — is served when its proof shows the sender holds
// this domain's address blob, and answered on the endpoint UCX hands the
// handler (requests are sent with UCP_AM_SEND_FLAG_REPLY) unless that is an
// endpoint this domain is closing. Anything else — malformed, a failed
// peer's, an unknown sender without a valid proof, one whose queue pair here
// is closing — is counted and dropped.
inline ucs_status_t on_rma(void* arg, const void* header, size_t header_length, void* data, size_t length,
                           const ucp_am_recv_param_t* param) {
  auto* d = static_cast<domain_state*>(arg);
  rma_header h;
  if (!take_header(header, header_length, param, h) || h.magic != rma_magic) {
    ++d->dropped_requests;
    return UCS_OK;
  }
  peer_state* from = d->find_peer(h.sender);
  ucp_ep_h reply_ep = nullptr;
  if (from == nullptr && param != nullptr && (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) &&
      param->reply_ep != nullptr && h.proof == sender_proof(d->secret, h.sender) && !closing(*d, param->reply_ep))
    reply_ep = param->reply_ep;
  if ((from == nullptr && reply_ep == nullptr) || (from != nullptr && from->failed)) {
    ++d->dropped_requests;
    return UCS_OK;
  }
  reply_slot* r = d->take_reply();
  r->to = from;
  r->reply_ep = reply_ep;
  r->h = rma_reply_header{};
  r->h.index = h.index;
  r->h.seq = h.seq;
  r->h.sender = d->nonce;
  r->data.clear();
  r->read = h.kind == rma_kind::read;
  const status s = check_request(*d, h, length);
  if (s == status::ok) {
    auto* target = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(h.address));
    switch (h.kind) {
      case rma_kind::write:
        if (h.length) std::memcpy(target, data, h.length);
        break;
      case rma_kind::read: r->data.assign(target, target + h.length); break;
      case rma_kind::fetch_add:
        r->h.value = __atomic_fetch_add(reinterpret_cast<std::uint64_t*>(target), h.operand, __ATOMIC_SEQ_CST);
        break;
      case rma_kind::compare_swap: {
        std::uint64_t expected = h.compare;
        __atomic_compare_exchange_n(reinterpret_cast<std::uint64_t*>(target), &expected, h.operand, false,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        r->h.value = expected;  // the old value either way
        break;
      }
    }
  }
  r->h.result = static_cast<std::uint8_t>(s);
  queue_reply(*d, r);
  return UCS_OK;
}

inline void on_reply_sent(void* request, ucs_status_t, void* user) {
  auto* r = static_cast<reply_slot*>(user);
  r->dom->give_back_reply(r);
  ucp_request_free(request);
}

// Whether r's answer carries no bytes (a write's or an atomic's).
inline bool batchable(const reply_slot* r) noexcept { return !r->read; }

// Folds the answers queued right after `r` to the same peer, while they
// carry no bytes, into r (at most max_batched_replies): r becomes a batch
// (replies_magic) whose data holds one rma_reply_entry per answer, in queue
// order. The folded slots go back to the pool. A run of one stays as it is.
inline void fold_replies(domain_state& d, reply_slot* r) {
  auto joins = [&](const reply_slot* next) {
    return next != nullptr && next->to == r->to && next->reply_ep == r->reply_ep && batchable(next);
  };
  if (!batchable(r) || !joins(d.replies_head)) return;
  auto add = [&](const rma_reply_header& h) {
    const rma_reply_entry e = entry_of(h);
    const auto* b = reinterpret_cast<const std::byte*>(&e);
    r->data.insert(r->data.end(), b, b + sizeof(e));
  };
  add(r->h);
  std::uint32_t count = 1;
  for (reply_slot* next = d.replies_head; joins(next) && count < max_batched_replies; next = d.replies_head) {
    add(next->h);
    ++count;
    d.replies_head = next->next;
    if (d.replies_head == nullptr) d.replies_tail = nullptr;
    d.give_back_reply(next);
  }
  rma_reply_header batch;
  batch.magic = replies_magic;
  batch.index = count;
  batch.sender = r->h.sender;
  r->h = batch;
}

// Sends the queued replies (after progress, never inside a callback): each
// run of answers without bytes to one peer as one AM (fold_replies). A reply
// to a peer that failed or closed meanwhile is dropped. Runs after every
// ucp_worker_progress that may have queued one (run_deferred, and the
// liveness drain), before the next: a reply_ep stays valid that long.
inline void send_replies(domain_state& d) {
  while (reply_slot* r = d.replies_head) {
    d.replies_head = r->next;
    if (d.replies_head == nullptr) d.replies_tail = nullptr;
    peer_state* to = r->to;
    const ucp_ep_h ep = to != nullptr ? to->ep : r->reply_ep;
    if (ep == nullptr || (to != nullptr && to->failed)) {
      d.give_back_reply(r);
      continue;
    }
    fold_replies(d, r);
    r->to = nullptr;
    r->reply_ep = nullptr;
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    prm.cb.send = on_reply_sent;
    prm.user_data = r;
    prm.flags = UCP_AM_SEND_FLAG_EAGER;
    const ucs_status_ptr_t p =
        ucp_am_send_nbx(ep, am_rma_reply, &r->h, sizeof(r->h), r->data.data(), r->data.size(), &prm);
    if (!UCS_PTR_IS_PTR(p)) d.give_back_reply(r);
  }
}

// Initiator: settles our op `e.index` (if `e.seq`, `sender` and its state
// match) with one answer: its result, an atomic's old value, a read's bytes.
inline void settle_reply(domain_state* d, std::uint64_t sender, const rma_reply_entry& e, const void* data,
                         std::size_t length) {
  op_slot* op = e.index < d->ops.capacity() ? d->ops.begin() + e.index : nullptr;
  if (op == nullptr || !op->in_use || op->seq != e.seq || !op->awaiting_reply || op->peer == nullptr ||
      op->peer->recv_tag != sender) {
    ++d->dropped_requests;
    return;
  }
  op->awaiting_reply = false;
  auto result = static_cast<status>(e.result);
  if (result == status::ok) {
    if (op->rma.kind == rma_kind::read) {
      if (length != op->rma.length) {
        result = status::provider_error;
      } else {
        auto* src = static_cast<const std::byte*>(data);
        for (std::uint32_t i = 0; i < op->nlocal; ++i) {
          std::memcpy(op->local[i].buffer, src, op->local[i].length);
          src += op->local[i].length;
        }
      }
    } else if (op->rma.kind != rma_kind::write) {
      std::memcpy(op->local[0].buffer, &e.value, 8);
    }
  }
  if (result != status::ok && op->remote_status == status::ok) op->remote_status = result;
  request_done(op, UCS_OK);
}

// Initiator: the answer to one of our checked requests, or a batch of them
// (replies_magic: the data is `index` rma_reply_entry, each settled alone).
// Anything malformed is counted and dropped.
inline ucs_status_t on_rma_reply(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                 const ucp_am_recv_param_t* param) {
  auto* d = static_cast<domain_state*>(arg);
  rma_reply_header h;
  if (!take_header(header, header_length, param, h)) {
    ++d->dropped_requests;
    return UCS_OK;
  }
  if (h.magic == reply_magic) {
    settle_reply(d, h.sender, entry_of(h), data, length);
  } else if (h.magic == replies_magic && h.index <= max_batched_replies &&
             length == std::size_t{h.index} * sizeof(rma_reply_entry)) {
    const auto* bytes = static_cast<const std::byte*>(data);
    for (std::uint32_t i = 0; i < h.index; ++i) {
      rma_reply_entry e;
      std::memcpy(&e, bytes + i * sizeof(e), sizeof(e));
      settle_reply(d, h.sender, e, nullptr, 0);
    }
  } else {
    ++d->dropped_requests;
  }
  return UCS_OK;
}

// The AM of a checked request left (or failed: then no reply will come).
inline void on_request_sent(void* request, ucs_status_t s, void* user) {
  auto* op = static_cast<op_slot*>(user);
  op->request = nullptr;
  if (s != UCS_OK) drop_reply(op, s);
  request_done(op, s);
  ucp_request_free(request);
}

// Posts the slot's operation as a checked request on `p` (post_one filled
// the slot: target address, length and epoch, the non-empty local slices).
inline void post_checked(peer_state& p, op_slot* op) {
  domain_state& d = *p.dom;
  rma_header& h = op->rma;
  h = rma_header{};
  h.index = static_cast<std::uint32_t>(op - d.ops.begin());
  h.seq = op->seq;
  h.sender = d.nonce;
  h.epoch = op->repoch;
  h.address = op->raddr;
  h.length = op->rlength;
  h.proof = p.proof;
  ucp_request_param_t prm{};
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  prm.cb.send = on_request_sent;
  prm.user_data = op;
  // Eager: whole at the target's handler, checked before a byte lands.
  // Reply: a target with no queue pair to us answers on that endpoint.
  prm.flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
  const void* payload = nullptr;
  std::size_t count = 0;
  switch (op->c.op) {
    case opcode::write:
    case opcode::write_with_imm:
      h.kind = rma_kind::write;
      if (op->nlocal == 1) {
        payload = op->local[0].buffer;
        count = op->local[0].length;
      } else if (op->nlocal > 1) {
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        prm.datatype = ucp_dt_make_iov();
        payload = op->local.data();
        count = op->nlocal;
      }
      break;
    case opcode::read: h.kind = rma_kind::read; break;
    case opcode::fetch_add:
      h.kind = rma_kind::fetch_add;
      h.operand = op->operand;
      break;
    case opcode::compare_swap:
      h.kind = rma_kind::compare_swap;
      h.operand = op->operand;
      h.compare = op->compare;
      break;
    default: return;
  }
  op->checked = true;
  ++p.checked_in_flight;
  op->awaiting_reply = true;
  op->pending += 2;  // the AM and the reply
  const ucs_status_ptr_t r = ucp_am_send_nbx(p.ep, am_rma, &h, sizeof(h), payload, count, &prm);
  if (UCS_PTR_IS_PTR(r)) return;  // on_request_sent follows
  if (UCS_PTR_STATUS(r) != UCS_OK) drop_reply(op, UCS_PTR_STATUS(r));
  request_done(op, UCS_PTR_STATUS(r));
}

}  // namespace fabrix::ucx::detail
