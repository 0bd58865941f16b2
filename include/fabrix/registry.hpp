// The provider and memory-kind names this process knows, by wire number.
//
// provider_id and memory_kind are open sets (capabilities.hpp, memory.hpp):
// a name's number is provider_id_of(name) / memory_kind_of(name), the same in
// every process. What this registry adds is the way back, from a number read
// off the wire to a name, and the refusal of a second name that hashes to a
// number already taken. remote_buffer::decode accepts only numbers known here,
// so a blob naming a provider this process has never heard of is refused
// before anything looks at its key bytes.
//
// The built-in names (ucx, verbs, ofi, cuda_ipc; host, cuda_device) are always
// known, whether or not their provider is compiled in. Other names join when
// their provider registers (any_provider's register_provider, the plugin
// loader) or when the application calls register_*() itself — for example a
// process that only decodes and forwards another provider's remote_buffers.
//
// Names: 1 to 31 characters of [a-z0-9_-] (a plugin's name is part of its
// file name, libfabrix-<name>.so). Registration is idempotent and never
// removed. Thread-safe; not for the data path (it takes a lock).
#pragma once

#include <fabrix/capabilities.hpp>
#include <fabrix/memory.hpp>
#include <fabrix/result.hpp>

#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

namespace fabrix {

namespace detail {

inline constexpr std::size_t max_registered_name = 31;

constexpr bool valid_registered_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > max_registered_name) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// One table of (number, name) per kind of name. Entries live in a deque so
// that the string_views handed out stay valid for the life of the process.
class name_table {
 public:
  name_table(std::string_view what, std::span<const wire_name> builtins) : what_(what) {
    for (const wire_name& b : builtins) entries_.push_back({b.number, std::string(b.name)});
  }

  result<std::uint16_t> add(std::string_view name, std::uint16_t number) {
    if (!valid_registered_name(name))
      return unexpected(status::invalid_argument, std::string(what_) + " name '" + std::string(name) +
                                                      "': 1 to 31 characters of a-z, 0-9, '_' and '-'");
    std::lock_guard lock(mutex_);
    for (const auto& e : entries_) {
      if (e.number != number) continue;
      if (e.name == name) return number;
      return unexpected(status::invalid_argument,
                        std::string(what_) + " name '" + std::string(name) + "' has wire number " +
                            std::to_string(number) + ", which '" + e.name +
                            "' already holds in this process; one of the two must be renamed");
    }
    entries_.push_back({number, std::string(name)});
    return number;
  }

  // The name registered for `number`, empty when none.
  std::string_view find(std::uint16_t number) const {
    std::lock_guard lock(mutex_);
    for (const auto& e : entries_)
      if (e.number == number) return e.name;
    return {};
  }

 private:
  struct entry {
    std::uint16_t number;
    std::string name;
  };
  std::string_view what_;
  mutable std::mutex mutex_;
  std::deque<entry> entries_;
};

// Function-local statics: usable from other headers' static initialisers.
inline name_table& provider_names() {
  static name_table table("provider", builtin_provider_names);
  return table;
}
inline name_table& memory_kind_names() {
  static name_table table("memory kind", builtin_memory_kind_names);
  return table;
}

}  // namespace detail

// Makes `name` known here; returns provider_id_of(name). invalid_argument for
// a malformed name or one whose number another registered name holds.
inline result<provider_id> register_provider_name(std::string_view name) {
  auto n = detail::provider_names().add(name, static_cast<std::uint16_t>(provider_id_of(name)));
  if (!n) return unexpected(std::move(n).error());
  return static_cast<provider_id>(*n);
}

inline bool is_registered(provider_id id) {
  return !detail::provider_names().find(static_cast<std::uint16_t>(id)).empty();
}

// The registered name, "none" for provider_id::none, "unknown" for a number
// nothing registered.
inline std::string_view to_string(provider_id id) {
  if (id == provider_id::none) return "none";
  const auto name = detail::provider_names().find(static_cast<std::uint16_t>(id));
  return name.empty() ? std::string_view("unknown") : name;
}

// Makes the memory kind `name` known here; returns memory_kind_of(name).
inline result<memory_kind> register_memory_kind(std::string_view name) {
  auto n = detail::memory_kind_names().add(name, static_cast<std::uint16_t>(memory_kind_of(name)));
  if (!n) return unexpected(std::move(n).error());
  return static_cast<memory_kind>(*n);
}

inline bool is_registered(memory_kind k) {
  return !detail::memory_kind_names().find(static_cast<std::uint16_t>(k)).empty();
}

// The registered name, "unknown" for a number nothing registered.
inline std::string_view to_string(memory_kind k) {
  const auto name = detail::memory_kind_names().find(static_cast<std::uint16_t>(k));
  return name.empty() ? std::string_view("unknown") : name;
}

}  // namespace fabrix
