// A routed queue pair's endpoint: provider endpoints for the peer's host
// memory (and messages), one per rail of that route, and one for its device
// memory where another provider serves that (cuda_ipc on the same node).
// Each operation goes to the route of the memory kind of its remote side
// (send, recv and flush to the host route), rewritten to that provider's
// registration and key; the provider sees an ordinary operation of its own
// domain.
//
// Staged route (routed/config.hpp's `staged` class): where the routed
// domain has a staged provider domain, an operation for the host route
// whose local memory the host route's provider has no registration of
// (device memory it does not reach) goes to a third provider endpoint, the
// staged domain's, connected to the peer's host-route provider domain of
// the staged provider's inner provider and transport; it copies the device
// memory through host memory. An imported key of host memory carries that
// route's key too. Flushes and notifications cover it as any other
// provider endpoint.
//
// Rails (a route over two or more devices, routed/config.hpp): a write or
// read of one local slice, without fence, of at least
// routed_state::stripe_min bytes (FABRIX_STRIPE_MIN, default 256 KiB) is
// split into one contiguous stripe per rail that is up, each posted on its
// rail (signaled, whatever the operation asked); its one completion comes
// when every stripe has completed, with the first error (unsignaled: only
// an error, and finished() counts it then). Every other operation goes whole on one rail: send and recv
// on rail 0 always (both sides must meet there), the rest on the first rail
// that is up. A rail that goes down (routed/state.hpp) fails the striped
// operations and flushes waiting on it with status::timed_out; operations
// posted whole on it before that complete when its provider reports them.
// The bytes a failed write was to write are undefined at the target, as
// for any failed write.
//
// A peer that is gone: once a striped part or a joined flush has failed
// with status::peer_unreachable on a provider endpoint whose rail is not
// down, the queue pair refuses every new operation with peer_unreachable
// (as one provider's queue pair does), even where another of its provider
// endpoints has not seen the failure yet (one connection of several
// failing fails them all, as UCX does with an endpoint's lanes). A rail
// stalled and marked down (routed/state.hpp) is not such a failure.
//
// Ordering: operations on one provider endpoint keep that provider's
// order. A notification or message (write_with_imm, send) is delivered
// after everything its queue pair posted before it, on every rail and
// route: where operations went out on another provider endpoint than its
// own and are not known complete at the target (no gate or flush of this
// queue pair covering them has completed), it is held (translated and checked now,
// post() returns ok) behind a gate, a flush on each of those endpoints, and
// posted on its own from a later poll() once the gate completed; a gate
// that fails (a rail down, a peer gone) fails it with the gate's status.
// While anything is held, later notifications, messages and flushes queue
// behind it in order (up to held_capacity; then status::again); writes,
// reads and atomics do not wait. So a notification after a striped write
// costs one flush round trip on the other rails, unless a flush of the
// queue pair posted after the write has completed.
//
// A flush covers every provider endpoint this queue pair has used: with
// one (not a rail), it is that provider's flush; otherwise a flush on
// each, joined into one completion. The first flush after a rail this
// queue pair used went down completes with status::timed_out (what went
// over that rail is unknown); later ones cover the rails that are up. A
// fence orders operations of one provider endpoint only: an operation with
// op_options::fence is refused (unsupported) once the queue pair has used
// another one (a striped operation uses several; flush and wait instead).
//
// Cost per operation: the route's pick, a copy of the operation and its
// local slice; for a remote_key, one table lookup; for a remote_buffer
// named directly, its routed seal is checked and the provider's entry
// decoded (import it to pay that once). Batches go to the provider in runs
// of up to batch_size operations of one provider endpoint. Nothing
// allocates per operation: the scratch for rewritten operations and gather
// lists is sized at connect (the domain's scatter-gather limit), and the
// one for decoded remote_buffers (batch_size of them, about 9 KiB) on the
// queue pair's first operation that names a remote_buffer, so queue pairs
// that use imported keys only never hold it. A striped operation takes a
// join from the domain's fixed pool (none free: status::again).
#pragma once

