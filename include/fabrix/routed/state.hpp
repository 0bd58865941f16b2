// The state of a routed domain (routed.hpp): its provider domains, its
// identity, the joins that make one completion out of several provider
// operations (a flush over several routes, a striped write or read), and
// the health of its rails.
//
// Rails: a provider domain that is one of two or more rails of a route is
// marked down when it has had joined operations (stripes, flushes) in
// flight for rail_timeout without completing one of them ok, while another
// rail of the same route has completed something ok since and is not
// stalled itself (so a peer that is slow or gone, which stalls every rail
// alike, marks none down). The joins waiting on it then complete at once
// with status::timed_out (their other parts still finish in their
// providers, unseen), and no queue pair of this domain puts new operations
// on it (routed/endpoint.hpp). A rail that is down stays down for the life
// of the domain. Provider domains that are not rails are never timed here:
// their providers report their own failures.
//
// Lifetime: owned by the routed domain_impl on the heap; endpoints and
// regions point into it and are destroyed before it (the core keeps the
// domain alive while they live). Threading: as its domain.
#pragma once

#include <fabrix/any_provider.hpp>
#include <fabrix/detail/domain_identity.hpp>
#include <fabrix/detail/env.hpp>
#include <fabrix/detail/slot_pool.hpp>
#include <fabrix/routed/address.hpp>
#include <fabrix/routed/config.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fabrix::detail {

// completion::flags bit of the operations a routed endpoint posts on its
// providers' endpoints as parts of one user operation: token is a
// routed_join*.
inline constexpr std::uint8_t flag_routed = 0x20;

inline constexpr std::uint8_t class_bit(route_class c) noexcept {
  return static_cast<std::uint8_t>(1u << static_cast<unsigned>(c));
}

using routed_clock = std::chrono::steady_clock;

template <class Sub>
class routed_endpoint;

// Sub: the provider of the routed domain's provider domains (any_provider,
// or one_of<Ps...> for a static routed<Ps...>; routed.hpp).
template <class Sub>
struct routed_sub {
  route_choice choice;       // devices: this domain's one device, or none
  std::uint8_t rail = 0;     // its position in its route's device list
  std::uint8_t classes = 0;  // class_bit per route_class it serves
  bool is_rail = false;      // one of two or more rails: timed, may go down
  bool down = false;
  std::uint32_t joined = 0;  // joined operations in flight on it
  routed_clock::time_point last_progress{};
  std::optional<typename Sub::domain_impl> dom;
};

// The provider domains of one route class, rail 0 first.
struct routed_class_route {
  std::array<int, routed_max_rails> subs{-1, -1, -1, -1};
  std::uint8_t rails = 0;
};

// Provider endpoints of one routed queue pair: the rails of its host
// route, one for the peer's device memory, one for staging this process's
// device memory.
inline constexpr std::size_t routed_max_endpoints = routed_max_rails + 2;

// What the joins of one routed queue pair report back to it (shared: the
// queue pair may close before its parts complete).
struct routed_tally {
  std::uint64_t unsignaled_finished = 0;  // its unsignaled joined operations finished
  std::uint32_t abandoned = 0;            // its abandoned joins still in flight
  // A part failed with peer_unreachable on a provider domain that is not
  // down: the peer is taken as gone, and the queue pair refuses new
  // operations with peer_unreachable (routed/endpoint.hpp).
  bool peer_lost = false;
  // Per provider endpoint: how many of the queue pair's posts to it are
  // known complete at the target (routed_endpoint::sent_), by a gate or a
  // flush that completed ok.
  std::array<std::uint64_t, routed_max_endpoints> synced{};
};

