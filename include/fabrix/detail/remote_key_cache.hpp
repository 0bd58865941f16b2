// The remote keys a queue pair has verified (and, where the provider needs
// it, unpacked), one per remote region: an operation on a remote_buffer
// finds its key by comparing the buffer (the last hit first, then every
// entry) instead of checking the seal and decoding the key again (which, in
// UCX, allocates). Imported keys (queue_pair::import) skip even that.
//
// One policy for every provider: bounded. A peer that hands out ever new
// regions (say, a collective's output address per call) must not make the
// cache grow without end. Past `capacity` entries, adding one first drops
// the least recently used entry that nobody holds; if every entry is held,
// the cache grows and shrinks back on later adds.
//
// Holds: a provider whose operations use the key after post() returns (UCX
// until its last request has finished, even after an early completion for
// a dead peer) holds the entry meanwhile, so a held key is never dropped;
// providers that copy the key into the operation at post time (ofi, verbs)
// need none. Entries have stable addresses.
//
// `Destroy` (optional) frees a dropped key (UCX: ucp_rkey_destroy).
// Threading: as the endpoint, one thread at a time. Testable without any
// provider (tests/unit/test_remote_key_cache.cpp).
#pragma once

#include <fabrix/remote_buffer.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace fabrix::detail {

template <class Handle, auto Destroy = nullptr>
class remote_key_cache {
 public:
  static constexpr std::size_t capacity = 64;

  struct entry {
    remote_buffer verified;  // the region as verified when it was added
    Handle key;
    std::uint32_t holds = 0;
    std::uint64_t last_use = 0;
    // Where the region is mapped in this process, if the provider maps it
    // (UCX: a UCX-allocated shared-memory segment of a peer on this node,
    // reached with plain loads and stores). Null otherwise.
    std::byte* mapped = nullptr;
    // Reached by the provider's own cross-memory attach (UCX: cma.hpp), a
    // region a peer on this node registered in its own host memory.
    bool by_cma = false;
  };

  remote_key_cache() = default;
  remote_key_cache(const remote_key_cache&) = delete;
  remote_key_cache& operator=(const remote_key_cache&) = delete;
  ~remote_key_cache() {
    for (auto& e : entries_) destroy(e->key);
  }

  // The entry for `rb`, or nullptr; counts as a use.
  entry* find(const remote_buffer& rb) noexcept {
    if (last_ != nullptr && last_->verified.same_region(rb)) {
      last_->last_use = ++clock_;
      return last_;
    }
    for (auto& e : entries_)
      if (e->verified.same_region(rb)) {
        e->last_use = ++clock_;
        last_ = e.get();
        return last_;
      }
    return nullptr;
  }

  // Takes `key`, unpacked for `rb` (already verified), evicting first when full.
  entry* add(const remote_buffer& rb, Handle key) {
    if (entries_.size() >= capacity) evict_one();
    entries_.push_back(std::make_unique<entry>(entry{rb, key, 0, ++clock_, nullptr}));
    last_ = entries_.back().get();
    return last_;
  }

  static void hold(entry* e) noexcept { ++e->holds; }
  static void release(entry* e) noexcept { --e->holds; }

  // Moves every key into `out` and empties the cache (endpoint close: the
  // keys are destroyed once UCX has finished the endpoint's requests).
  // Holders must forget their entries first.
  void drain_to(std::vector<Handle>& out) {
    for (auto& e : entries_) out.push_back(e->key);
    entries_.clear();
    last_ = nullptr;
  }

  // Drops (and destroys) every entry `pred(const entry&)` names, held or
  // not: for a key that no operation may use any more because the region
  // itself is gone (cuda_ipc, once its owner released the region and the
  // copies that used its mapping are done).
  template <class Pred>
  void drop_if(Pred pred) {
    std::erase_if(entries_, [&](const std::unique_ptr<entry>& e) {
      if (!pred(std::as_const(*e))) return false;
      if (e.get() == last_) last_ = nullptr;
      destroy(e->key);
      return true;
    });
  }

  std::size_t size() const noexcept { return entries_.size(); }

 private:
  void evict_one() noexcept {
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if ((*it)->holds == 0 && (victim == entries_.end() || (*it)->last_use < (*victim)->last_use)) victim = it;
    if (victim == entries_.end()) return;  // all held: grow for now
    if (victim->get() == last_) last_ = nullptr;
    destroy((*victim)->key);
    entries_.erase(victim);
  }

  static void destroy(Handle& key) noexcept {
    // By type, not by comparing the address: under -fsanitize GCC does not
    // treat an external function's address as a non-null constant.
    if constexpr (!std::is_null_pointer_v<decltype(Destroy)>) Destroy(key);
  }

  std::vector<std::unique_ptr<entry>> entries_;
  entry* last_ = nullptr;  // the last entry found or added
  std::uint64_t clock_ = 0;
};

}  // namespace fabrix::detail
