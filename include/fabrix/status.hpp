// fabrix::status — the outcome of every call, data path and control path alike.
//
// `ok`, `in_progress` and `again` are not errors: `again` is back-pressure
// (the send queue or the operation pool is full; drive progress with
// domain::poll and post again). Everything after `again` is an error.
#pragma once

#include <cstdint>
#include <string_view>

namespace fabrix {

// (clang-format 14 misreads the attribute and packs the enumerators onto two lines)
// clang-format off
enum class [[nodiscard]] status : std::uint8_t {
  ok = 0,
  in_progress,
  again,
  invalid_argument,
  access_denied,
  out_of_range,
  peer_unreachable,
  timed_out,
  unsupported,
  truncated,
  canceled,
  no_memory,
  provider_error,
  // The remote region was deregistered: its remote_buffer no longer grants
  // anything. Operations through it complete with this status (verbs:
  // access_denied, which is all the NIC reports) and change no byte at the
  // target.
  stale_key,
};
// clang-format on

// True for every status that is an error (not ok, in_progress or again).
constexpr bool is_error(status s) noexcept {
  return static_cast<std::uint8_t>(s) > static_cast<std::uint8_t>(status::again);
}

constexpr std::string_view to_string(status s) noexcept {
  switch (s) {
    case status::ok: return "ok";
    case status::in_progress: return "in_progress";
    case status::again: return "again";
    case status::invalid_argument: return "invalid_argument";
    case status::access_denied: return "access_denied";
    case status::out_of_range: return "out_of_range";
    case status::peer_unreachable: return "peer_unreachable";
    case status::timed_out: return "timed_out";
    case status::unsupported: return "unsupported";
    case status::truncated: return "truncated";
    case status::canceled: return "canceled";
    case status::no_memory: return "no_memory";
    case status::provider_error: return "provider_error";
    case status::stale_key: return "stale_key";
  }
  return "unknown";
}

}  // namespace fabrix
