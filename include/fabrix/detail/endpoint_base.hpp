// Provider kit: what every provider's endpoint_impl (the provider side of
// fabrix::queue_pair) shares.
//
// Ownership: the endpoint owns its peer state on the heap, so it moves
// without moving what operations in flight point into. It tears the state
// down exactly once: when destroyed, and when another endpoint is assigned
// over it, through Teardown — a stateless function object called with the
// std::unique_ptr<Peer>, which either destroys the state or hands it on (to
// a domain that finishes closing it later). A moved-from endpoint holds
// nothing and tears nothing down.
//
// Peer has `defaults` (the queue pair's default op_options, which the
// provider merges per operation), `finished` (its unsignaled operations
// that have finished, ok or failed; only grows) and `failed`.
//
// Threading: as its domain, one thread at a time.
#pragma once

#include <fabrix/operation.hpp>
#include <fabrix/status.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>

namespace fabrix::detail {

template <class Peer, class Teardown>
class endpoint_base {
 public:
  explicit endpoint_base(std::unique_ptr<Peer> p) noexcept : p_(std::move(p)) {}
  endpoint_base(endpoint_base&&) noexcept = default;
  endpoint_base& operator=(endpoint_base&& o) noexcept {
    if (this != &o) {
      close();
      p_ = std::move(o.p_);
    }
    return *this;
  }
  ~endpoint_base() { close(); }

  void set_default_options(op_options defaults) noexcept { p_->defaults = defaults; }
  std::uint64_t finished() const noexcept { return p_ ? p_->finished : 0; }
  bool failed() const noexcept { return p_ && p_->failed; }

 protected:
  // Posts ops[posted..] one at a time through post_one(Peer&, const
  // operation&) until one is not ok; returns that status (ok: all posted).
  // Pass a lambda, not a function's name: a function pointer is called per
  // operation, a lambda's body is inlined into the loop.
  template <class PostOne>
  status post_each(std::span<const operation> ops, std::size_t& posted, PostOne&& post_one) {
    for (posted = 0; posted < ops.size(); ++posted) {
      if (status s = post_one(*p_, ops[posted]); s != status::ok) return s;
    }
    return status::ok;
  }

  std::unique_ptr<Peer> p_;

 private:
  void close() noexcept {
    if (p_) Teardown{}(std::move(p_));
    p_.reset();
  }
};

}  // namespace fabrix::detail