// One user operation spread over several provider operations: completes,
// with the user's token, flags, opcode and byte count and the first error,
// when all of them have (an unsignaled one: only with an error, and counted
// in its queue pair's finished() either way). An abandoned join (its user
// operation was refused after part of it was posted) completes nothing; a
// reported one (failed early: a rail it waited on went down) completes
// nothing more.
struct routed_join {
  std::uint64_t token = 0;
  std::uint64_t bytes = 0;
  opcode op = opcode::flush;
  std::uint8_t flags = 0;
  std::uint8_t remaining = 0;
  std::uint16_t pending = 0;  // bit per provider domain with a part in flight
  bool unsignaled = false;
  bool abandoned = false;
  bool reported = false;
  // A gate (routed/endpoint.hpp): flushes a held operation waits for. It
  // reports nothing; its queue pair takes its result and gives it back,
  // or orphans it (gives it up to finish_join) while parts are in flight.
  bool gate = false;
  bool orphan = false;
  status result = status::ok;
  std::int32_t native_code = 0;
  std::shared_ptr<routed_tally> qp;  // its queue pair's
  // A user's joined flush: per provider endpoint of its queue pair, the
  // posts it covers (routed_tally::synced once it completed ok; 0: none).
  std::array<std::uint64_t, routed_max_endpoints> covers{};
  routed_join* next_free = nullptr;
};

template <class Sub>
struct routed_state {
  static constexpr std::size_t join_capacity = 1024;
  static_assert(routed_max_subs <= 16, "routed_join::pending has a bit per provider domain");

  std::vector<routed_sub<Sub>> subs;  // at most routed_max_subs
  std::array<routed_class_route, route_classes> classes{};
  domain_identity id = draw_domain_identity();
  std::uint64_t node = 0;
  std::uint64_t next_epoch = 1;
  std::size_t poll_start = 0;  // the sub polled first, rotating
  slot_pool<routed_join> joins{join_capacity};
  std::vector<completion> failed;              // joins reported early, held operations failed, not yet polled
  std::vector<routed_endpoint<Sub>*> holding;  // queue pairs with held operations (routed/endpoint.hpp)
  bool has_rails = false;                      // some route has two or more: poll() times them
  std::chrono::milliseconds rail_timeout{10000};
  std::uint64_t stripe_min = 256 * 1024;

  routed_state() { failed.reserve(join_capacity); }

  // FABRIX_RAIL_TIMEOUT_MS and FABRIX_STRIPE_MIN; false, with `why`, for a
  // value out of range.
  bool read_environment(std::string& why) {
    long long ms = rail_timeout.count();
    if (!env_number("FABRIX_RAIL_TIMEOUT_MS", ms, 1, 24LL * 3600 * 1000, why)) return false;
    rail_timeout = std::chrono::milliseconds(ms);
    return env_number("FABRIX_STRIPE_MIN", stripe_min, 1, 1LL << 40, why, true);
  }

  const routed_class_route& route_of(route_class c) const noexcept { return classes[static_cast<std::size_t>(c)]; }

  // A joined part is about to be posted on `sub`.
  void part_posted(routed_join* j, int sub) noexcept {
    auto& s = subs[static_cast<std::size_t>(sub)];
    if (s.is_rail && s.joined == 0) s.last_progress = routed_clock::now();
    ++s.joined;
    ++j->remaining;
    j->pending = static_cast<std::uint16_t>(j->pending | (1u << sub));
  }

  // A part of a join completed on `sub`: the user's completion into `out`
  // when it was the last and the join is to report, true then.
  bool finish_join(const completion& c, int sub, completion& out) noexcept {
    auto* j = reinterpret_cast<routed_join*>(c.token);
    routed_sub<Sub>& s = subs[static_cast<std::size_t>(sub)];
    --s.joined;
    j->pending = static_cast<std::uint16_t>(j->pending & ~(1u << sub));
    if (c.status != status::ok && j->result == status::ok) {
      j->result = c.status;
      j->native_code = c.native_code;
    }
    if (c.status == status::peer_unreachable && !s.down) j->qp->peer_lost = true;
    if (--j->remaining != 0) return false;
    if (j->abandoned) --j->qp->abandoned;
    if (j->gate && !j->abandoned && !j->orphan) return false;        // its queue pair takes the result
    const bool outcome = !j->abandoned && !j->reported && !j->gate;  // not told before, a user's
    if (outcome && j->op == opcode::flush && j->result == status::ok)
      for (std::size_t e = 0; e < routed_max_endpoints; ++e)
        j->qp->synced[e] = std::max(j->qp->synced[e], j->covers[e]);
    if (outcome && j->unsignaled) ++j->qp->unsignaled_finished;
    const bool report = outcome && (!j->unsignaled || j->result != status::ok);
    if (report) out = user_completion(*j);
    joins.give_back(j);
    return report;
  }

