// The control channel between the two sides, over the fabric itself (the
// bootstrap would block without driving the fabric, and a target that stops
// polling stalls providers with needs_target_progress).
//
// Both sides call exchange() in the same order; each sends one message and
// waits for the peer's. A message goes into one of two 64-byte inbox slots of
// the peer's control region (by sequence parity, so the next message cannot
// overwrite one not yet read): the payload is written and flushed first, then
// its 8-byte sequence number, which the receiver polls for. While waiting,
// every completion that is not the channel's own goes to `on_other` (a
// target counting notifications or receives, for instance). The wait gives
// up after --timeout without the message, unless the peer's heartbeat word
// moved meanwhile (heartbeat.hpp): then it waits another --timeout.
#pragma once

#include "failure.hpp"
#include "session.hpp"

#include <fabrix/completion.hpp>
#include <fabrix/operation.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <span>

namespace fabrix::perf {

enum class msg_kind : std::uint64_t { ready = 0x5245, done = 0x444f, verified = 0x5645, bye = 0x4259 };

struct control_msg {
  std::uint64_t seq = 0;
  msg_kind kind = msg_kind::ready;
  std::uint64_t step = 0;
  std::uint64_t count = 0;  // done: operations the sender initiated
  std::uint64_t sum = 0;    // done: a checksum the target verifies (atomics)
  std::uint64_t ok = 1;     // verified: 1 when the sender's checks passed
  double bytes_per_s = 0;   // done: the sender's own bandwidth (for -b)
  std::uint64_t spare = 0;
};
static_assert(sizeof(control_msg) == 64);

// Tokens at or above this belong to fabrix-perf's own bookkeeping.
inline constexpr std::uint64_t control_token = std::uint64_t{1} << 63;
inline constexpr std::uint64_t recv_token = std::uint64_t{1} << 62;

// Checks a completion; throws on an error status.
inline void expect_ok(const completion& c, const char* what) {
  if (c.status != status::ok)
    fail(std::string(what) + ": " + std::string(to_string(c.op)) + " completed with " +
         std::string(to_string(c.status)) + " (native code " + std::to_string(c.native_code) + ")");
}

template <provider P>
class control_channel {
 public:
  explicit control_channel(session<P>& s) : s_(s), timeout_(std::chrono::seconds(s.opts.timeout_s)) {}

  template <class OnOther>
  control_msg exchange(control_msg out, msg_kind expect, std::uint64_t step, OnOther&& on_other) {
    out.seq = ++sent_;
    out.step = step;
    const std::uint64_t slot = (out.seq & 1) * 64;
    std::byte* staging = s_.control_mem.host() + 128 + slot;
    std::memcpy(staging, &out, sizeof out);
    if (!s_.control_mem.push(128 + slot, sizeof out)) fail("copy a control message to the device");
    const remote_buffer& peer = s_.peer_control;
    post_or_retry(op::write(s_.control->slice(128 + slot + 8, 56), peer.slice(slot + 8, 56), control_token | 1),
                  on_other);
    post_or_retry(op::flush(control_token | 2), on_other);
    wait_token(control_token | 2, on_other);
    post_or_retry(op::write(s_.control->slice(128 + slot, 8), peer.slice(slot, 8), control_token | 3), on_other);

    const std::uint64_t want = received_ + 1;
    const std::size_t inbox_offset = (want & 1) * 64;
    const std::byte* inbox = s_.control_mem.host() + inbox_offset;
    bool written = false;
    auto deadline = std::chrono::steady_clock::now() + timeout_;
    std::uint64_t beat = peer_heartbeat();
    const bool may_sleep = !s_.dom.caps().needs_target_progress;
    for (std::uint64_t spin = 0;; ++spin) {
      written |= drain(on_other, control_token | 3);
      if (written && s_.control_mem.on_device() && !s_.control_mem.pull(inbox_offset, 8))
        fail("copy a control message from the device");
      if (written && std::atomic_ref<const std::uint64_t>(*reinterpret_cast<const std::uint64_t*>(inbox))
                             .load(std::memory_order_acquire) == want)
        break;
      // A side that only waits (the target of a bandwidth run, the server
      // of a read or atomic latency run) gives the CPU back when its
      // provider needs no target progress, as perftest's passive side does:
      // on few cores a spinning target slows the initiator and, with
      // soft-RoCE, the kernel doing the NIC's work. Completions (receives,
      // notifications) still wake it; a control message waits <= 1 ms.
      if (may_sleep && written && spin >= 1024) (void)s_.dom.wait(std::chrono::milliseconds(1));
      if ((spin & 1023) == 0 && std::chrono::steady_clock::now() > deadline) {
        // A peer still in a long loop says so with heartbeats (heartbeat.hpp).
        const std::uint64_t now_beat = peer_heartbeat();
        if (now_beat == beat)
          fail("the peer sent nothing for " + std::to_string(s_.opts.timeout_s) + " s (control message " +
               std::to_string(want) + ")");
        beat = now_beat;
        deadline = std::chrono::steady_clock::now() + timeout_;
      }
    }
    received_ = want;
    if (!s_.control_mem.pull(inbox_offset, 64)) fail("copy a control message from the device");
    control_msg in;
    std::memcpy(&in, inbox, sizeof in);
    if (in.kind != expect || in.step != step)
      fail("the peer is out of step (control message kind " + std::to_string(static_cast<std::uint64_t>(in.kind)) +
           " step " + std::to_string(in.step) + ", expected kind " +
           std::to_string(static_cast<std::uint64_t>(expect)) + " step " + std::to_string(step) + ")");
    return in;
  }
  control_msg exchange(control_msg out, msg_kind expect, std::uint64_t step) {
    return exchange(out, expect, step, [](const completion& c) {
      expect_ok(c, "unexpected completion");
      fail("unexpected completion of " + std::string(to_string(c.op)) + " during a control exchange");
    });
  }