#include <fabrix/any_provider.hpp>
#include <fabrix/detail/import_table.hpp>
#include <fabrix/detail/routed_peer.hpp>
#include <fabrix/detail/validate.hpp>
#include <fabrix/routed/key.hpp>
#include <fabrix/routed/state.hpp>

#include <array>
#include <bit>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fabrix::detail {

// Which provider endpoints serve one kind of a peer's memory, and why.
struct routed_route {
  std::array<int, routed_max_rails> sub{-1, -1, -1, -1};       // this domain's provider, per rail
  std::array<int, routed_max_rails> endpoint{-1, -1, -1, -1};  // index into routed_endpoint::endpoints_
  std::array<std::uint8_t, routed_max_rails> peer_sub{};       // the peer's, in its address blob and key entries
  std::uint8_t rails = 0;
  std::string why;
  bool usable() const noexcept { return rails > 0; }
};

// Sub: as routed_state's.
template <class Sub>
class routed_endpoint {
 public:
  using sub_endpoint = typename Sub::endpoint_impl;

  static constexpr std::size_t batch_size = 16;
  static constexpr std::size_t host = 0, device = 1, staged = 2;
  static constexpr std::size_t max_endpoints = routed_max_endpoints;

  static constexpr std::size_t held_capacity = 64;

  // max_sge: the routed domain's scatter-gather limit (the core refuses
  // longer gather lists before they reach post()). Not movable: while it
  // holds operations the domain's poll() reaches it by address.
  routed_endpoint(routed_state<Sub>* s, std::uint64_t peer_nonce, const seal_key& peer_secret, std::uint32_t max_sge)
      : s_(s), peer_nonce_(peer_nonce), peer_secret_(peer_secret), max_sge_(max_sge) {
    ops_.reserve(batch_size);
    gather_.reserve(max_sge);
    endpoints_.reserve(max_endpoints);
  }
  routed_endpoint(const routed_endpoint&) = delete;
  routed_endpoint& operator=(const routed_endpoint&) = delete;
  // Held operations complete as canceled; gates in flight are left to
  // finish_join.
  ~routed_endpoint() {
    while (held_count_ > 0) {
      held_op& h = held_[held_head_];
      drop_gate(h);
      complete_held(h, status::canceled);
      pop_held();
    }
    std::erase(s_->holding, this);
  }

  // Adds the provider endpoint of the next rail of `route` (host or device):
  // this domain's provider domain `sub`, the peer's `peer_sub`.
  void add_rail(std::size_t route, int sub, std::uint8_t peer_sub, sub_endpoint ep) {
    endpoints_.push_back(std::move(ep));
    endpoint_sub_[endpoints_.size() - 1] = sub;
    routed_route& r = routes_[route];
    r.sub[r.rails] = sub;
    r.peer_sub[r.rails] = peer_sub;
    r.endpoint[r.rails] = static_cast<int>(endpoints_.size() - 1);
    ++r.rails;
  }
  void set_why(std::size_t route, std::string why) { routes_[route].why = std::move(why); }

