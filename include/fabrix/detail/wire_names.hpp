// How a name becomes the number that stands for it on the wire: names with
// a fixed number (the built-in providers and memory kinds) keep it, any other
// gets a hash of the name in [first, limit). The one rule behind
// provider_id_of and memory_kind_of (capabilities.hpp, memory.hpp); the
// registry (registry.hpp) starts from the same fixed lists.
#pragma once

#include <fabrix/detail/fnv1a.hpp>

#include <cstdint>
#include <span>
#include <string_view>

namespace fabrix::detail {

struct wire_name {
  std::uint16_t number;
  std::string_view name;
};

constexpr std::uint16_t wire_number_of(std::span<const wire_name> fixed, std::uint32_t first, std::uint32_t limit,
                                       std::string_view name) noexcept {
  for (const wire_name& f : fixed)
    if (f.name == name) return f.number;
  return static_cast<std::uint16_t>(first + fnv1a(name) % (limit - first));
}

}  // namespace fabrix::detail
