// Progress of a cuda_ipc domain, all on the caller's thread (no hidden
// threads): accepting connections, reading packets from every link,
// finishing operations whose CUDA event has completed, and sending the
// notifications of write_with_imm once their data is in place.
#pragma once

#include <fabrix/cuda/ipc/detail/socket.hpp>
#include <fabrix/cuda/ipc/detail/state.hpp>
#include <fabrix/cuda/ipc/detail/wire.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace fabrix::cuda::ipc::detail {

// An unsignaled operation is counted in its peer's `finished` and gives a
// completion only when it failed.
inline void finish(domain_state& d, op_slot* op) {
  if (op->unsignaled) ++op->peer->finished;
  if (!op->unsignaled || op->c.status != status::ok) d.ring.push(op->c);
  if (op->c.op == opcode::recv)
    d.recv_ops.give_back(op);
  else
    d.ops.give_back(op);
}

// The peer's domain is gone (its socket closed) or unreachable: pending
// receives fail, later posts return peer_unreachable. Copies already on the
// stream still complete (the mappings stay valid until released).
inline void fail_peer(peer_state& p, const std::string& why) {
  if (p.failed) return;
  p.failed = true;
  p.failure = why;
  while (op_slot* r = p.recvs.pop_front()) {
    r->c.status = status::peer_unreachable;
    finish(*p.dom, r);
  }
}

// Copies a message into a posted receive (host or device memory). Longer
// than the buffer: truncated, bytes = the buffer's length, which holds the
// message's first bytes. c.peer was set when the recv was posted.
inline void complete_recv(domain_state& d, op_slot* r, std::span<const std::byte> bytes) {
  const std::size_t n = std::min<std::size_t>(bytes.size(), r->recv_dst.length);
  if (n > 0) {
    if (r->recv_dst.location.kind == memory_kind::host) {
      std::memcpy(r->recv_dst.address, bytes.data(), n);
    } else {
      // On the queue pair's stream, then wait: the bytes are in device memory
      // when the completion is seen (a plain cudaMemcpy from pageable memory
      // may return before its DMA is done).
      cudaStream_t s = r->peer ? r->peer->stream : nullptr;
      cudaError_t e = cudaMemcpyAsync(r->recv_dst.address, bytes.data(), n, cudaMemcpyHostToDevice, s);
      if (e == cudaSuccess) e = cudaStreamSynchronize(s);
      if (e != cudaSuccess) {
        r->c.status = to_status(e);
        r->c.native_code = static_cast<std::int32_t>(e);
      }
    }
  }
  r->c.bytes = n;
  if (bytes.size() > r->recv_dst.length && r->c.status == status::ok) r->c.status = status::truncated;
  finish(d, r);
}

inline peer_state* peer_with_recv(domain_state& d, std::uint64_t nonce) {
  for (peer_state* p : d.peers)
    if (p->nonce == nonce && !p->recvs.empty()) return p;
  return nullptr;
}

inline void deliver_message(domain_state& d, std::uint64_t nonce, std::span<const std::byte> bytes) {
  if (peer_state* p = peer_with_recv(d, nonce)) return complete_recv(d, p->recvs.pop_front(), bytes);
  if (d.unexpected.size() >= domain_state::max_unexpected) {
    ++d.dropped_packets;
    return;
  }
  d.unexpected.push_back({nonce, std::vector<std::byte>(bytes.begin(), bytes.end())});
}

// True when a message from `p`'s domain waits for a receive.
inline bool has_unexpected(const domain_state& d, const peer_state& p) {
  return std::any_of(d.unexpected.begin(), d.unexpected.end(),
                     [&](const unexpected_message& m) { return m.nonce == p.nonce; });
}

// Matches queued unexpected messages from `p`'s domain with its receives.
inline void match_unexpected(domain_state& d, peer_state& p) {
  for (auto it = d.unexpected.begin(); it != d.unexpected.end() && !p.recvs.empty();) {
    if (it->nonce != p.nonce) {
      ++it;
      continue;
    }
    complete_recv(d, p.recvs.pop_front(), it->bytes);
    it = d.unexpected.erase(it);
  }
}

