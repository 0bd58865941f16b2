// fabrix::queue_pair<P> — a connected endpoint to one peer.
//
// Every operation takes local slice(s), a remote slice and a caller token
// (returned unchanged in the operation's completion) and returns a status at
// once: ok (posted; its completion will come from domain::poll), again
// (back-pressure: poll and post again) or an error (nothing was posted and no
// completion will come). Failures after posting arrive in the completion.
// The overloads without a token return an awaitable: `co_await qp.write(a, b)`
// yields the completion.
//
// What a completion means, and the completion levels: completion.hpp.
// Options per operation (unsignaled, delivered, fence): operation.hpp.
//
// Ordering: operations on one queue_pair are not ordered with each other,
// except that write_with_imm's notification is delivered to the target only
// after its data is in place, flush completes only after every operation
// posted before it on this queue_pair is complete at the target, and an
// operation after fence() starts only after every earlier one is.
//
// Unsignaled operations give no completion unless they fail; finished()
// counts them once they have finished (ok or not), at the latest when a
// flush posted after them completes: post a batch unsignaled, then one
// flush, and wait for the flush alone.
//
// Threading: used by the thread that polls its domain. Lifetime: may outlive
// its domain; every post then returns invalid_argument (see domain.hpp).
#pragma once

#include <fabrix/concepts.hpp>
#include <fabrix/detail/awaiter.hpp>
#include <fabrix/detail/domain_core.hpp>
#include <fabrix/detail/provider_impl.hpp>
#include <fabrix/detail/routed_peer.hpp>
#include <fabrix/detail/validate.hpp>
#include <fabrix/operation.hpp>

#include <atomic>
#include <concepts>
#include <coroutine>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

namespace fabrix {

// What a batched post did: `posted` operations went out (in order); when
// status is not ok, the operation at index `posted` is the one that was
// refused and none after it was posted.
struct post_result {
  fabrix::status status = status::ok;
  std::size_t posted = 0;
};

template <provider P>
class queue_pair;

namespace detail {
// Ids for queue_pair::import_id: process-wide, never 0, never reused.
inline std::uint64_t next_import_id() noexcept {
  static std::atomic<std::uint64_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed) + 1;
}
}  // namespace detail

// co_await-able form of one operation. Posting happens in await_suspend; a
// refused post resumes at once with the refusal as the completion's status.
template <provider P>
class [[nodiscard]] op_awaitable : private detail::op_awaiter_base {
 public:
  op_awaitable(queue_pair<P>& qp, const operation& o) : qp_(&qp), op_(o) {}
  op_awaitable(const op_awaitable&) = delete;
  op_awaitable& operator=(const op_awaitable&) = delete;

  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) {
    waiting = h;
    op_.token = as_token();
    op_.flags |= detail::flag_awaited;
    const status s = qp_->post(op_);
    if (s == status::ok) return true;
    result = completion{.status = s, .op = op_.code};
    return false;
  }
  completion await_resume() const noexcept { return result; }

 private:
  queue_pair<P>* qp_;
  operation op_;
};

template <provider P>
class queue_pair {
 public:
  using provider_type = P;

  // `routed`: the peer is a routed domain reached through its provider
  // domain of P (domain::connect; detail/routed_peer.hpp), else null.
  queue_pair(typename P::endpoint_impl impl, std::shared_ptr<detail::domain_core<P>> core, std::uint32_t peer_id,
             std::unique_ptr<detail::routed_peer> routed = nullptr)
      : core_(std::move(core)),
        impl_(std::move(impl)),
        id_(core_->impl.provider()),
        peer_id_(peer_id),
        import_id_(detail::next_import_id()),
        rules_(id_, core_->impl.owner(), import_id_, core_->impl.runtime_caps()),
        routed_peer_(std::move(routed)) {}

  // What completions that arrive on this queue pair carry in completion::peer.
  std::uint32_t peer_id() const noexcept { return peer_id_; }

