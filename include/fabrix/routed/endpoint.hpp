// A routed queue pair's endpoint: one provider endpoint for the peer's host
// memory (and messages), and one for its device memory where another
// provider serves that (cuda_ipc on the same node). Each operation goes to
// the route of the memory kind of its remote side (send, recv and flush to
// the host route), rewritten to that provider's registration and key; the
// provider sees an ordinary operation of its own domain.
//
// Ordering: operations of one route keep that provider's order. A flush
// covers every route this queue pair has used: with one, it is that
// provider's flush; with two, a flush on each, joined into one completion.
// A fence orders operations of one route only: an operation with
// op_options::fence is refused (unsupported) once the queue pair has used
// the other route (flush and wait instead).
//
// Cost per operation: the route's pick, a copy of the operation and its
// local slice; for a remote_key, one table lookup; for a remote_buffer
// named directly, its routed seal is checked and the provider's entry
// decoded (import it to pay that once). Batches go to the provider in runs
// of up to batch_size operations of one route. Nothing allocates per
// operation: the scratch for rewritten operations and gather lists is sized
// at connect (the domain's scatter-gather limit), and the one for decoded
// remote_buffers (batch_size of them, about 9 KiB) on the queue pair's
// first operation that names a remote_buffer, so queue pairs that use
// imported keys only never hold it.
#pragma once

#include <fabrix/any_provider.hpp>
#include <fabrix/detail/import_table.hpp>
#include <fabrix/detail/validate.hpp>
#include <fabrix/routed/key.hpp>
#include <fabrix/routed/state.hpp>

#include <array>
#include <bit>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fabrix::detail {

// Which provider serves one kind of a peer's memory, and why.
struct routed_route {
  int sub = -1;               // this domain's provider (index into routed_state::subs)
  std::uint8_t peer_sub = 0;  // the peer's, in its address blob and key entries
  int endpoint = -1;          // index into routed_endpoint::endpoints_
  std::string why;
  bool usable() const noexcept { return endpoint >= 0; }
};

class routed_endpoint {
 public:
  static constexpr std::size_t batch_size = 16;
  static constexpr std::size_t host = 0, device = 1;

  // max_sge: the routed domain's scatter-gather limit (the core refuses
  // longer gather lists before they reach post()).
  routed_endpoint(routed_state* s, std::uint64_t peer_nonce, const seal_key& peer_secret, std::uint32_t max_sge)
      : s_(s), peer_nonce_(peer_nonce), peer_secret_(peer_secret) {
    ops_.reserve(batch_size);
    gather_.reserve(max_sge);
  }