// Waits until every copy on the streams of peers of domain `nonce` is done,
// so their mappings may be closed.
inline void sync_peers_of(domain_state& d, std::uint64_t nonce) {
  for (peer_state* p : d.peers)
    if (p->nonce == nonce && p->stream) cudaStreamSynchronize(p->stream);
}

// Region `epoch` of domain `nonce` was deregistered by its owner.
inline void release_region(domain_state& d, std::uint64_t nonce, std::uint64_t epoch) {
  sync_peers_of(d, nonce);
  for (peer_state* p : d.peers)
    if (p->nonce == nonce) p->regions.drop_if([&](const auto& r) { return r.verified.epoch == epoch; });
  d.cache.release_epoch(nonce, epoch);
}

// Sends a packet on a link, waiting up to 1 s for room (control packets).
inline status send_control(link& l, packet_type t, std::uint64_t a, std::uint64_t b, int pass_fd = -1) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (;;) {
    const status s = send_on(l, t, a, b, {}, pass_fd);
    if (s != status::again || std::chrono::steady_clock::now() > deadline) return s;
    pollfd p{l.fd.get(), POLLOUT, 0};
    ::poll(&p, 1, 10);
  }
}

// Our queue pair that an inbound link's packets arrive on: the one to the
// same domain with the same connect() number, else the oldest to that
// domain; nullptr when we have none to it (yet).
inline peer_state* peer_of(domain_state& d, link& l) {
  if (l.peer) return l.peer;
  peer_state* first = nullptr;
  for (peer_state* p : d.peers) {
    if (p->nonce != l.nonce) continue;
    if (p->seq == l.seq) return l.peer = p;
    if (!first || p->seq < first->seq) first = p;
  }
  return first;  // not cached: the paired one may connect later
}

inline void on_link_closed(domain_state& d, link& l) {
  l.closed = true;
  if (!l.outgoing) return;  // the peer closed its endpoint to us: nothing of ours depends on it
  for (peer_state* p : d.peers)
    if (p->out == &l) fail_peer(*p, "the peer's domain closed the connection (process exited or domain destroyed)");
}

inline void handle_packet(domain_state& d, link& l, const packet& pk, unique_fd& passed) {
  switch (pk.type) {
    case packet_type::hello:
      if (l.nonce == 0 && !l.outgoing && pk.a != 0 && pk.b == hello_proof(d.secret, pk.a)) {
        l.nonce = pk.a;
        l.seq = d.hellos_from[l.nonce]++;
        if (d.bell) (void)send_control(l, packet_type::bell, 0, 0, d.bell.fd());  // lost: the link stays unrung
        return;
      }
      break;
    case packet_type::bell:  // the domain we connected to hands us its doorbell
      if (l.outgoing && !l.peer_bell && passed) {
        l.peer_bell = doorbell::map(passed.get());
        if (l.peer_bell) (void)send_control(l, packet_type::rings, 0, 0);  // rings it too, after the packet
        return;
      }
      break;
    case packet_type::rings:
      if (l.nonce == 0 || l.outgoing) break;
      l.rings = true;
      return;
    case packet_type::notify: {
      if (l.nonce == 0) break;
      const peer_state* p = peer_of(d, l);
      d.ring.push(completion{.token = 0,
                             .bytes = pk.b,
                             .status = status::ok,
                             .op = opcode::remote_write_imm,
                             .imm = static_cast<std::uint32_t>(pk.a),
                             .peer = p ? p->peer_id : 0});
      return;
    }
    case packet_type::message:
      if (l.nonce == 0) break;
      deliver_message(d, l.nonce, pk.payload);
      return;
    case packet_type::fd_request: {
      if (l.nonce == 0) break;
      auto it = std::find_if(d.exports.begin(), d.exports.end(),
                             [&](const vmm_export& e) { return e.id == pk.a && e.seal == pk.b; });
      const bool found = it != d.exports.end();
      (void)send_control(l, packet_type::fd_reply, pk.a, found ? 0 : ENOENT, found ? it->fd.get() : -1);
      return;
    }
    case packet_type::fd_reply:
      if (l.nonce == 0) break;
      if (d.fd_replies.size() >= 16) d.fd_replies.erase(d.fd_replies.begin());  // stale ones nobody waits for
      d.fd_replies.push_back({l.nonce, pk.a, pk.b, std::move(passed)});
      return;
    case packet_type::release:
      if (l.nonce == 0) break;
      release_region(d, l.nonce, pk.a);
      return;
  }
  ++d.dropped_packets;
}