  // The peer is one provider's domain, not a routed one (connect() took its
  // own address blob, peer entry 0): its remote_buffers are that
  // provider's, and adopt_remote (queue_pair::adopt) wraps one as a routed
  // buffer of this queue pair, one entry sealed with the peer secret this
  // endpoint was made with, so that it takes its route as any other.
  void set_plain_peer(provider_id p) noexcept { plain_provider_ = p; }
  bool adopt_remote(const remote_buffer& foreign, remote_buffer& out) const noexcept {
    if (plain_provider_ == provider_id::none || foreign.provider != plain_provider_) return false;
    out = remote_buffer{};
    out.provider = routed_provider_id;
    out.rights = foreign.rights;
    out.location = foreign.location;
    out.address = foreign.address;
    out.length = foreign.length;
    out.owner = peer_nonce_;
    out.epoch = foreign.epoch;
    if (!append_routed_key(out, 0, foreign)) return false;
    out.seal = out.compute_seal(peer_secret_);
    return true;
  }
  void share_route(std::size_t route, std::size_t with, std::string why) {
    routes_[route] = routes_[with];
    routes_[route].why = std::move(why);
  }
  const routed_route& route(std::size_t r) const noexcept { return routes_[r]; }
  std::string describe() const {
    auto one = [&](std::size_t r) {
      const routed_route& x = routes_[r];
      if (!x.usable()) return x.why;
      const route_choice& first = sub(x.sub[0]).choice;
      if (x.rails == 1) return first.text() + " (" + x.why + ")";
      std::string t = first.transport.empty() ? first.provider : first.provider + ":" + first.transport;
      std::string down;
      for (std::size_t i = 0; i < x.rails; ++i) {
        const routed_sub<Sub>& s = sub(x.sub[i]);
        const std::string dev = s.choice.devices.empty() ? "(default)" : s.choice.devices[0];
        t += (i == 0 ? "@" : ",") + dev;
        if (s.down) down += (down.empty() ? "" : ",") + dev;
      }
      return t + " (" + x.why + "; " + std::to_string(x.rails) + " rails, writes and reads from " +
             std::to_string(s_->stripe_min) + " bytes striped" + (down.empty() ? "" : "; down: " + down) + ")";
    };
    std::string d = "host memory: " + one(host) + "; device memory: " + one(device);
    if (routes_[staged].usable()) d += "; this process's device memory to host memory: " + one(staged);
    return d;
  }

  status post(std::span<const operation> ops, std::size_t& posted) {
    posted = 0;
    if (tally_->peer_lost) return status::peer_unreachable;
    std::size_t i = 0;
    while (i < ops.size()) {
      const operation& first = ops[i];
      const std::size_t r = route_of(first);
      if (must_hold(first, r)) {
        if (const status st = hold(first, r); st != status::ok) return st;
        ++posted;
        ++i;
        continue;
      }
      if (first.code == opcode::flush || striped(first, r)) {
        const status st = first.code == opcode::flush ? post_flush(first) : post_striped(first, r);
        if (st != status::ok) return st;
        ++posted;
        ++i;
        continue;
      }
      // A run of operations that go whole to one provider endpoint; an
      // operation with a gather list goes alone (it has the scratch slices).
      const std::size_t rail = rail_for(first, r);
      ops_.clear();
      status refused = translate(first, r, rail, 0);
      std::size_t j = refused == status::ok ? i + 1 : i;
      if (refused == status::ok && first.gather.empty())
        while (j < ops.size() && ops_.size() < batch_size && ops[j].gather.empty() && ops[j].code != opcode::flush &&
               route_of(ops[j]) == r && rail_for(ops[j], r) == rail && !striped(ops[j], r) && !must_hold(ops[j], r)) {
          refused = translate(ops[j], r, rail, ops_.size());
          if (refused != status::ok) break;
          ++j;
        }
      if (!ops_.empty()) {
        const int e = routes_[r].endpoint[rail];
        std::size_t sent = 0;
        const status st = endpoints_[static_cast<std::size_t>(e)].post(ops_, sent);
        posted += sent;
        if (sent > 0) mark_used(e, ops_[0].code);
        if (st != status::ok) return st;
      }
      if (refused != status::ok) return refused;
      i = j;
    }
    return status::ok;
  }

  void set_default_options(op_options defaults) {
    for (auto& e : endpoints_) e.set_default_options(defaults);
  }
  std::uint64_t finished() const noexcept {
    std::uint64_t n = tally_->unsignaled_finished;
    for (const auto& e : endpoints_) n += e.finished();
    return n;
  }