  // Adds the provider endpoint for `route` (host or device).
  void set_route(std::size_t route, routed_route r, std::optional<any_provider::endpoint_impl> ep) {
    if (ep) {
      endpoints_.push_back(std::move(*ep));
      r.endpoint = static_cast<int>(endpoints_.size() - 1);
    }
    routes_[route] = std::move(r);
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
      return s_->subs[static_cast<std::size_t>(x.sub)].choice.text() + " (" + x.why + ")";
    };
    return "host memory: " + one(host) + "; device memory: " + one(device);
  }

  status post(std::span<const operation> ops, std::size_t& posted) {
    posted = 0;
    std::size_t i = 0;
    while (i < ops.size()) {
      const operation& first = ops[i];
      if (first.code == opcode::flush) {
        if (status st = post_flush(first); st != status::ok) return st;
        ++posted;
        ++i;
        continue;
      }
      const std::size_t r = route_of(first);
      ops_.clear();
      status refused = status::ok;
      std::size_t j = i;
      while (j < ops.size() && ops_.size() < batch_size && ops[j].code != opcode::flush && route_of(ops[j]) == r) {
        if (!ops_.empty() && !ops[j].gather.empty()) break;  // a gather list has the scratch slices alone
        refused = translate(ops[j], r, ops_.size());
        if (refused != status::ok) break;
        ++j;
        if (!ops[j - 1].gather.empty()) break;
      }
      if (!ops_.empty()) {
        std::size_t sent = 0;
        const status st = endpoints_[static_cast<std::size_t>(routes_[r].endpoint)].post(ops_, sent);
        posted += sent;
        if (sent > 0) used_ |= static_cast<std::uint8_t>(1u << r);
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
    std::uint64_t n = 0;
    for (const auto& e : endpoints_) n += e.finished();
    return n;
  }

  result<import_ref> import_key(const remote_buffer& rb) {
    const std::size_t r = rb.location.kind == memory_kind::host ? host : device;
    std::optional<entry> checked;
    if (peers(rb) && routes_[r].usable()) {
      entry e{r, {}};
      remote_buffer sub;
      if (routed_sub_buffer(rb, routes_[r].peer_sub, sub)) {
        auto ref = endpoints_[static_cast<std::size_t>(routes_[r].endpoint)].import_key(sub);
        if (!ref) return unexpected(std::move(ref).error());
        e.key.provider = sub.provider;
        e.key.rights = sub.rights;
        e.key.location = sub.location;
        e.key.address = sub.address;
        e.key.length = sub.length;
        e.key.ref = *ref;
        checked = e;
      }
    }
    auto ref = import_into(imports_, checked, "routed");
    if (!ref && checked) (void)endpoints_[static_cast<std::size_t>(routes_[r].endpoint)].release_key(checked->key.ref);
    return ref;
  }
  status release_key(import_ref ref) {
    auto e = imports_.release(ref);
    if (!e) return status::invalid_argument;
    return endpoints_[static_cast<std::size_t>(routes_[e->route].endpoint)].release_key(e->key.ref);
  }

 private:
  struct entry {
    std::size_t route = host;
    remote_key key;  // the provider's key: its ref names the provider endpoint's entry
  };

  bool peers(const remote_buffer& rb) const noexcept {
    return rb.owner == peer_nonce_ && rb.seal == rb.compute_seal(peer_secret_);
  }

  std::size_t route_of(const operation& o) const noexcept {
    if (!uses_remote(o.code)) return host;
    const memory_location where = o.remote.key ? o.remote.key->location : o.remote.buffer->location;
    return where.kind == memory_kind::host ? host : device;
  }

  // The provider's local slice for `l` on route `r`; false where that
  // provider has no registration of its memory.
  bool local_for(const local_slice& l, std::size_t r, local_slice& out) const noexcept {
    const auto* region = static_cast<const routed_region_state*>(l.descriptor);
    const auto& sub = region->subs[static_cast<std::size_t>(routes_[r].sub)];
    if (!sub) return false;
    out = l;
    out.descriptor = sub->descriptor();
    out.owner = sub->remote().owner;
    return true;
  }

  // Appends `o`, rewritten for route `r`, to ops_ (scratch slot `slot`).
  status translate(const operation& o, std::size_t r, std::size_t slot) {
    const routed_route& route = routes_[r];
    if (!route.usable()) return status::unsupported;
    if (has(o.options, op_options::fence) && (used_ & ~static_cast<std::uint8_t>(1u << r)) != 0)
      return status::unsupported;
    operation t = o;
    if (o.gather.empty()) {
      if (o.code != opcode::flush && !local_for(o.local, r, t.local)) return status::unsupported;
    } else {
      gather_.clear();
      for (const auto& l : o.gather) {
        local_slice x;
        if (gather_.size() == gather_.capacity() || !local_for(l, r, x)) return status::unsupported;
        gather_.push_back(x);
      }
      t.gather = gather_;
    }
    if (uses_remote(o.code)) {
      if (const remote_key* k = o.remote.key) {
        entry* e = imports_.find(k->ref);
        if (e == nullptr || e->route != r) return status::invalid_argument;
        t.remote.key = &e->key;
      } else {
        if (buffers_.empty()) buffers_.resize(batch_size);  // once per queue pair
        remote_buffer& sub = buffers_[slot];
        if (!peers(*o.remote.buffer) || !routed_sub_buffer(*o.remote.buffer, route.peer_sub, sub))
          return status::invalid_argument;
        t.remote.buffer = &sub;
      }
    }
    ops_.push_back(t);
    return status::ok;
  }

  // One user flush: that provider's where one route was used, else a
  // flush on each used route joined into one completion.
  status post_flush(const operation& o) {
    if (std::popcount(used_) <= 1) {
      const std::size_t r = used_ == 0 || (used_ & 1u) ? host : device;
      if (!routes_[r].usable()) return status::unsupported;
      std::size_t sent = 0;
      return endpoints_[static_cast<std::size_t>(routes_[r].endpoint)].post(std::span<const operation>(&o, 1), sent);
    }
    routed_join* j = s_->joins.take();
    if (j == nullptr) return status::again;
    j->token = o.token;
    j->flags = o.flags;
    operation inner = op::flush(reinterpret_cast<std::uint64_t>(j));
    inner.flags = flag_routed;
    for (std::size_t r = host; r <= device; ++r) {
      if ((used_ & (1u << r)) == 0) continue;
      std::size_t sent = 0;
      const status st =
          endpoints_[static_cast<std::size_t>(routes_[r].endpoint)].post(std::span<const operation>(&inner, 1), sent);
      if (st != status::ok) {
        if (j->remaining == 0)
          s_->joins.give_back(j);
        else
          j->abandoned = true;
        return st;
      }
      ++j->remaining;
    }
    return status::ok;
  }

  routed_state* s_;
  std::uint64_t peer_nonce_;
  seal_key peer_secret_;
  std::array<routed_route, 2> routes_{};
  std::vector<any_provider::endpoint_impl> endpoints_;  // at most 2
  std::uint8_t used_ = 0;                               // bit per route an operation went out on
  import_table<entry> imports_;
  std::vector<operation> ops_;          // one batch, rewritten
  std::vector<remote_buffer> buffers_;  // the provider's remote_buffer per batch slot (made on first use)
  std::vector<local_slice> gather_;     // one gather list, rewritten
};

}  // namespace fabrix::detail