  // --- posting with a token ------------------------------------------------
  status write(const local_slice& src, remote_slice dst, std::uint64_t token, op_options opts = op_options::none) {
    return post(op::write(src, dst, token, opts));
  }
  status write(std::span<const local_slice> src, remote_slice dst, std::uint64_t token,
               op_options opts = op_options::none) {
    return post(op::write(src, dst, token, opts));
  }
  status read(const local_slice& dst, remote_slice src, std::uint64_t token, op_options opts = op_options::none) {
    return post(op::read(dst, src, token, opts));
  }
  status read(std::span<const local_slice> dst, remote_slice src, std::uint64_t token,
              op_options opts = op_options::none) {
    return post(op::read(dst, src, token, opts));
  }
  status write_with_imm(const local_slice& src, remote_slice dst, std::uint32_t imm, std::uint64_t token,
                        op_options opts = op_options::none) {
    static_assert(P::caps.write_with_imm, "fabrix: this provider has no write_with_imm (P::caps.write_with_imm)");
    return post(op::write_with_imm(src, dst, imm, token, opts));
  }
  // 8-byte, 8-aligned; the previous remote value lands in `result8`.
  status fetch_add(const local_slice& result8, remote_slice target8, std::uint64_t add, std::uint64_t token,
                   op_options opts = op_options::none) {
    static_assert(P::caps.atomics, "fabrix: this provider has no atomics (P::caps.atomics)");
    return post(op::fetch_add(result8, target8, add, token, opts));
  }
  status compare_swap(const local_slice& result8, remote_slice target8, std::uint64_t expected, std::uint64_t desired,
                      std::uint64_t token, op_options opts = op_options::none) {
    static_assert(P::caps.atomics, "fabrix: this provider has no atomics (P::caps.atomics)");
    return post(op::compare_swap(result8, target8, expected, desired, token, opts));
  }
  // Two-sided: a send matches the peer's oldest posted recv on this queue
  // pair; a message longer than the recv buffer completes it with truncated.
  status send(const local_slice& src, std::uint64_t token, op_options opts = op_options::none) {
    static_assert(P::caps.send_recv, "fabrix: this provider has no send/recv (P::caps.send_recv)");
    return post(op::send(src, token, opts));
  }
  status recv(const local_slice& dst, std::uint64_t token) {
    static_assert(P::caps.send_recv, "fabrix: this provider has no send/recv (P::caps.send_recv)");
    return post(op::recv(dst, token));
  }
  status flush(std::uint64_t token) { return post(op::flush(token)); }

  // The next operation posted on this queue pair other than a recv starts
  // only after every one posted before it is complete at the target. No
  // completion of its own; a second fence() before that operation changes
  // nothing.
  void fence() noexcept { fence_next_ = true; }

  // Options every later operation on this queue pair takes where they apply
  // (op_options::unsignaled, op_options::delivered; see detail::options_of),
  // in addition to its own. Operations already posted keep theirs.
  void set_default_options(op_options defaults) {
    defaults_ = defaults & (op_options::unsignaled | op_options::delivered);
    impl_.set_default_options(defaults_);
  }
  op_options default_options() const noexcept { return defaults_; }

  // Unsignaled operations of this queue pair that have finished (ok or
  // not) since it was made; see the header comment for when they count.
  std::uint64_t finished() const noexcept { return impl_.finished(); }