  // Imports the provider's key of every rail of the route of `rb`'s memory,
  // and for host memory the staged route's where this queue pair has one.
  result<import_ref> import_key(const remote_buffer& rb) {
    const std::size_t r = rb.location.kind == memory_kind::host ? host : device;
    const routed_route& route = routes_[r];
    std::optional<entry> checked;
    if (peers(rb) && route.usable()) {
      entry e{r, {}};
      std::size_t made = 0;
      for (; made < route.rails; ++made) {
        auto one = import_one(rb, r, made, e.keys[made]);
        if (!one) {
          (void)release_entry(e, made);
          return unexpected(std::move(one).error());
        }
        if (!*one) break;
      }
      if (made == route.rails && r == host && routes_[staged].usable()) {
        auto one = import_one(rb, staged, 0, e.staged_key);
        if (!one) {
          (void)release_entry(e, made);
          return unexpected(std::move(one).error());
        }
        e.has_staged = *one;
      }
      if (made == route.rails)
        checked = e;
      else
        (void)release_entry(e, made);
    }
    const bool made_all = checked.has_value();
    const entry kept = made_all ? *checked : entry{};
    auto ref = import_into(imports_, std::move(checked), "routed");
    if (!ref && made_all) (void)release_entry(kept, routes_[r].rails);
    return ref;
  }
  status release_key(import_ref ref) {
    auto e = imports_.release(ref);
    if (!e) return status::invalid_argument;
    return release_entry(*e, routes_[e->route].rails);
  }

 private:
  struct entry {
    std::size_t route = host;
    std::array<remote_key, routed_max_rails> keys{};  // per rail: the provider's key, its ref that endpoint's entry
    remote_key staged_key{};                          // the staged route's, where has_staged
    bool has_staged = false;
  };

  const routed_sub<Sub>& sub(int i) const noexcept { return s_->subs[static_cast<std::size_t>(i)]; }
  sub_endpoint& endpoint_of(std::size_t r, std::size_t rail) noexcept {
    return endpoints_[static_cast<std::size_t>(routes_[r].endpoint[rail])];
  }

  // The provider's key of rail `rail` of route `r` for `rb` into `k`;
  // false where `rb` has no entry of that route's peer provider domain.
  result<bool> import_one(const remote_buffer& rb, std::size_t r, std::size_t rail, remote_key& k) {
    remote_buffer sub;
    if (!routed_sub_buffer(rb, routes_[r].peer_sub[rail], sub)) return false;
    auto ref = endpoint_of(r, rail).import_key(sub);
    if (!ref) return unexpected(std::move(ref).error());
    k = remote_key::of(sub, *ref);
    return true;
  }

  // Releases the first `rails` keys of `e`, and its staged route's.
  status release_entry(const entry& e, std::size_t rails) {
    status first = status::ok;
    for (std::size_t i = 0; i < rails; ++i) {
      const status st = endpoint_of(e.route, i).release_key(e.keys[i].ref);
      if (first == status::ok) first = st;
    }
    if (e.has_staged) {
      const status st = endpoint_of(staged, 0).release_key(e.staged_key.ref);
      if (first == status::ok) first = st;
    }
    return first;
  }

  bool peers(const remote_buffer& rb) const noexcept {
    return rb.owner == peer_nonce_ && rb.seal == rb.compute_seal(peer_secret_);
  }

  // The route of the peer's memory kind; the staged route instead of the
  // host route where the local memory is not registered with the host
  // route's provider (device memory it does not reach) and this queue pair
  // stages.
  std::size_t route_of(const operation& o) const noexcept {
    std::size_t r = host;
    if (uses_remote(o.code)) {
      const memory_location where = o.remote.key ? o.remote.key->location : o.remote.buffer->location;
      r = where.kind == memory_kind::host ? host : device;
    }
    if (r == host && routes_[staged].usable() && routes_[host].usable() && !local_on(o, routes_[host].sub[0]))
      return staged;
    return r;
  }
  static bool local_on(const operation& o, int sub_index) noexcept {
    const local_slice& l = o.gather.empty() ? o.local : o.gather[0];
    return l.descriptor == nullptr || view_of(l, sub_index).registered;
  }
  // What provider domain `sub_index` registered of the routed region `l`
  // names (l.descriptor is a routed_region_state<Sub>, set by the region).
  static const routed_local_view& view_of(const local_slice& l, int sub_index) noexcept {
    return static_cast<const routed_region_state<Sub>*>(l.descriptor)->local[static_cast<std::size_t>(sub_index)];
  }