  completion user_completion(const routed_join& j) const noexcept {
    completion out{};
    out.token = j.token;
    out.flags = j.flags;
    out.op = j.op;
    out.bytes = j.result == status::ok ? j.bytes : 0;
    out.status = j.result;
    out.native_code = j.native_code;
    return out;
  }

  // A rail that completed an operation ok.
  void progressed(std::size_t sub, routed_clock::time_point now) noexcept { subs[sub].last_progress = now; }

  // Marks down every rail that is stalled while another rail of its route
  // is not (above), and fails the joins waiting on it.
  void check_rails(routed_clock::time_point now) noexcept {
    auto stalled = [&](const routed_sub<Sub>& s) { return s.joined > 0 && now - s.last_progress >= rail_timeout; };
    for (std::size_t i = 0; i < subs.size(); ++i) {
      auto& s = subs[i];
      if (!s.is_rail || s.down || !stalled(s)) continue;
      bool another_moves = false;
      for (const auto& o : subs)
        if (&o != &s && o.is_rail && !o.down && (o.classes & s.classes) != 0 && o.last_progress > s.last_progress &&
            !stalled(o))
          another_moves = true;
      if (!another_moves) continue;
      s.down = true;
      for (routed_join* j = joins.begin(); j != joins.end(); ++j) {
        if (j->remaining == 0 || (j->pending & (1u << i)) == 0 || j->abandoned || j->reported) continue;
        j->result = status::timed_out;
        j->native_code = 0;
        j->reported = true;
        if (j->gate) continue;  // its queue pair sees it
        if (j->unsignaled) ++j->qp->unsignaled_finished;
        failed.push_back(user_completion(*j));
      }
    }
  }

  // Moves the early failures into `out`, as many as fit; how many.
  std::size_t take_failed(std::span<completion> out) noexcept {
    std::size_t n = 0;
    while (!failed.empty() && n < out.size()) {
      out[n++] = failed.back();
      failed.pop_back();
    }
    return n;
  }

  bool rails_in_flight() const noexcept {
    for (const auto& s : subs)
      if (s.is_rail && !s.down && s.joined > 0) return true;
    return false;
  }
};

// What a local_slice of a routed region becomes in one provider domain:
// its registration's descriptor and owner, copied out of the registration
// when it is made (routed_region_state::set_local) so that an operation's
// rewrite reads them without a call into the provider.
struct routed_local_view {
  void* descriptor = nullptr;
  std::uint64_t owner = 0;
  bool registered = false;  // false: no registration in that provider domain
};

// A registration in every provider domain that takes the memory; the
// routed region's descriptor() is this object (stable on the heap), from
// which an endpoint finds the provider's registration for its route.
template <class Sub>
struct routed_region_state {
  std::array<std::optional<typename Sub::region_impl>, routed_max_subs> subs;
  std::array<routed_local_view, routed_max_subs> local{};
  remote_buffer remote;
  // The provider domain whose region owns the memory (allocate_memory), or
  // -1: its region goes last, after the registrations of that memory.
  int allocated_by = -1;

  void set_local(std::size_t i) noexcept { local[i] = {subs[i]->descriptor(), subs[i]->remote().owner, true}; }

  routed_region_state() = default;
  routed_region_state(const routed_region_state&) = delete;
  routed_region_state& operator=(const routed_region_state&) = delete;
  ~routed_region_state() {
    for (std::size_t i = 0; i < subs.size(); ++i)
      if (static_cast<int>(i) != allocated_by) subs[i].reset();
  }
};

}  // namespace fabrix::detail