  // --- imported remote keys (remote_key.hpp) ---------------------------------
  // Checks `rb` once (this provider's, made by this queue pair's peer, seal
  // intact) and resolves the provider's key; operations on slices of the
  // returned key cost a bounds and rights check. Errors: invalid_argument
  // (another provider's or peer's buffer, a broken seal, a closed queue
  // pair), no_memory (import_table::capacity keys are imported).
  result<remote_key> import(const remote_buffer& given) {
    if (!core_ || !core_->open) return unexpected(status::invalid_argument, "import: the queue pair is closed");
    const remote_buffer* adopted = given.provider == id_ ? &given : adopt(given);
    if (adopted == nullptr)
      return unexpected(status::invalid_argument, "import: the remote_buffer is another provider's");
    const remote_buffer& rb = *adopted;
    auto ref = impl_.import_key(rb);
    if (!ref) return unexpected(std::move(ref).error());
    return remote_key::of(rb, *ref, import_id_);
  }
  // Ends `key` on this queue pair: later operations with it are
  // invalid_argument; those already posted complete as usual. Returns
  // invalid_argument for a key this queue pair did not import or already
  // released.
  status release(const remote_key& key) {
    if (!core_ || !core_->open || key.importer != import_id_) return status::invalid_argument;
    return impl_.release_key(key.ref);
  }
  // What remote_keys imported here carry in remote_key::importer: unique in
  // this process.
  std::uint64_t import_id() const noexcept { return import_id_; }

  // --- awaitable forms -----------------------------------------------------
  op_awaitable<P> write(const local_slice& src, remote_slice dst) { return {*this, op::write(src, dst, 0)}; }
  op_awaitable<P> read(const local_slice& dst, remote_slice src) { return {*this, op::read(dst, src, 0)}; }
  op_awaitable<P> write_with_imm(const local_slice& src, remote_slice dst, std::uint32_t imm) {
    return {*this, op::write_with_imm(src, dst, imm, 0)};
  }
  op_awaitable<P> fetch_add(const local_slice& result8, remote_slice target8, std::uint64_t add) {
    return {*this, op::fetch_add(result8, target8, add, 0)};
  }
  op_awaitable<P> compare_swap(const local_slice& result8, remote_slice target8, std::uint64_t expected,
                               std::uint64_t desired) {
    return {*this, op::compare_swap(result8, target8, expected, desired, 0)};
  }
  op_awaitable<P> send(const local_slice& src) { return {*this, op::send(src, 0)}; }
  op_awaitable<P> recv(const local_slice& dst) { return {*this, op::recv(dst, 0)}; }
  op_awaitable<P> flush() { return {*this, op::flush(0)}; }