  // The rail an operation posted whole goes on: rail 0 for messages, else
  // the first that is up (rail 0 where none is).
  std::size_t rail_for(const operation& o, std::size_t r) const noexcept {
    if (o.code == opcode::send || o.code == opcode::recv) return 0;
    const routed_route& x = routes_[r];
    if (x.rails < 2) return 0;
    for (std::size_t i = 0; i < x.rails; ++i)
      if (!sub(x.sub[i]).down) return i;
    return 0;
  }

  std::size_t rails_up(std::size_t r, std::array<std::size_t, routed_max_rails>& up) const noexcept {
    const routed_route& x = routes_[r];
    std::size_t n = 0;
    for (std::size_t i = 0; i < x.rails; ++i)
      if (!sub(x.sub[i]).down) up[n++] = i;
    return n;
  }

  bool striped(const operation& o, std::size_t r) const noexcept {
    if (routes_[r].rails < 2 || (o.code != opcode::write && o.code != opcode::read) || !o.gather.empty() ||
        o.local.length < s_->stripe_min || has(o.options, op_options::fence))
      return false;
    std::array<std::size_t, routed_max_rails> up{};
    return rails_up(r, up) > 1;
  }

  // The provider's local slice for `l` in provider domain `sub_index`;
  // false where that provider has no registration of its memory.
  static bool local_for(const local_slice& l, int sub_index, local_slice& out) noexcept {
    const routed_local_view& v = view_of(l, sub_index);
    if (!v.registered) return false;
    out = l;
    out.descriptor = v.descriptor;
    out.owner = v.owner;
    return true;
  }

  // Appends `o`, rewritten for rail `rail` of route `r`, to ops_ (scratch
  // slot `slot`); appends nothing where it refuses `o`.
  status translate(const operation& o, std::size_t r, std::size_t rail, std::size_t slot) {
    const routed_route& route = routes_[r];
    if (!route.usable()) return status::unsupported;
    const int e = route.endpoint[rail];
    if (has(o.options, op_options::fence) && (used_ & ~(1u << e)) != 0) return status::unsupported;
    const status st = rewrite(o, r, rail, slot, ops_.emplace_back(o));
    if (st != status::ok) ops_.pop_back();
    return st;
  }

  // `t`, a copy of `o`, made the provider's operation for rail `rail` of
  // route `r`.
  status rewrite(const operation& o, std::size_t r, std::size_t rail, std::size_t slot, operation& t) {
    const routed_route& route = routes_[r];
    if (o.gather.empty()) {
      if (!local_for(o.local, route.sub[rail], t.local)) return status::unsupported;
    } else {
      gather_.clear();
      for (const auto& l : o.gather) {
        local_slice x;
        if (gather_.size() == gather_.capacity() || !local_for(l, route.sub[rail], x)) return status::unsupported;
        gather_.push_back(x);
      }
      t.gather = gather_;
    }
    if (uses_remote(o.code)) {
      if (const remote_key* k = o.remote.key) {
        entry* en = imports_.find(k->ref);
        if (en == nullptr) return status::invalid_argument;
        if (en->route == r)
          t.remote.key = &en->keys[rail];
        else if (r == staged && en->route == host && en->has_staged)
          t.remote.key = &en->staged_key;
        else
          return status::invalid_argument;
      } else {
        if (buffers_.empty()) buffers_.resize(batch_size);  // once per queue pair
        remote_buffer& sub_buffer = buffers_[slot];
        if (!peers(*o.remote.buffer) || !routed_sub_buffer(*o.remote.buffer, route.peer_sub[rail], sub_buffer))
          return status::invalid_argument;
        t.remote.buffer = &sub_buffer;
      }
    }
    return status::ok;
  }

