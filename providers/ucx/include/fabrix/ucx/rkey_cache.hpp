// The remote keys one endpoint has unpacked: one per remote region, kept so
// that an operation finds its key by comparing the remote_buffer instead of
// unpacking it again (which allocates inside UCX).
//
// Bounded: a peer that hands out ever new regions (say, a collective's
// output address per call) must not make the cache grow without end. Past
// `capacity` entries, adding one first destroys the least recently used
// entry that no operation holds; if every entry is held, the cache grows
// and shrinks back on later adds.
//
// Holds: an operation holds its entry from posting until its slot returns
// to the pool (UCX may use the key until its last request has finished,
// even after an early completion for a dead peer), so a held key is never
// destroyed. Entries have stable addresses.
//
// Threading: as the endpoint, one thread at a time. Generic over the key
// handle and its destroy function so that the policy is testable without
// UCX (tests/unit/test_ucx_parts.cpp).
#pragma once

#include <fabrix/remote_buffer.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace fabrix::ucx::detail {

template <class Handle, void (*Destroy)(Handle)>
class key_cache {
 public:
  static constexpr std::size_t capacity = 64;

  struct entry {
    remote_buffer verified;  // the region as verified when it was added
    Handle key;
    std::uint32_t holds = 0;
    std::uint64_t last_use = 0;
    // Where the region is mapped in this process, if it is (a UCX-allocated
    // shared-memory segment of a peer on this node): its bytes are then
    // reached with plain loads and stores. Null otherwise.
    std::byte* mapped = nullptr;
  };

  key_cache() = default;
  key_cache(const key_cache&) = delete;
  key_cache& operator=(const key_cache&) = delete;
  ~key_cache() {
    for (auto& e : entries_) Destroy(e->key);
  }

  // The entry for `rb`, or nullptr; counts as a use.
  entry* find(const remote_buffer& rb) noexcept {
    for (auto& e : entries_)
      if (e->verified.same_region(rb)) {
        e->last_use = ++clock_;
        return e.get();
      }
    return nullptr;
  }

  // Takes `key`, unpacked for `rb` (already verified), evicting first when full.
  entry* add(const remote_buffer& rb, Handle key) {
    if (entries_.size() >= capacity) evict_one();
    entries_.push_back(std::make_unique<entry>(entry{rb, key, 0, ++clock_, nullptr}));
    return entries_.back().get();
  }

  static void hold(entry* e) noexcept { ++e->holds; }
  static void release(entry* e) noexcept { --e->holds; }

  // Moves every key into `out` and empties the cache (endpoint close: the
  // keys are destroyed once UCX has finished the endpoint's requests).
  // Holders must forget their entries first.
  void drain_to(std::vector<Handle>& out) {
    for (auto& e : entries_) out.push_back(e->key);
    entries_.clear();
  }

  std::size_t size() const noexcept { return entries_.size(); }

 private:
  void evict_one() noexcept {
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if ((*it)->holds == 0 && (victim == entries_.end() || (*it)->last_use < (*victim)->last_use)) victim = it;
    if (victim == entries_.end()) return;  // all held: grow for now
    Destroy((*victim)->key);
    entries_.erase(victim);
  }

  std::vector<std::unique_ptr<entry>> entries_;
  std::uint64_t clock_ = 0;
};

}  // namespace fabrix::ucx::detail
