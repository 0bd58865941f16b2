// Provider kit: the table behind queue_pair::import. Each provider endpoint
// keeps one, holding what it resolved from an imported remote_buffer (an
// unpacked key, a mapped address, ...); operations reach an entry by index
// and generation, so a released entry is never used again: its generation
// moves on and old refs stop matching. Slots are reused; the table never
// shrinks and is bounded by `capacity` live entries.
//
// Threading: as its endpoint, one thread at a time. Lifetime: entries are
// destroyed with the table; release() hands an entry back to the provider
// to free what it holds.
#pragma once

#include <fabrix/remote_key.hpp>
#include <fabrix/result.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fabrix::detail {

template <class Entry>
class import_table {
 public:
  static constexpr std::size_t capacity = 1u << 16;

  // A ref for `e`, or nullopt when `capacity` entries are live.
  std::optional<import_ref> add(Entry e) {
    std::uint32_t index;
    if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else {
      if (slots_.size() >= capacity) return std::nullopt;
      index = static_cast<std::uint32_t>(slots_.size());
      slots_.emplace_back();
    }
    slot& s = slots_[index];
    s.entry = std::move(e);
    s.live = true;
    ++live_;
    return import_ref{index, s.generation};
  }

  // The live entry `r` names, or nullptr (released, stale or never issued).
  Entry* find(import_ref r) noexcept {
    if (r.index >= slots_.size()) return nullptr;
    slot& s = slots_[r.index];
    return s.live && s.generation == r.generation ? &s.entry : nullptr;
  }

  // Takes the entry `r` names out of the table (nullopt if none).
  std::optional<Entry> release(import_ref r) {
    Entry* e = find(r);
    if (e == nullptr) return std::nullopt;
    slot& s = slots_[r.index];
    std::optional<Entry> out(std::move(*e));
    s.live = false;
    if (++s.generation == 0) s.generation = 1;
    free_.push_back(r.index);
    --live_;
    return out;
  }

  std::size_t size() const noexcept { return live_; }

  // Calls f(Entry&) on every live entry (teardown).
  template <class F>
  void for_each(F&& f) {
    for (auto& s : slots_)
      if (s.live) f(s.entry);
  }

 private:
  struct slot {
    Entry entry{};
    std::uint32_t generation = 1;
    bool live = false;
  };
  std::vector<slot> slots_;
  std::vector<std::uint32_t> free_;
  std::size_t live_ = 0;
};

// queue_pair::import on a provider: `checked` is what the provider resolved
// from the remote_buffer, or nullopt when it refused it (`refused`, `why`:
// not made by this queue pair's peer, a broken seal or key, ...).
template <class Entry>
result<import_ref> import_into(import_table<Entry>& table, std::optional<Entry> checked, const char* provider,
                               status refused = status::invalid_argument,
                               const char* why = "not made by this peer, or its seal or key is broken") {
  if (!checked) return unexpected(refused, std::string("import: ") + why, provider);
  auto ref = table.add(std::move(*checked));
  if (!ref) return unexpected(status::no_memory, "import: too many imported keys on this queue pair", provider);
  return *ref;
}

// queue_pair::release on a provider whose entries hold nothing to free.
template <class Entry>
status release_from(import_table<Entry>& table, import_ref ref) {
  return table.release(ref) ? status::ok : status::invalid_argument;
}

}  // namespace fabrix::detail