  // A write or read as one contiguous stripe per rail that is up (64-byte
  // aligned splits), joined into one completion. Every stripe is rewritten
  // before the first is posted, so a bad key or slice refuses the whole
  // operation; a provider that says again (or fails) after some stripes
  // went out abandons the join: the caller posts the whole operation again,
  // and until the stripes that went out have finished every striped
  // operation of this queue pair is refused with again, so that none of
  // them still reads the caller's source or writes its destination once
  // the operation posted again has completed.
  status post_striped(const operation& o, std::size_t r) {
    if (tally_->abandoned != 0) return status::again;
    std::array<std::size_t, routed_max_rails> up{};
    const std::size_t n = rails_up(r, up);
    const std::uint64_t len = o.local.length;
    const std::uint64_t chunk = ((len + n - 1) / n + 63) & ~std::uint64_t{63};
    ops_.clear();
    std::array<std::size_t, routed_max_rails> rail_of{};
    for (std::size_t k = 0; k < n && k * chunk < len; ++k) {
      if (status st = translate(o, r, up[k], ops_.size()); st != status::ok) return st;
      operation& t = ops_.back();
      const std::uint64_t at = k * chunk;
      t.local.address += at;
      t.local.length = std::min(chunk, len - at);
      t.remote.offset += at;
      t.remote.length = t.local.length;
      rail_of[k] = up[k];
    }
    routed_join* j = take_join(o.code);
    if (j == nullptr) return status::again;
    j->token = o.token;
    j->flags = o.flags;
    j->bytes = len;
    j->unsignaled = has(o.options, op_options::unsignaled);
    for (std::size_t k = 0; k < ops_.size(); ++k) {
      operation& t = ops_[k];
      t.token = reinterpret_cast<std::uint64_t>(j);
      t.flags = flag_routed;
      t.options = static_cast<op_options>(static_cast<std::uint8_t>(t.options) &
                                          ~static_cast<std::uint8_t>(op_options::unsignaled));
      if (status st = post_part(j, routes_[r].endpoint[rail_of[k]], t); st != status::ok) return st;
    }
    return status::ok;
  }

  // One user flush: that provider's where one provider endpoint (not a
  // rail) was used, else a flush on each used one that is up, joined.
  status post_flush(const operation& o) {
    std::uint16_t targets = 0, lost = 0;
    for (std::size_t e = 0; e < endpoints_.size(); ++e) {
      if ((used_ & (1u << e)) == 0) continue;
      std::uint16_t& set = sub(endpoint_sub_[e]).down ? lost : targets;
      set = static_cast<std::uint16_t>(set | (1u << e));
    }
    if (lost != 0) {
      // What went over a rail that is down since the last flush is unknown:
      // this flush fails, and later ones cover the rails that are up.
      if (s_->failed.size() == s_->failed.capacity()) return status::again;
      completion c{};
      c.token = o.token;
      c.flags = o.flags;
      c.op = opcode::flush;
      c.status = status::timed_out;
      s_->failed.push_back(c);
      used_ = static_cast<std::uint16_t>(used_ & ~lost);
      return status::ok;
    }
    if (targets == 0) {
      if (!routes_[host].usable()) return status::unsupported;
      targets = static_cast<std::uint16_t>(1u << routes_[host].endpoint[rail_for(o, host)]);
    }
    if (std::popcount(targets) == 1 && !sub(endpoint_sub_[std::countr_zero(targets)]).is_rail) {
      std::size_t sent = 0;
      return endpoints_[static_cast<std::size_t>(std::countr_zero(targets))].post(std::span<const operation>(&o, 1),
                                                                                  sent);
    }
    routed_join* j = take_join(opcode::flush);
    if (j == nullptr) return status::again;
    j->token = o.token;
    j->flags = o.flags;
    for (std::size_t e = 0; e < endpoints_.size(); ++e)
      if ((targets & (1u << e)) != 0) j->covers[e] = sent_[e];
    return post_flush_parts(j, targets);
  }

  // A join of this queue pair for a user operation `op`, or a gate; nullptr
  // when the domain's pool is empty.
  routed_join* take_join(opcode op) noexcept {
    routed_join* j = s_->joins.take();
    if (j != nullptr) {
      j->op = op;
      j->qp = tally_;
    }
    return j;
  }

