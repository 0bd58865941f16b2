// An in-process provider for unit tests of the core: "remote" memory is in
// this process, operations are memcpy and plain arithmetic, completions are
// immediate; device "limited" offers no atomics and no send/recv. It exercises the core templates (validation, routing,
// awaitables, any_provider) without any fabric. fake::allocating_provider is
// the same plus allocate_memory (allocates_memory): zeroed bytes that live
// as long as its domain.
#pragma once

#include <fabrix/detail/completion_ring.hpp>
#include <fabrix/detail/describe_region.hpp>
#include <fabrix/detail/import_table.hpp>
#include <fabrix/fabrix.hpp>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

namespace fake {

struct domain_state {
  std::uint64_t owner = next_owner();
  static std::uint64_t next_owner() {
    static std::uint64_t n = 0;
    return ++n;
  }
  fabrix::detail::completion_ring ring{64};
  std::uint64_t epoch = 1;
  std::chrono::milliseconds last_wait{-1};  // the timeout the core passed to wait() last
};

class region_impl {
 public:
  explicit region_impl(const fabrix::remote_buffer& rb) : rb_(rb) {}
  const fabrix::remote_buffer& remote() const noexcept { return rb_; }
  void* descriptor() const noexcept { return nullptr; }

 private:
  fabrix::remote_buffer rb_;
};

class endpoint_impl {
 public:
  endpoint_impl(domain_state* self, domain_state* peer) : self_(self), peer_(peer) {}
  fabrix::status post(std::span<const fabrix::operation> ops, std::size_t& posted) {
    for (posted = 0; posted < ops.size(); ++posted) {
      const auto& o = ops[posted];
      std::byte* remote = nullptr;
      if (o.remote.key) {
        const std::uint64_t* base = imports_.find(o.remote.key->ref);
        if (base == nullptr) return fabrix::status::invalid_argument;  // released or stale
        remote = reinterpret_cast<std::byte*>(*base + o.remote.offset);
      } else if (o.remote.buffer) {
        remote = reinterpret_cast<std::byte*>(o.remote.buffer->address + o.remote.offset);
      }
      run(o, remote);
    }
    return fabrix::status::ok;
  }
  void set_default_options(fabrix::op_options d) { defaults_ = d; }
  std::uint64_t finished() const noexcept { return finished_; }
  // Imports check the owner only (the fake has no seals).
  fabrix::result<fabrix::import_ref> import_key(const fabrix::remote_buffer& rb) {
    if (rb.owner != peer_->owner) return fabrix::unexpected(fabrix::status::invalid_argument, "not the peer's", "fake");
    auto ref = imports_.add(rb.address);
    if (!ref) return fabrix::unexpected(fabrix::status::no_memory, "import table full", "fake");
    return *ref;
  }
  fabrix::status release_key(fabrix::import_ref ref) {
    return imports_.release(ref) ? fabrix::status::ok : fabrix::status::invalid_argument;
  }
  std::size_t imported() const noexcept { return imports_.size(); }
  // The options the last operation was run with (options_of), for tests.
  fabrix::op_options last_options() const noexcept { return last_options_; }

 private:
  void run(const fabrix::operation& o, std::byte* remote) {
    last_options_ = fabrix::detail::options_of(o, defaults_);
    fabrix::completion c{.token = o.token, .bytes = 0, .op = o.code, .flags = o.flags, .imm = o.imm};
    std::byte* const target = remote;
    for (const auto& l : o.locals()) {
      if (o.code == fabrix::opcode::write || o.code == fabrix::opcode::write_with_imm)
        std::memcpy(remote, l.address, l.length);
      if (o.code == fabrix::opcode::read) std::memcpy(l.address, remote, l.length);
      if (remote) remote += l.length;
      c.bytes += l.length;
    }
    if (o.code == fabrix::opcode::fetch_add || o.code == fabrix::opcode::compare_swap) {
      std::uint64_t old;
      std::memcpy(&old, target, 8);
      std::uint64_t next = o.code == fabrix::opcode::fetch_add ? old + o.operand : (old == o.compare ? o.operand : old);
      std::memcpy(target, &next, 8);
      std::memcpy(o.locals()[0].address, &old, 8);
    }
    if (has(last_options_, fabrix::op_options::unsignaled))
      ++finished_;  // the fake never fails: no completion
    else
      self_->ring.push(c);
    if (o.code == fabrix::opcode::write_with_imm)
      peer_->ring.push({.bytes = o.remote.length, .op = fabrix::opcode::remote_write_imm, .imm = o.imm});
  }
  domain_state* self_;
  domain_state* peer_;
  fabrix::op_options defaults_ = fabrix::op_options::none;
  fabrix::op_options last_options_ = fabrix::op_options::none;
  std::uint64_t finished_ = 0;
  fabrix::detail::import_table<std::uint64_t> imports_;  // the region's address
};

class domain_impl {
 public:
  static fabrix::result<domain_impl> create(const fabrix::domain_options& o) {
    if (o.transport == "refuse") return fabrix::unexpected(fabrix::status::unsupported, "refused", "fake");
    domain_impl d;
    if (o.device == "limited") d.caps_ = {.atomics = false, .send_recv = false, .max_sge = 4};
    return d;
  }
  fabrix::result<region_impl> register_memory(void* addr, std::size_t len, fabrix::memory_location where,
                                              fabrix::access rights) {
    return region_impl(fabrix::detail::describe_region(
        fabrix::provider_id::none, reinterpret_cast<std::uintptr_t>(addr), len, where, rights, d_->owner, d_->epoch++));
  }
  std::size_t poll(std::span<fabrix::completion> out) { return d_->ring.drain(out); }
  fabrix::status wait(std::chrono::milliseconds timeout) {
    d_->last_wait = timeout;
    return d_->ring.empty() ? fabrix::status::timed_out : fabrix::status::ok;
  }
  fabrix::result<std::vector<std::byte>> address() const {
    std::vector<std::byte> a(sizeof(void*));
    const domain_state* p = d_.get();
    std::memcpy(a.data(), &p, sizeof(p));
    return a;
  }
  fabrix::result<endpoint_impl> connect(std::span<const std::byte> peer, std::uint32_t) {
    if (peer.size() != sizeof(void*))
      return fabrix::unexpected(fabrix::status::invalid_argument, "bad address", "fake");
    domain_state* p;
    std::memcpy(&p, peer.data(), sizeof(p));
    return endpoint_impl(d_.get(), p);
  }
  fabrix::provider_id provider() const noexcept { return fabrix::provider_id::none; }
  std::uint64_t owner() const noexcept { return d_->owner; }
  fabrix::capabilities runtime_caps() const noexcept { return caps_; }
  std::string describe() const { return "fake"; }
  std::chrono::milliseconds last_wait() const noexcept { return d_->last_wait; }

