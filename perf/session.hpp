// One side of a fabrix-perf run: the bootstrap to the peer, the domain, the
// queue pairs to the peer, the registered data and control regions, the
// peer's remote_buffers, and the options both sides agreed on.
//
// Setup (all through the bootstrap, before any timed work): open the domain,
// exchange and compare the options, register, exchange addresses and
// connect -q queue pairs, exchange remote_buffers. Rank 0 is the server.
#pragma once

#include "buffer.hpp"
#include "failure.hpp"
#include "layout.hpp"
#include "options.hpp"

#include <fabrix/any_provider.hpp>
#include <fabrix/bootstrap.hpp>
#include <fabrix/domain.hpp>

#include <algorithm>
#include <concepts>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace fabrix::perf {

// The control region: two 64-byte inbox slots (0, 64) and two staging slots
// (128, 192) of control.hpp's messages; the heartbeat word the peer writes
// (256) and this side's heartbeat source word (264) of heartbeat.hpp.
inline constexpr std::uint64_t control_bytes = 320;
inline constexpr std::uint64_t heartbeat_inbox = 256;
inline constexpr std::uint64_t heartbeat_source = 264;

template <provider P>
struct session {
  const options& opts;
  bootstrap boot;
  domain<P> dom;
  std::vector<queue_pair<P>> qps;
  perf::layout lay;
  buffer data_mem, control_mem;
  std::optional<memory_region<P>> data, control;
  remote_buffer peer_data, peer_control;
  std::uint64_t slots = 0;          // tx depth: operations in flight, atomics slots
  bool provider_allocated = false;  // the data region's memory came from the provider
  std::string not_allocated_why;    // when it did not: why (for the header)
  // --remote-keys import: peer_data imported by each queue pair (keys[i]
  // belongs to qps[i]); empty with --remote-keys buffer.
  std::vector<remote_key> keys;
  bool server() const noexcept { return boot.rank() == 0; }

  // The data region as fabrix-perf reads and writes it: the registered
  // memory itself, or for --mem cuda its host mirror (see buffer.hpp), which
  // push() copies to the device and pull() refreshes from it.
  std::byte* at(std::uint64_t offset) const noexcept {
    return data_mem.on_device() ? data_mem.host() + offset : data->data() + offset;
  }
  bool on_device() const noexcept { return data_mem.on_device(); }
  void push(std::uint64_t offset, std::uint64_t len) {
    if (!data_mem.push(offset, len)) fail("--mem " + opts.mem + ": copying to the device failed");
  }
  const std::byte* pull(std::uint64_t offset, std::uint64_t len) {
    if (!data_mem.pull(offset, len)) fail("--mem " + opts.mem + ": copying from the device failed");
    return at(offset);
  }
  local_slice local(std::uint64_t offset, std::uint64_t len) const noexcept { return data->slice(offset, len); }
  // A range of the peer's data region for operations on queue pair `qp_index`.
  remote_slice remote(std::uint64_t offset, std::uint64_t len, std::uint64_t qp_index = 0) const noexcept {
    return keys.empty() ? peer_data.slice(offset, len) : keys[qp_index % keys.size()].slice(offset, len);
  }
  // Points `o` at the same range for queue pair `qp_index` (batches built once).
  void retarget(operation& o, std::uint64_t qp_index) const noexcept {
    if (!keys.empty() && o.remote.key != nullptr) o.remote.key = &keys[qp_index % keys.size()];
  }
  queue_pair<P>& qp(std::uint64_t i) noexcept { return qps[i % qps.size()]; }
};

namespace detail {

inline std::vector<std::byte> as_bytes(std::string_view s) {
  std::vector<std::byte> v(s.size());
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}

inline std::vector<std::vector<std::byte>> allgather(bootstrap& boot, std::span<const std::byte> mine,
                                                     const char* what) {
  auto all = boot.allgather(mine);
  if (!all) fail(std::string("bootstrap exchange of ") + what + ": " + all.error().describe());
  if (all->size() != 2) fail("bootstrap job is not two ranks");
  return std::move(*all);
}

inline memory_location parse_mem(const std::string& mem) {
  if (mem == "host") return {};
  memory_location loc{memory_kind::cuda_device, 0};
  if (mem.size() > 5) loc.device = std::stoi(mem.substr(5));
  return loc;
}

}  // namespace detail