  // A flush on each provider endpoint of `targets`, as parts of join `j`.
  status post_flush_parts(routed_join* j, std::uint16_t targets) {
    operation inner = op::flush(reinterpret_cast<std::uint64_t>(j));
    inner.flags = flag_routed;
    for (std::size_t e = 0; e < endpoints_.size(); ++e)
      if ((targets & (1u << e)) != 0)
        if (const status st = post_part(j, static_cast<int>(e), inner); st != status::ok) return st;
    return status::ok;
  }

  // Posts one part of join `j` on provider endpoint `e`; on a refusal the
  // join is given back (nothing posted yet) or abandoned.
  status post_part(routed_join* j, int e, const operation& part) {
    std::size_t sent = 0;
    const status st = endpoints_[static_cast<std::size_t>(e)].post(std::span<const operation>(&part, 1), sent);
    if (st != status::ok || sent != 1) {
      if (j->remaining == 0) {
        s_->joins.give_back(j);
      } else {
        j->abandoned = true;
        ++tally_->abandoned;
      }
      return st != status::ok ? st : status::again;
    }
    s_->part_posted(j, endpoint_sub_[static_cast<std::size_t>(e)]);
    mark_used(e, part.code);
    return status::ok;
  }

  // Bit per provider endpoint with posts not known complete at the target.
  std::uint16_t unsynced() const noexcept {
    std::uint16_t m = 0;
    for (std::size_t e = 0; e < endpoints_.size(); ++e)
      if (sent_[e] > tally_->synced[e]) m = static_cast<std::uint16_t>(m | (1u << e));
    return m;
  }

  void mark_used(int e, opcode code) noexcept {
    used_ = static_cast<std::uint16_t>(used_ | (1u << e));
    if (code != opcode::recv && code != opcode::flush) ++sent_[static_cast<std::size_t>(e)];
  }

  // Whether `o` must wait: a notification or message after operations on
  // another provider endpoint (not yet behind a gate), or a notification,
  // message or flush while something is held.
  bool must_hold(const operation& o, std::size_t r) const noexcept {
    const bool message = o.code == opcode::write_with_imm || o.code == opcode::send;
    if (!message && o.code != opcode::flush) return false;
    if (held_count_ > 0) return true;
    if (!message || !routes_[r].usable()) return false;
    return (unsynced() & ~(1u << routes_[r].endpoint[rail_for(o, r)])) != 0;
  }

  // Translates `o` into a held slot now (so bad input is refused at once),
  // behind a gate over the other provider endpoints with posts not known
  // complete at the target.
  status hold(const operation& o, std::size_t r) {
    if (held_count_ == held_capacity) return status::again;
    if (held_.empty()) {  // once per queue pair
      held_.resize(held_capacity);
      for (auto& x : held_) x.gather.reserve(max_sge_);
    }
    held_op& h = held_[(held_head_ + held_count_) % held_capacity];
    h.op = o;
    h.endpoint = -1;
    h.gate = nullptr;
    h.gather.clear();
    if (o.code != opcode::flush) {
      const std::size_t rail = rail_for(o, r);
      ops_.clear();
      if (const status st = translate(o, r, rail, 0); st != status::ok) return st;
      h.op = ops_[0];
      h.endpoint = routes_[r].endpoint[rail];
      if (h.op.remote.key) {
        h.key = *h.op.remote.key;
        h.op.remote.key = &h.key;
      } else if (h.op.remote.buffer) {
        h.buffer = *h.op.remote.buffer;
        h.op.remote.buffer = &h.buffer;
      }
      if (!h.op.gather.empty()) {
        h.gather.assign(h.op.gather.begin(), h.op.gather.end());
        h.op.gather = h.gather;
      }
      const auto others = static_cast<std::uint16_t>(unsynced() & ~(1u << h.endpoint));
      if (others != 0) {
        routed_join* j = take_join(opcode::flush);
        if (j == nullptr) return status::again;
        j->gate = true;
        if (const status st = post_flush_parts(j, others); st != status::ok) return st;
        h.gate = j;
        for (std::size_t e = 0; e < endpoints_.size(); ++e)
          if ((others & (1u << e)) != 0) tally_->synced[e] = sent_[e];
      }
      ++sent_[static_cast<std::size_t>(h.endpoint)];
    }
    if (held_count_++ == 0) s_->holding.push_back(this);
    return status::ok;
  }

