// Posting one validated operation on a cuda_ipc endpoint.
//
// Mapping: write / read -> one copy per local slice on the endpoint's
// stream (copy_async: device<->peer device, pinned host<->peer device);
// fetch_add / compare_swap -> fabrix_cuda_atomic64 (one thread, system-scope
// atomicAdd / atomicCAS) writing the old value to a per-slot device word,
// then a copy of it to the result slice; flush -> nothing but the event. An
// event recorded on the stream after a run of ops (at the next poll, or
// every record_every posts) covers them all; poll() finishes ops when their
// event has completed, in stream order.
// write_with_imm -> the copies, the event, and once the event has completed
// (the data is in the target's memory) a notify packet on the socket: the
// target cannot see the notification before the data.
// send -> one message packet (a device source is first copied to a host
// bounce buffer, synchronously); recv -> queued until a message arrives.
//
// Options (completion.hpp, operation.hpp): an op completes when its event
// has, i.e. when its copies are in the target's memory: every completion is
// already completion_level::delivered. Unsignaled ops still take a slot and
// an event; finish() counts them instead of completing them. fence: the
// ops of one endpoint run in order on its stream, so a fence only matters to
// a send (a packet, not stream work): a fenced send first waits for the
// stream and for the notifications of earlier write_with_imm, and returns
// again while one of those cannot be sent yet.
#pragma once

#include <fabrix/cuda/ipc/detail/handle.hpp>
#include <fabrix/cuda/ipc/detail/progress.hpp>
#include <fabrix/cuda/ipc/detail/state.hpp>
#include <fabrix/cuda/kernels.hpp>
#include <fabrix/cuda/runtime.hpp>
#include <fabrix/detail/completion_of.hpp>
#include <fabrix/detail/validate.hpp>
#include <fabrix/operation.hpp>

#include <cuda_runtime_api.h>

#include <cstring>

namespace fabrix::cuda::ipc::detail {

// Where byte 0 of the peer's region `rb` is in this process: checked once per
// remote region (made by this endpoint's peer, seal intact, key well formed),
// then mapped through the domain's cache. nullptr with `why` set when refused.
inline std::byte* resolve(peer_state& p, const remote_buffer& rb, status& why) {
  if (auto* known = p.regions.find(rb)) return known->key;
  why = status::invalid_argument;
  if (rb.owner != p.nonce || rb.seal != rb.compute_seal(p.secret)) return nullptr;
  if (rb.location.kind != memory_kind::cuda_device) return nullptr;
  auto h = decode_handle(rb.key_bytes(), rb.length);
  if (!h) return nullptr;
  std::byte* allocation = nullptr;
  if (p.same_process) {
    allocation = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(rb.address - h->offset));
  } else {
    p.dom->fetch_proof = rb.seal;  // quoted by a VMM fd request
    auto m = p.dom->cache.acquire(p.nonce, rb.epoch, *h);
    if (!m) {
      why = m.code();
      return nullptr;
    }
    allocation = *m;
  }
  std::byte* base = allocation + h->offset;
  p.regions.add(rb, base);
  return base;
}

// One copy on `s`, the direction taken from the pointers (unified
// addressing). The driver's cuMemcpyAsync where the domain has it: on an H200
// VM it cost ~0.3 us less host time per copy than cudaMemcpyAsync, which
// calls it. A thread on which the runtime has not yet made the device's
// context current gets the runtime's call, which does that. Driver and
// runtime error codes share their values.
inline cudaError_t copy_async(const domain_state& d, void* dst, const void* src, std::size_t n, cudaStream_t s) {
  if (d.memcpy_async != nullptr) {
    const CUresult r = d.memcpy_async(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), n, s);
    if (r != CUDA_ERROR_INVALID_CONTEXT) return static_cast<cudaError_t>(r);
  }
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s);
}

inline status post_send(peer_state& p, const operation& o, op_options opts) {
  domain_state& d = *p.dom;
  const local_slice& src = o.locals()[0];
  if (src.length > max_message) return status::invalid_argument;
  if (has(opts, op_options::fence) && !p.inflight.empty()) {
    record_events(d, p);  // before the wait, so that every event is complete after it
    if (p.stream) cudaStreamSynchronize(p.stream);
    progress_inflight(d);
    if (!p.inflight.empty()) return status::again;  // a notification still waits for the socket
  }
  std::span<const std::byte> bytes(src.address, src.length);
  if (src.location.kind == memory_kind::cuda_device && src.length > 0) {
    if (cudaError_t e = cudaMemcpy(d.tx.data(), src.address, src.length, cudaMemcpyDeviceToHost); e != cudaSuccess)
      return to_status(e);
    bytes = std::span<const std::byte>(d.tx.data(), src.length);
  }
  const status s = send_on(*p.out, packet_type::message, 0, 0, bytes);
  if (s == status::peer_unreachable) fail_peer(p, "sending a message failed: the peer's domain is gone");
  if (s != status::ok) return s;
  if (has(opts, op_options::unsignaled))
    ++p.finished;
  else
    d.ring.push(
        completion{.token = o.token, .bytes = src.length, .status = status::ok, .op = opcode::send, .flags = o.flags});
  return status::ok;
}

