// fabrix::remote_key — a peer's registration imported into one queue pair
// (queue_pair::import): the seal, owner, provider and key bytes of its
// remote_buffer are checked once, and the provider resolves its key once
// (UCX unpacks its rkey, verbs reads its rkey, ...). Operations then take
// slices of it, and what each one costs is a bounds and rights check and an
// index into the provider's table: no search, no comparison of key bytes.
//
// A small, trivially copyable value that names an entry of its queue pair's
// import table (index and generation). It is valid on that queue pair only,
// from import() until release() or until the queue pair is destroyed; using
// it afterwards, or on another queue pair, is invalid_argument (the
// generation no longer matches, or the importer differs), never a use of a
// freed key. The remote_buffer it came from need not be kept.
#pragma once

#include <fabrix/capabilities.hpp>
#include <fabrix/memory.hpp>
#include <fabrix/remote_buffer.hpp>

#include <cstdint>
#include <type_traits>

namespace fabrix {

// Which entry of an endpoint's import table a remote_key names; generation
// 0 is never issued (a default-constructed key names nothing).
struct import_ref {
  std::uint32_t index = 0;
  std::uint32_t generation = 0;
};

class remote_key {
 public:
  // A range of the imported region; the key must stay alive until an
  // operation using the slice has been posted (not until it completes).
  remote_slice slice(std::uint64_t offset, std::uint64_t len) const noexcept {
    return remote_slice{nullptr, offset, len, this};
  }
  remote_slice whole() const noexcept { return slice(0, length); }
  bool imported() const noexcept { return ref.generation != 0; }

  // The key of `rb`'s region, imported as entry `ref` of a provider
  // endpoint by queue pair `importer` (0: not a queue pair's own key).
  static remote_key of(const remote_buffer& rb, import_ref ref, std::uint64_t importer = 0) noexcept {
    remote_key k;
    k.provider = rb.provider;
    k.rights = rb.rights;
    k.location = rb.location;
    k.address = rb.address;
    k.length = rb.length;
    k.importer = importer;
    k.ref = ref;
    return k;
  }

  // What the core checks per operation (copied from the remote_buffer).
  fabrix::provider_id provider = provider_id::none;
  fabrix::access rights = access::local;
  memory_location location{};
  std::uint64_t address = 0;  // the peer's virtual address of byte 0
  std::uint64_t length = 0;
  std::uint64_t importer = 0;  // the queue pair that imported it (queue_pair::import_id)
  import_ref ref{};            // the entry in that queue pair's provider endpoint
};

static_assert(std::is_trivially_copyable_v<remote_key>);

}  // namespace fabrix