 public:
  bool holding() const noexcept { return held_count_ > 0; }

  // From the domain's poll(): posts the held operations whose turn has
  // come, in order; one whose gate failed, or that its provider refuses,
  // completes with that error (routed_state::failed). Stops at a gate in
  // flight or a provider that says again (tried at the next poll).
  void advance() {
    while (held_count_ > 0) {
      held_op& h = held_[held_head_];
      if (s_->failed.size() == s_->failed.capacity()) return;  // room for its completion first
      if (h.gate != nullptr) {
        if (h.gate->remaining != 0 && !h.gate->reported) return;
        const status gate = h.gate->result;
        drop_gate(h);
        if (gate != status::ok) {
          complete_held(h, gate);
          pop_held();
          continue;
        }
      }
      status st = status::peer_unreachable;
      if (!tally_->peer_lost) {
        if (h.endpoint < 0) {
          st = post_flush(h.op);
        } else {
          std::size_t sent = 0;
          st = endpoints_[static_cast<std::size_t>(h.endpoint)].post(std::span<const operation>(&h.op, 1), sent);
          if (st == status::ok && sent == 0) st = status::again;
          if (st == status::ok) mark_used(h.endpoint, h.op.code);
        }
      }
      if (st == status::again) return;
      if (st != status::ok) complete_held(h, st);
      pop_held();
    }
  }

 private:
  struct held_op {
    operation op;       // translated for `endpoint`; a flush as the user posted it
    int endpoint = -1;  // -1: a flush (post_flush when its turn comes)
    routed_join* gate = nullptr;
    remote_key key{};  // op.remote points here or at buffer
    remote_buffer buffer{};
    std::vector<local_slice> gather;  // capacity max_sge
  };

  // Gives the gate back, or to finish_join while parts are in flight.
  void drop_gate(held_op& h) noexcept {
    if (h.gate == nullptr) return;
    if (h.gate->remaining == 0)
      s_->joins.give_back(h.gate);
    else
      h.gate->orphan = true;
    h.gate = nullptr;
  }

  void complete_held(const held_op& h, status st) {
    if (has(h.op.options, op_options::unsignaled)) ++tally_->unsignaled_finished;
    completion c{};
    c.token = h.op.token;
    c.flags = h.op.flags;
    c.op = h.op.code;
    c.status = st;
    s_->failed.push_back(c);
  }

  void pop_held() noexcept {
    held_head_ = (held_head_ + 1) % held_capacity;
    --held_count_;
  }

  routed_state<Sub>* s_;
  std::uint64_t peer_nonce_;
  seal_key peer_secret_;
  std::array<routed_route, 3> routes_{};            // host, device, staged
  provider_id plain_provider_ = provider_id::none;  // set_plain_peer
  std::vector<sub_endpoint> endpoints_;             // at most max_endpoints
  std::array<int, max_endpoints> endpoint_sub_{};   // each endpoint's provider domain
  std::uint16_t used_ = 0;                          // bit per endpoint an operation went out on
  // Per provider endpoint: operations posted to it (recv and flush aside),
  // a count routed_tally::synced is compared with.
  std::array<std::uint64_t, max_endpoints> sent_{};
  std::uint32_t max_sge_;
  std::vector<held_op> held_;  // a ring of held_capacity, made on the first hold
  std::size_t held_head_ = 0, held_count_ = 0;
  std::shared_ptr<routed_tally> tally_ = std::make_shared<routed_tally>();  // what its joins report back
  import_table<entry> imports_;
  std::vector<operation> ops_;          // one batch, rewritten
  std::vector<remote_buffer> buffers_;  // the provider's remote_buffer per batch slot (made on first use)
  std::vector<local_slice> gather_;     // one gather list, rewritten
};

}  // namespace fabrix::detail