 private:
  domain_impl() : d_(std::make_unique<domain_state>()) {}
  std::unique_ptr<domain_state> d_;
  fabrix::capabilities caps_{.max_sge = 4};
};

struct provider {
  static constexpr std::string_view name = "fake";
  static constexpr fabrix::capabilities caps{.max_sge = 4};
  using domain_impl = fake::domain_impl;
  using endpoint_impl = fake::endpoint_impl;
  using region_impl = fake::region_impl;
};
static_assert(fabrix::provider<provider>);

// A fake domain with one more entry: create() as domain_impl's, then Derived.
template <class Derived>
class extended_domain : public domain_impl {
 public:
  static fabrix::result<Derived> create(const fabrix::domain_options& o) {
    auto d = domain_impl::create(o);
    if (!d) return fabrix::unexpected(std::move(d).error());
    return Derived(std::move(*d));
  }

 protected:
  explicit extended_domain(domain_impl d) : domain_impl(std::move(d)) {}
};

// The fake provider over domain D (D::name names it).
template <class D>
struct provider_of {
  static constexpr std::string_view name = D::name;
  static constexpr fabrix::capabilities caps{.max_sge = 4};
  using domain_impl = D;
  using endpoint_impl = fake::endpoint_impl;
  using region_impl = fake::region_impl;
};

class allocating_domain_impl : public extended_domain<allocating_domain_impl> {
 public:
  static constexpr std::string_view name = "fake_alloc";
  explicit allocating_domain_impl(domain_impl d) : extended_domain(std::move(d)) {}
  // Zeroed host memory, registered; it lives as long as the domain (which
  // outlives its regions), as a real provider's would live with its region.
  fabrix::result<region_impl> allocate_memory(std::size_t len, fabrix::access rights) {
    allocations_.emplace_back(new std::byte[len]());
    return register_memory(allocations_.back().get(), len, {}, rights);
  }

 private:
  std::vector<std::unique_ptr<std::byte[]>> allocations_;
};
using allocating_provider = provider_of<allocating_domain_impl>;
static_assert(fabrix::allocates_memory<allocating_provider>);

// The same plus check_host_memory (checks_host_memory): memory in
// [device_begin, device_end) is "device memory" that this provider
// recognises and refuses as host memory, as cuda_ipc does cudaMalloc memory.
class checking_domain_impl : public extended_domain<checking_domain_impl> {
 public:
  static constexpr std::string_view name = "fake_check";
  static inline const std::byte* device_begin = nullptr;
  static inline const std::byte* device_end = nullptr;
  explicit checking_domain_impl(domain_impl d) : extended_domain(std::move(d)) {}
  fabrix::result<void> check_host_memory(const void* addr, std::size_t) {
    const auto* p = static_cast<const std::byte*>(addr);
    if (p >= device_begin && p < device_end)
      return fabrix::unexpected(fabrix::status::invalid_argument, "registered as host memory, but it is device memory",
                                "fake_check");
    return {};
  }
};
using checking_provider = provider_of<checking_domain_impl>;
static_assert(fabrix::checks_host_memory<checking_provider>);
static_assert(!fabrix::checks_host_memory<provider>);

// Two domains, a queue pair from a to b, a 256-byte local source in a and a
// 256-byte target in b that grants every remote right.
struct pair_fixture {
  fabrix::domain<provider> a = fabrix::domain<provider>::create().value();
  fabrix::domain<provider> b = fabrix::domain<provider>::create().value();
  fabrix::queue_pair<provider> qp = a.connect(b.address().value()).value();
  std::vector<std::byte> src = std::vector<std::byte>(256), dst = std::vector<std::byte>(256);
  fabrix::memory_region<provider> ms = a.register_memory(src, fabrix::access::local).value();
  fabrix::memory_region<provider> md = b.register_memory(dst, fabrix::access::all_remote).value();
};

}  // namespace fake