inline status post_one(peer_state& p, const operation& o) {
  domain_state& d = *p.dom;
  // Messages that arrived before the peer went away stay receivable (as
  // bytes before a FIN): a recv is refused only when none is left.
  if (p.failed && (o.code != opcode::recv || !has_unexpected(d, p))) return status::peer_unreachable;
  const op_options opts = fabrix::detail::options_of(o, p.defaults);
  if (o.code == opcode::send) return post_send(p, o, opts);

  std::byte* remote = nullptr;
  if (fabrix::detail::uses_remote(o.code)) {
    if (o.remote.key != nullptr) {  // imported: one index, no search
      std::byte** base = p.imports.find(o.remote.key->ref);
      if (base == nullptr) return status::invalid_argument;
      remote = *base;
    } else {
      status why = status::ok;
      remote = resolve(p, *o.remote.buffer, why);
      if (remote == nullptr) return why;
    }
    remote += o.remote.offset;
  }
  // Receives have their own pool (max_posted_recvs): waiting ones never
  // take places from other operations.
  op_slot* op = o.code == opcode::recv ? d.recv_ops.take() : d.ops.take();
  if (op == nullptr) return status::again;
  op->in_use = true;
  op->unsignaled = has(opts, op_options::unsignaled);
  op->peer = &p;
  op->c = fabrix::detail::completion_of(o);
  op->st = stage::copying;
  if (o.code == opcode::recv) {  // no stream work: waits for a message
    op->c.bytes = 0;
    op->c.peer = p.peer_id;
    op->recv_dst = o.locals()[0];
    p.recvs.push_back(op);
    match_unexpected(d, p);
    return status::ok;
  }
  const std::size_t idx = d.slot_index(op);
  cudaEvent_t& ev = d.events[idx];
  if (ev == nullptr) {
    if (cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming); e != cudaSuccess) {
      d.ops.give_back(op);
      return to_status(e);
    }
  }

  const local_slice& first = o.locals()[0];
  cudaError_t err = cudaSuccess;
  bool enqueued = false;  // something is on the stream: the op must complete through its event
  switch (o.code) {
    case opcode::write:
    case opcode::write_with_imm:
    case opcode::read:
      for (const local_slice& l : o.locals()) {
        if (l.length == 0) continue;
        err = o.code == opcode::read ? copy_async(d, l.address, remote, l.length, p.stream)
                                     : copy_async(d, remote, l.address, l.length, p.stream);
        if (err != cudaSuccess) break;
        enqueued = true;
        remote += l.length;
      }
      break;
    case opcode::fetch_add:
    case opcode::compare_swap: {
      unsigned long long* old_value = d.atomic_scratch + idx;
      err = fabrix_cuda_atomic64(p.stream, reinterpret_cast<unsigned long long*>(remote), old_value, o.operand,
                                 o.compare, o.code == opcode::compare_swap);
      if (err != cudaSuccess) break;
      enqueued = true;
      err = cudaMemcpyAsync(first.address, old_value, 8, cudaMemcpyDefault, p.stream);
      break;
    }
    case opcode::recv:  // handled above
    case opcode::flush:
    case opcode::send:
    case opcode::remote_write_imm: break;
  }
  if (err != cudaSuccess && !enqueued) {  // nothing posted: refuse, no completion
    d.ops.give_back(op);
    return to_status(err) == status::invalid_argument ? status::provider_error : to_status(err);
  }
  if (err != cudaSuccess) {  // part of it is on the stream: it completes with the error
    op->c.status = status::provider_error;
    op->c.native_code = static_cast<std::int32_t>(err);
  }
  // No event per op: the next record_events covers it (see op_slot::event).
  op->event = no_event;
  p.inflight.push_back(op);
  if (p.unrecorded == nullptr) p.unrecorded = op;
  if (++p.unrecorded_count >= record_every) record_events(d, p);
  return status::ok;
}

}  // namespace fabrix::cuda::ipc::detail