  // --- batches ---------------------------------------------------------------
  // Validates every operation first: if one is invalid nothing is posted and
  // `posted` is its index. Otherwise posts in order (one provider call).
  post_result post(std::span<const operation> ops) {
    if (!core_ || !core_->open) return {status::invalid_argument, 0};
    bool adopting = false;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (status s = detail::validate(ops[i], rules_); s != status::ok) {
        operation a;
        if (s != status::invalid_argument || !adopt(ops[i], a)) return {s, i};
        if (s = detail::validate(a, rules_); s != status::ok) return {s, i};
        adopting = true;
      }
    }
    if (adopting) {  // another provider's buffers (adopt): one at a time
      for (std::size_t i = 0; i < ops.size(); ++i)
        if (status s = post(ops[i]); s != status::ok) return {s, i};
      return {status::ok, ops.size()};
    }
    std::size_t posted = 0;
    if (fence_next_) {  // recvs before the fenced operation go as they are
      std::size_t i = 0;
      while (i < ops.size() && ops[i].code == opcode::recv) ++i;
      if (i < ops.size()) {
        if (status s = impl_.post(ops.first(i), posted); s != status::ok) return {s, posted};
        if (status s = post_fenced(ops[i]); s != status::ok) return {s, i};
        posted = i + 1;
        ops = ops.subspan(i + 1);
      }
    }
    std::size_t rest = 0;
    const status s = impl_.post(ops, rest);
    return {s, posted + rest};
  }
  status post(const operation& o) {
    if (!core_ || !core_->open) return status::invalid_argument;  // moved from, or its domain destroyed
    if (status s = detail::validate(o, rules_); s != status::ok) {
      operation a;
      if (s != status::invalid_argument || !adopt(o, a)) return s;
      return post_validated(a);
    }
    if (fence_next_ && o.code != opcode::recv) return post_fenced(o);
    std::size_t posted = 0;
    return impl_.post(std::span<const operation>(&o, 1), posted);
  }

  // The provider's native objects (P's documented handle, e.g. the
  // ucp_ep_h of a fabrix::ucx queue pair: fabrix/<provider>/native.hpp)
  // for calls fabrix does not make. They stay fabrix's, valid while this
  // object lives; native.hpp says what may be done with them. Only where the
  // provider documents one (not any_provider).
  auto native() const noexcept requires detail::has_native_handle<typename P::endpoint_impl> { return impl_.native(); }

  // Which provider serves this peer and why (fabrix::routed: one line per
  // memory kind), where the provider says; any_provider forwards it.
  std::string describe() const requires requires(const typename P::endpoint_impl& e) {
    { e.describe() } -> std::convertible_to<std::string>;
  }
  { return impl_.describe(); }

 private:
  friend struct detail::impl_access;
  // The operation after fence() (validated, not a recv): posted with
  // op_options::fence, as a copy; the fence stays pending when the post is
  // refused.
  status post_fenced(const operation& o) {
    operation fenced = o;
    fenced.options = fenced.options | op_options::fence;
    std::size_t posted = 0;
    const status s = impl_.post(std::span<const operation>(&fenced, 1), posted);
    if (s == status::ok) fence_next_ = false;
    return s;
  }

  // `o`, whose validation failed, posted with its remote_buffer adopted.
  status post_validated(const operation& o) {
    if (status s = detail::validate(o, rules_); s != status::ok) return s;
    if (fence_next_ && o.code != opcode::recv) return post_fenced(o);
    std::size_t posted = 0;
    return impl_.post(std::span<const operation>(&o, 1), posted);
  }

  static constexpr bool endpoint_adopts =
      requires(typename P::endpoint_impl & e, const remote_buffer& f, remote_buffer& out) {
    { e.adopt_remote(f, out) } -> std::same_as<bool>;
  };

  // Another provider's remote_buffer that this queue pair takes as one of
  // its own (the cold path: only after validation refused it): a routed
  // peer's, as its entry of this provider (detail/routed_peer.hpp); or,
  // where the endpoint adopts buffers (a routed queue pair to a plain
  // provider's domain, routed/endpoint.hpp), what it makes of it. Written
  // into adopted_ (made on first use; valid until the next adoption, and
  // providers read a remote_buffer at post); null where it is neither.
  const remote_buffer* adopt(const remote_buffer& rb) {
    if (rb.provider == id_ || (!routed_peer_ && !endpoint_adopts)) return nullptr;
    if (!adopted_) adopted_ = std::make_unique<remote_buffer>();
    if (routed_peer_)
      return detail::routed_entry_buffer(*routed_peer_, rb, *adopted_) && adopted_->provider == id_ ? adopted_.get()
                                                                                                    : nullptr;
    if constexpr (endpoint_adopts)
      if (impl_.adopt_remote(rb, *adopted_)) return adopted_.get();
    return nullptr;
  }
  bool adopt(const operation& o, operation& out) {
    if (!detail::uses_remote(o.code) || o.remote.buffer == nullptr || o.remote.key != nullptr) return false;
    const remote_buffer* a = adopt(*o.remote.buffer);
    if (a == nullptr) return false;
    out = o;
    out.remote.buffer = a;
    return true;
  }

  std::shared_ptr<detail::domain_core<P>> core_;  // declared first: released after impl_
  typename P::endpoint_impl impl_;
  provider_id id_;
  std::uint32_t peer_id_;
  std::uint64_t import_id_;
  detail::post_rules rules_;  // what every operation is checked against (validate.hpp)
  op_options defaults_ = op_options::none;
  bool fence_next_ = false;
  std::unique_ptr<detail::routed_peer> routed_peer_;  // null: the peer is no routed domain
  std::unique_ptr<remote_buffer> adopted_;
};

}  // namespace fabrix
