// The wiring under a communicator: a queue pair per rank (bootstrap's
// connect_all), the registered scratch (scratch.hpp) and every peer's
// remote_buffer for it, and the two writes the engine posts: a chunk (from a
// send slot into the peer's receive slot, or along a chunk_route), and a
// zero-byte notification.
// Nothing here is allocated or registered after create().
//
// Lifetime: the domain outlives the mesh; the scratch's region is
// deregistered before its memory is freed (owned_region.hpp).
#pragma once

#include <fabrix/bootstrap.hpp>
#include <fabrix/collectives/options.hpp>
#include <fabrix/collectives/owned_region.hpp>
#include <fabrix/collectives/scratch.hpp>
#include <fabrix/connect.hpp>
#include <fabrix/domain.hpp>
#include <fabrix/local_slice.hpp>
#include <fabrix/remote_buffer.hpp>
#include <fabrix/remote_key.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace fabrix::coll::detail {

// Where a chunk is written from and to when not from its send slot into the
// peer's receive slot: a range of a registered user buffer (registered.hpp)
// on either side. The slices name `bytes` bytes; a remote slice's buffer must
// stay alive until the chunk is posted.
struct chunk_route {
  std::optional<local_slice> from;  // instead of the send slot
  std::optional<remote_slice> to;   // instead of the peer's receive slot
};

template <provider P>
struct mesh {
  domain<P>* dom = nullptr;
  int rank = 0;
  int size = 1;
  scratch_layout layout;
  std::vector<queue_pair<P>> qps;
  std::optional<owned_region<P>> scratch;  // none with one rank
  std::vector<remote_buffer> peers;
  // peers[r] imported by qps[r] (queue_pair::import): chunks name these, so
  // a chunk costs no key lookup in the provider.
  std::vector<remote_key> keys;

  // Collective over `boot`. With one rank there is no scratch.
  static result<mesh> create(domain<P>& dom, bootstrap& boot, const options& o) {
    auto qps = connect_all(dom, boot);
    if (!qps) return unexpected(std::move(qps).error());
    mesh m;
    m.dom = &dom;
    m.rank = boot.rank();
    m.size = boot.size();
    m.layout = scratch_layout{m.rank, o.slots, o.chunk_bytes};
    m.qps = std::move(*qps);
    if (m.size == 1) return m;
    auto s = allocate_registered(dom, scratch_bytes(o, m.size), o.device);
    if (!s) return unexpected(std::move(s).error());
    m.scratch.emplace(std::move(*s));
    auto peers = exchange(boot, m.scratch->region.remote());
    if (!peers) return unexpected(std::move(peers).error());
    m.peers = std::move(*peers);
    for (int r = 0; r < m.size; ++r) {
      auto k = m.qps[static_cast<std::size_t>(r)].import(m.peers[static_cast<std::size_t>(r)]);
      if (!k) return unexpected(std::move(k).error());
      m.keys.push_back(*k);
    }
    return m;
  }

  const memory_region<P>& region() const noexcept { return scratch->region; }
  std::byte* send_slot(int peer, std::uint64_t k) const noexcept {
    return region().data() + layout.send_offset(peer, k);
  }
  const std::byte* recv_slot(int peer, std::uint64_t k) const noexcept {
    return region().data() + layout.recv_offset(peer, k);
  }
  // Chunk k (`bytes` long) to `peer`, by default from its send slot into its
  // receive slot at the peer.
  status write_chunk(int peer, std::uint64_t k, std::size_t bytes, std::uint32_t imm, std::uint64_t token,
                     const chunk_route& route = {}) {
    return qps[peer].write_with_imm(route.from ? *route.from : region().slice(layout.send_offset(peer, k), bytes),
                                    route.to ? *route.to : keys[peer].slice(layout.recv_offset_at(peer, k), bytes), imm,
                                    token);
  }
  // Chunk k_from of `from`, in its receive slot here, on to `to` as chunk k_to.
  status forward_chunk(int from, std::uint64_t k_from, int to, std::uint64_t k_to, std::size_t bytes, std::uint32_t imm,
                       std::uint64_t token) {
    return qps[to].write_with_imm(region().slice(layout.recv_offset(from, k_from), bytes),
                                  keys[to].slice(layout.recv_offset_at(to, k_to), bytes), imm, token);
  }
  // A zero-byte write_with_imm: only the notification.
  status notify(int peer, std::uint32_t imm, std::uint64_t token) {
    return qps[peer].write_with_imm(region().slice(0, 0), keys[peer].slice(0, 0), imm, token);
  }
  status flush(int peer, std::uint64_t token) { return qps[peer].flush(token); }
};

}  // namespace fabrix::coll::detail