// `dom` is the domain the caller opened (or its error, which both sides
// learn before failing).
template <provider P>
session<P> open_session(const options& opts, bootstrap boot, const std::vector<step>& steps, result<domain<P>> dom) {
  // Both sides learn whether the other could open its domain before failing.
  const std::string mine = dom ? agreement_text(opts) + "resolved_provider=" + std::string(to_string(dom->provider()))
                               : std::string("error=") + dom.error().describe();
  auto texts = detail::allgather(boot, detail::as_bytes(mine), "options");
  auto text = [&](int r) { return std::string(reinterpret_cast<const char*>(texts[r].data()), texts[r].size()); };
  if (!dom) fail("cannot open provider '" + opts.provider + "': " + dom.error().describe());
  const std::string peer = text(1 - boot.rank());
  if (peer.starts_with("error=")) fail("the peer could not open its provider: " + peer.substr(6));
  if (std::string diff = compare_agreement(text(0), text(1)); !diff.empty())
    fail_usage(diff + " (start both sides with the same options)");

  session<P> s{opts, std::move(boot), std::move(*dom), {}, {}, {}, {}, {}, {}, {}, {}, 0, false, {}, {}};
  std::uint64_t max_size = 8;
  for (const step& st : steps) max_size = std::max(max_size, st.size);
  s.slots = static_cast<std::uint64_t>(opts.tx_depth);
  s.lay = layout::make(max_size, s.slots);

  std::string err;
  const memory_location where = detail::parse_mem(opts.mem);
  // --mem cuda is refused, in this order, by a build without CUDA, a
  // machine without the device, and a provider that cannot reach GPU memory.
  if (where.kind != memory_kind::host) {
    if (std::string why = buffer::cuda_refusal(where.device); !why.empty()) fail_usage(why);
    if (s.dom.caps().gpu == gpu_path::none)
      fail_usage("--mem " + opts.mem + ": provider '" + std::string(to_string(s.dom.provider())) +
                 "' cannot reach GPU memory (its caps().gpu is none); try --provider cuda_ipc");
  }
  // Who allocates the data region (--alloc): the provider where it can
  // (auto; through any_provider too, which answers unsupported for a
  // provider that does not allocate), the provider or fail (provider), or
  // fabrix-perf, which then registers it (user). The header says which, and
  // why not the provider.
  bool allocated = false;
  std::string why_not;
  const std::string name(to_string(s.dom.provider()));
  if (opts.alloc == "user") {
    why_not = "--alloc user";
  } else if (where.kind != memory_kind::host) {
    why_not = "providers allocate host memory only";
  } else if constexpr (allocates_memory<P>) {
    auto r = s.dom.allocate_memory(s.lay.total, access::all_remote);
    if (r) {
      s.data.emplace(std::move(*r));
      allocated = true;
    } else if (opts.alloc == "provider" && r.code() != status::unsupported) {
      fail("--alloc provider: provider '" + name + "' cannot allocate " + std::to_string(s.lay.total) +
           " bytes: " + r.error().describe());
    } else {
      why_not = r.error().describe();
    }
  } else {
    why_not = "provider '" + name + "' does not allocate memory";
  }
  if (!allocated && opts.alloc == "provider") fail_usage("--alloc provider: " + why_not + " (try --alloc user)");
  if (!allocated) {
    s.data_mem = buffer::allocate(where, s.lay.total, err);
    if (!s.data_mem) fail_usage(err);
    auto d = s.dom.register_memory(s.data_mem.data(), s.data_mem.size(), where, access::all_remote);
    if (!d) fail("register " + std::to_string(s.lay.total) + " bytes of " + opts.mem + ": " + d.error().describe());
    s.data.emplace(std::move(*d));
  }
  s.provider_allocated = allocated;
  s.not_allocated_why = why_not;
  // The control region is host memory, except where the provider shares only
  // device memory with peers (cuda_ipc): then it lives beside the data and
  // the channel copies each message through its host mirror.
  s.control_mem = buffer::allocate({}, control_bytes, err);
  if (!s.control_mem) fail(err);
  auto c = s.dom.register_memory(s.control_mem.data(), control_bytes, memory_location{}, access::remote_write);
  if (!c && c.code() == status::unsupported && where.kind != memory_kind::host) {
    s.control_mem = buffer::allocate(where, control_bytes, err);
    if (!s.control_mem) fail(err);
    if (!s.control_mem.push(0, control_bytes)) fail("clear the control region on the device");  // inbox seq 0
    c = s.dom.register_memory(s.control_mem.data(), control_bytes, where, access::remote_write);
  }
  if (!c) fail("register the control region: " + c.error().describe());
  s.control.emplace(std::move(*c));

  auto addr = s.dom.address();
  if (!addr) fail("domain address: " + addr.error().describe());
  auto addrs = detail::allgather(s.boot, *addr, "addresses");
  for (int i = 0; i < opts.qps; ++i) {
    auto qp = s.dom.connect(addrs[static_cast<std::size_t>(1 - s.boot.rank())]);
    if (!qp) fail("connect queue pair " + std::to_string(i) + " to the peer: " + qp.error().describe());
    s.qps.push_back(std::move(*qp));
  }

  std::vector<std::byte> blobs = s.data->remote().encode();
  const std::uint64_t first = blobs.size();
  const auto second = s.control->remote().encode();
  blobs.insert(blobs.end(), second.begin(), second.end());
  blobs.insert(blobs.begin(), reinterpret_cast<const std::byte*>(&first),
               reinterpret_cast<const std::byte*>(&first) + sizeof first);
  auto rbs = detail::allgather(s.boot, blobs, "remote buffers");
  const auto& theirs = rbs[static_cast<std::size_t>(1 - s.boot.rank())];
  std::uint64_t split = 0;
  if (theirs.size() < sizeof split) fail("truncated remote buffers from the peer");
  std::memcpy(&split, theirs.data(), sizeof split);
  if (split > theirs.size() - sizeof split) fail("malformed remote buffers from the peer");
  auto rd = remote_buffer::decode(std::span(theirs).subspan(sizeof split, split));
  auto rc = remote_buffer::decode(std::span(theirs).subspan(sizeof split + split));
  if (!rd || !rc) fail("the peer's remote buffers do not decode");
  s.peer_data = *rd;
  s.peer_control = *rc;
  if (opts.remote_keys == "import") {
    for (auto& qp : s.qps) {
      auto k = qp.import(s.peer_data);
      if (!k) fail("importing the peer's data region: " + k.error().describe());
      s.keys.push_back(*k);
    }
  }
  if (auto b = s.boot.barrier(); !b) fail("bootstrap barrier: " + b.error().describe());
  return s;
}

}  // namespace fabrix::perf
