// fabrix::completion_router<P> — one domain, several users, each polling
// only its own completions.
//
// A domain hands every completion to whoever polls it. A library that runs
// on a domain the application also uses (fabrix::coll's communicator, a
// second protocol, a progress engine) must not swallow the application's
// completions, nor the application the library's. The router sits between
// the domain and its users: each user opens a lane whose filter names its
// completions and polls and waits through the router. A completion that no
// lane claims goes to the default lane (poll(out), wait(timeout)), so code
// written against the plain domain keeps working on the default lane.
//
// What a filter claims:
//   operations this process posted (every opcode but remote_write_imm,
//     unsignaled ones that fail included): by token,
//     (token & token_mask) == token_value;
//   a peer's write_with_imm landing here (remote_write_imm, which carries no
//     token): by immediate, (imm & imm_mask) == imm_value. The senders must
//     agree on how the immediate space is split; fabrix::coll puts its tag in
//     the top four bits (coll::options::tag), so other code sharing the
//     domain keeps its immediates below 1 << 28.
//   A zero mask claims nothing of that kind. Filters of open lanes are
//   disjoint: open() refuses one that meets another lane's.
// A closed lane's filter keeps claiming until a lane that meets it is
// opened: what arrives for the closed lane (late notifications of a
// protocol that has ended) is discarded and counted, never handed to the
// default lane's user.
//
// Ordering: a lane's completions come out in the order the domain returned
// them. Every poll() on any lane drives the domain and moves what it
// returned to the lanes it belongs to, so a lane whose user is not polling
// still receives (and remote_write_imm senders are never held up by it).
//
// Polling the domain itself (domain::poll, or bootstrap_progress(dom, ...)
// and the connect_all/exchange overloads that take `polled`) bypasses the
// router: what that returns is the caller's, whichever lane it belonged to.
// Once lanes are open, poll through the router only.
//
// Memory: each lane's queue is reserved at open(); it grows only when more
// of its completions wait unpolled than reserved, never per operation in the
// steady state.
//
// Threading: like the domain, one thread at a time; no thread of its own.
// Lifetime: the domain outlives the router; the router outlives its lanes'
// users. Completions awaited by coroutines (co_await qp.write(...)) never
// reach a lane: domain::poll resumes them, whichever lane polled.
#pragma once

#include <fabrix/completion.hpp>
#include <fabrix/detail/completion_ring.hpp>
#include <fabrix/domain.hpp>
#include <fabrix/result.hpp>
#include <fabrix/status.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fabrix {

struct completion_filter {
  std::uint64_t token_mask = 0;
  std::uint64_t token_value = 0;
  std::uint32_t imm_mask = 0;
  std::uint32_t imm_value = 0;

  bool claims(const completion& c) const noexcept {
    if (c.op == opcode::remote_write_imm) return imm_mask != 0 && (c.imm & imm_mask) == imm_value;
    return token_mask != 0 && (c.token & token_mask) == token_value;
  }
  // Whether some completion is claimed by both.
  bool meets(const completion_filter& o) const noexcept {
    const bool tokens =
        token_mask != 0 && o.token_mask != 0 && ((token_value ^ o.token_value) & token_mask & o.token_mask) == 0;
    const bool imms = imm_mask != 0 && o.imm_mask != 0 && ((imm_value ^ o.imm_value) & imm_mask & o.imm_mask) == 0;
    return tokens || imms;
  }
};

template <provider P>
class completion_router {
 public:
  // A lane's handle: an index into the router, valid until close().
  struct lane {
    std::uint32_t index = 0;
  };
  static constexpr lane default_lane{0};

  explicit completion_router(domain<P>& dom, std::size_t default_capacity = 256) : dom_(&dom) {
    lanes_.push_back(lane_entry{completion_filter{}, detail::completion_ring(default_capacity), lane_state::open});
  }
  completion_router(const completion_router&) = delete;
  completion_router& operator=(const completion_router&) = delete;

  domain<P>& dom() noexcept { return *dom_; }

