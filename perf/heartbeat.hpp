// Heartbeats of the initiator's loops, so that a long run does not look
// like a dead peer. The target of a bandwidth run and the server of a read
// or atomic latency run see none of the initiator's operations, only its
// control messages, and give up after --timeout without one
// (control_channel::exchange). A run may last longer than that: -D, or -n
// over a slow link. So while a loop runs, it writes a counter into the
// peer's heartbeat word (session.hpp's control region) at most every
// quarter of --timeout (every second at most), and the waiting side gives up
// only when that word has not moved for --timeout either.
//
// One heartbeat write in flight at most, on queue pair 0, with
// heartbeat_token; the loop that owns the heartbeat hands it its
// completions (on()) and waits for the last one before it returns
// (in_flight()), so no other poller sees them. A post answered `again` is
// tried on a later tick. The counter lives in the control region's source
// word, so it keeps rising across loops and steps. Nothing is allocated.
#pragma once

#include "clock.hpp"
#include "control.hpp"
#include "failure.hpp"
#include "session.hpp"

#include <algorithm>
#include <cstring>

namespace fabrix::perf {

inline constexpr std::uint64_t heartbeat_token = control_token | 4;

template <provider P>
class heartbeat {
 public:
  explicit heartbeat(session<P>& s) : s_(s) {
    const tick_clock& tc = ticks();
    const double every_s = std::min(1.0, static_cast<double>(s.opts.timeout_s) / 4);
    interval_ = static_cast<std::uint64_t>(every_s / tc.seconds(1));
    next_ = tc.now() + interval_;
  }

  // From the loop, with a clock reading (ticks().now()) it took anyway:
  // posts the next heartbeat when one is due and none is in flight.
  void tick(std::uint64_t now) {
    if (now < next_ || in_flight_) return;
    std::byte* word = s_.control_mem.host() + heartbeat_source;
    std::uint64_t count = 0;
    std::memcpy(&count, word, sizeof count);
    ++count;
    std::memcpy(word, &count, sizeof count);
    if (!s_.control_mem.push(heartbeat_source, sizeof count)) fail("copy a heartbeat to the device");
    const status st = s_.qps[0].post(
        op::write(s_.control->slice(heartbeat_source, 8), s_.peer_control.slice(heartbeat_inbox, 8), heartbeat_token));
    if (st == status::again) return;
    if (st != status::ok) fail("posting a heartbeat: " + std::string(to_string(st)));
    in_flight_ = true;
    next_ = now + interval_;
  }

  // Takes `c` when it is the heartbeat's completion.
  bool on(const completion& c) {
    if (c.token != heartbeat_token) return false;
    expect_ok(c, "heartbeat");
    in_flight_ = false;
    return true;
  }

  bool in_flight() const noexcept { return in_flight_; }

 private:
  session<P>& s_;
  std::uint64_t interval_ = 0;  // ticks
  std::uint64_t next_ = 0;      // tick of the next heartbeat
  bool in_flight_ = false;
};

}  // namespace fabrix::perf