 private:
  // `again` is back-pressure (a full operation pool or send queue, a
  // connection still being set up): poll, which frees slots and progresses
  // the provider, then post again until the timeout. Any other status fails.
  template <class OnOther>
  void post_or_retry(const operation& o, OnOther& on_other) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (std::uint64_t spin = 0;; ++spin) {
      const status st = s_.qps[0].post(o);
      if (st == status::ok) return;
      if (st != status::again) fail("control message post: " + std::string(to_string(st)));
      (void)drain(on_other, 0);
      if ((spin & 1023) == 0 && std::chrono::steady_clock::now() > deadline)
        fail("a control message could not be posted for " + std::to_string(s_.opts.timeout_s) +
             " s (the provider kept answering `again`)");
    }
  }
  // The peer's heartbeat counter, as it last wrote it.
  std::uint64_t peer_heartbeat() {
    if (!s_.control_mem.pull(heartbeat_inbox, 8)) fail("copy the heartbeat word from the device");
    return std::atomic_ref<const std::uint64_t>(
               *reinterpret_cast<const std::uint64_t*>(s_.control_mem.host() + heartbeat_inbox))
        .load(std::memory_order_relaxed);
  }
  // Polls once; returns true when `token` completed in this batch.
  template <class OnOther>
  bool drain(OnOther& on_other, std::uint64_t token) {
    completion cs[32];
    const std::size_t n = s_.dom.poll(cs);
    bool seen = false;
    for (std::size_t i = 0; i < n; ++i) {
      if (cs[i].token >= control_token && cs[i].op != opcode::remote_write_imm && cs[i].op != opcode::recv) {
        expect_ok(cs[i], "control message");
        seen |= cs[i].token == token;
      } else {
        on_other(cs[i]);
      }
    }
    return seen;
  }
  template <class OnOther>
  void wait_token(std::uint64_t token, OnOther& on_other) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (std::uint64_t spin = 0; !drain(on_other, token); ++spin) {
      if ((spin & 1023) == 0 && std::chrono::steady_clock::now() > deadline)
        fail("a control message did not complete in " + std::to_string(s_.opts.timeout_s) + " s (is the peer alive?)");
    }
  }

  session<P>& s_;
  std::chrono::seconds timeout_;
  std::uint64_t sent_ = 0;
  std::uint64_t received_ = 0;
};

}  // namespace fabrix::perf