  // A lane for the completions `f` claims. invalid_argument when f claims
  // nothing, has value bits outside its mask, or meets an open lane's filter.
  // Completions the domain returned before are not moved to it.
  result<lane> open(const completion_filter& f, std::size_t capacity = 256) {
    if (f.token_mask == 0 && f.imm_mask == 0)
      return unexpected(status::invalid_argument, "completion_router: a filter with both masks zero claims nothing");
    if ((f.token_value & ~f.token_mask) != 0 || (f.imm_value & ~f.imm_mask) != 0)
      return unexpected(status::invalid_argument, "completion_router: filter value has bits outside its mask");
    for (std::size_t i = 1; i < lanes_.size(); ++i)
      if (lanes_[i].state == lane_state::open && lanes_[i].filter.meets(f))
        return unexpected(status::invalid_argument,
                          "completion_router: filter overlaps lane " + std::to_string(i) + "'s");
    std::size_t slot = lanes_.size();
    for (std::size_t i = 1; i < lanes_.size(); ++i) {
      if (lanes_[i].state == lane_state::closed && lanes_[i].filter.meets(f)) lanes_[i].state = lane_state::unused;
      if (lanes_[i].state == lane_state::unused && slot == lanes_.size()) slot = i;
    }
    if (slot == lanes_.size()) lanes_.emplace_back();
    lanes_[slot] = lane_entry{f, detail::completion_ring(capacity), lane_state::open};
    return lane{static_cast<std::uint32_t>(slot)};
  }

  // Ends a lane: what it still holds is discarded, and so is what its
  // filter claims from now on (see above). The default lane cannot be closed.
  void close(lane l) {
    if (l.index == 0 || l.index >= lanes_.size() || lanes_[l.index].state != lane_state::open) return;
    lane_entry& e = lanes_[l.index];
    discarded_ += e.queue.size();
    e.queue = detail::completion_ring(0);
    e.state = lane_state::closed;
  }

  // Up to out.size() of lane `l`'s completions, oldest first: those already
  // moved to it, then what polling the domain now returns for it (the rest
  // of that goes to the other lanes). Drives the domain whenever `out` has
  // room. An unknown or closed lane returns 0.
  std::size_t poll(lane l, std::span<completion> out) {
    if (l.index >= lanes_.size() || lanes_[l.index].state != lane_state::open) return 0;
    std::size_t n = lanes_[l.index].queue.drain(out);
    if (n == out.size()) return n;
    const std::size_t got = dom_->poll(out.subspan(n));
    if (lanes_.size() == 1) return n + got;  // no lanes: everything is the default lane's
    const std::size_t end = n + got;
    for (std::size_t i = n; i < end; ++i) {
      const std::uint32_t to = lane_of(out[i]);
      if (to == l.index)
        out[n++] = out[i];
      else if (lanes_[to].state == lane_state::open)
        lanes_[to].queue.push(out[i]);
      else
        ++discarded_;
    }
    return n;
  }
  std::size_t poll(std::span<completion> out) { return poll(default_lane, out); }

  // Blocks until lane `l` may have a completion or `timeout` passes (see
  // domain::wait): returns ok at once when it holds some already. Another
  // lane's completion can end the wait too; poll, and wait again on 0.
  status wait(lane l, std::chrono::milliseconds timeout) {
    if (l.index < lanes_.size() && !lanes_[l.index].queue.empty()) return status::ok;
    return dom_->wait(timeout);
  }
  status wait(std::chrono::milliseconds timeout) { return wait(default_lane, timeout); }

  // Completions moved to lane `l` and not yet polled.
  std::size_t pending(lane l) const noexcept { return l.index < lanes_.size() ? lanes_[l.index].queue.size() : 0; }
  // Completions of closed lanes thrown away so far.
  std::uint64_t discarded() const noexcept { return discarded_; }

 private:
  enum class lane_state : std::uint8_t { unused, open, closed };
  struct lane_entry {
    completion_filter filter;
    detail::completion_ring queue{0};
    lane_state state = lane_state::unused;
  };

  std::uint32_t lane_of(const completion& c) const noexcept {
    for (std::size_t i = 1; i < lanes_.size(); ++i)
      if (lanes_[i].state != lane_state::unused && lanes_[i].filter.claims(c)) return static_cast<std::uint32_t>(i);
    return 0;
  }

  domain<P>* dom_;
  std::vector<lane_entry> lanes_;  // [0]: the default lane
  std::uint64_t discarded_ = 0;
};

}  // namespace fabrix