// Reads what is waiting on one link (bounded, so one chatty peer cannot
// starve the rest). False when the budget ran out before the link did.
inline bool read_link(domain_state& d, link& l) {
  for (int budget = 0; budget < 64 && !l.closed; ++budget) {
    received r = receive_packet(l.fd.get(), d.rx);
    if (r.kind == received::nothing) return true;
    if (r.kind != received::packet_ready) {
      on_link_closed(d, l);
      return true;
    }
    auto pk = r.truncated ? result<packet>(unexpected(status::invalid_argument, "truncated"))
                          : parse_packet(std::span<const std::byte>(d.rx.data(), r.size));
    if (!pk) {
      ++d.dropped_packets;
      continue;
    }
    handle_packet(d, l, *pk, r.fd);
  }
  return l.closed;
}

inline void accept_links(domain_state& d) {
  for (;;) {
    const int fd = ::accept4(d.listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    auto l = std::make_unique<link>();
    l->fd.reset(fd);
    d.links.push_back(std::move(l));
  }
}

// Whether some link does not ring our doorbell: a live inbound link whose
// peer has not said `rings` (just accepted, or a peer without the bell).
inline bool has_unrung_link(const domain_state& d) noexcept {
  return !d.bell || std::any_of(d.links.begin(), d.links.end(),
                                [](const std::unique_ptr<link>& l) { return !l->outgoing && !l->closed && !l->rings; });
}

// One poll(2) over the listener and every link, then reads what is ready.
// `timeout_ms` 0 never blocks. Closed inbound links are dropped here.
inline constexpr auto sweep_every = std::chrono::milliseconds(1);
inline void serve_links(domain_state& d, int timeout_ms = 0) {
  // Read first: a ring after this point is seen by the next links_due.
  d.bell_seen = d.bell.count();
  d.next_sweep = std::chrono::steady_clock::now() + sweep_every;
  ++d.socket_reads;
  std::erase_if(d.links, [](const std::unique_ptr<link>& l) { return l->closed && !l->outgoing; });
  d.pfds.clear();
  d.pfds.push_back({d.listener.get(), POLLIN, 0});
  for (auto& l : d.links) d.pfds.push_back({l->closed ? -1 : l->fd.get(), POLLIN, 0});
  bool left_over = false;  // a link still has packets after its read budget
  if (::poll(d.pfds.data(), d.pfds.size(), timeout_ms) > 0) {
    const bool incoming = d.pfds[0].revents != 0;
    const std::size_t n = d.links.size();  // links accepted below are read next time
    for (std::size_t i = 0; i < n; ++i)
      if (d.pfds[i + 1].revents && !read_link(d, *d.links[i])) left_over = true;
    if (incoming) accept_links(d);
  }
  d.serve_every_poll = left_over || has_unrung_link(d);
}

// Whether poll() reads the sockets now (domain_state says when). Costs no
// system call while every link rings and nothing arrived.
inline bool links_due(domain_state& d, bool copies_in_flight) {
  if (d.bell.count() != d.bell_seen) return true;
  if (d.serve_every_poll) return !copies_in_flight || (++d.polls_since_links & 15) == 0;
  return std::chrono::steady_clock::now() >= d.next_sweep;
}

// Records one event on `p`'s stream after the ops that no event covers yet
// (the tail of its in-flight list); the last of them owns it. Called by a
// post once `record_every` ops wait, so that completions come in steps of at
// most that many, and by progress once no earlier event is pending (a
// caller that keeps a window full then pays one record per `record_every`
// ops, not one per poll). Where the record fails, the stream is waited for
// here and those ops complete with provider_error.
inline constexpr std::uint32_t record_every = 16;
inline void record_events(domain_state& d, peer_state& p) {
  if (p.unrecorded == nullptr) return;
  const auto idx = static_cast<std::int32_t>(d.slot_index(p.inflight.tail));
  const cudaError_t e = cudaEventRecord(d.events[static_cast<std::size_t>(idx)], p.stream);
  if (e != cudaSuccess) cudaStreamSynchronize(p.stream);
  for (op_slot* op = p.unrecorded; op != nullptr; op = op->next) {
    op->event = idx;
    if (e != cudaSuccess && op->c.status == status::ok) {
      op->c.status = status::provider_error;
      op->c.native_code = static_cast<std::int32_t>(e);
    }
  }
  p.unrecorded = nullptr;
  p.unrecorded_count = 0;
}

// Finishes operations whose event has completed, in stream order per peer.
// One query per event: the ops it covers after the first need none.
inline void progress_inflight(domain_state& d) {
  for (peer_state* p : d.peers) {
    // Nothing recorded waits (the list is empty or all unrecorded): record now.
    if (p->inflight.head == p->unrecorded) record_events(d, *p);
    std::int32_t done_event = no_event;  // an event seen complete, and what it said
    cudaError_t done_error = cudaSuccess;
    while (op_slot* op = p->inflight.head) {
      if (op->st == stage::copying) {
        if (op->event == no_event) break;  // no event covers it yet: recorded below
        if (op->event != done_event) {
          const cudaError_t e = cudaEventQuery(d.events[static_cast<std::size_t>(op->event)]);
          if (e == cudaErrorNotReady) break;
          done_event = op->event;
          done_error = e;
        }
        if (done_error != cudaSuccess && op->c.status == status::ok) {
          op->c.status =
              to_status(done_error) == status::invalid_argument ? status::provider_error : to_status(done_error);
          op->c.native_code = static_cast<std::int32_t>(done_error);
        }
        if (op->c.op == opcode::write_with_imm && op->c.status == status::ok) op->st = stage::notifying;
      }
      if (op->st == stage::notifying) {
        const status s =
            p->failed ? status::peer_unreachable : send_on(*p->out, packet_type::notify, op->c.imm, op->c.bytes);
        if (s == status::again) break;  // retried on the next poll
        if (s != status::ok) {
          op->c.status = status::peer_unreachable;
          if (!p->failed) fail_peer(*p, "sending a notification failed");
        }
      }
      p->inflight.pop_front();
      finish(d, op);
    }
    // The recorded ops all finished: cover the rest now, to be seen next poll.
    if (p->unrecorded != nullptr && p->inflight.head == p->unrecorded) record_events(d, *p);
  }
}

inline bool any_inflight(const domain_state& d) noexcept {
  return std::any_of(d.peers.begin(), d.peers.end(), [](const peer_state* p) { return !p->inflight.empty(); });
}

// The opener's way to get a VMM allocation's fd: ask the exporter over our
// link to it and wait (up to 10 s) for the reply, serving every other link
// meanwhile, so two domains fetching from each other do not deadlock.
inline result<unique_fd> fetch_fd(void* domain, std::uint64_t owner, std::uint64_t export_id) {
  auto& d = *static_cast<domain_state*>(domain);
  auto pit = std::find_if(d.peers.begin(), d.peers.end(),
                          [&](const peer_state* p) { return p->nonce == owner && !p->failed; });
  if (pit == d.peers.end())
    return unexpected(status::peer_unreachable, "no live connection to the exporting domain", "cuda_ipc");
  peer_state& p = **pit;
  if (status s = send_control(*p.out, packet_type::fd_request, export_id, d.fetch_proof); s != status::ok)
    return unexpected(s, "asking the exporter for a VMM allocation's fd failed", "cuda_ipc");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    serve_links(d, 10);
    for (auto it = d.fd_replies.begin(); it != d.fd_replies.end(); ++it) {
      if (it->nonce != owner || it->export_id != export_id) continue;
      fd_reply r = std::move(*it);
      d.fd_replies.erase(it);
      if (r.err != 0 || !r.fd)
        return unexpected(status::invalid_argument,
                          "the exporter has no VMM export " + std::to_string(export_id) + " (region deregistered?)",
                          "cuda_ipc", static_cast<long>(r.err));
      return std::move(r.fd);
    }
    if (p.failed) return unexpected(status::peer_unreachable, p.failure, "cuda_ipc");
  }
  return unexpected(status::timed_out,
                    "the exporter did not answer a VMM fd request within 10 s (it must poll or wait)", "cuda_ipc");
}

}  // namespace fabrix::cuda::ipc::detail
