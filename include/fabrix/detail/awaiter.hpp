// The part of an operation's awaitable that domain::poll sees: the awaiter's
// own address is the operation's token (no allocation), and poll stores the
// completion here and resumes the coroutine on the polling thread.
#pragma once

#include <fabrix/completion.hpp>

#include <coroutine>
#include <cstdint>

namespace fabrix::detail {

struct op_awaiter_base {
  completion result{};
  std::coroutine_handle<> waiting{};

  std::uint64_t as_token() noexcept { return reinterpret_cast<std::uintptr_t>(this); }
  static op_awaiter_base* from_token(std::uint64_t token) noexcept {
    return reinterpret_cast<op_awaiter_base*>(static_cast<std::uintptr_t>(token));
  }
};

// Splits poll output: awaited completions resume their coroutines, the rest
// are compacted to the front of `out`. Returns how many remain for the caller.
inline std::size_t route_completions(completion* out, std::size_t n) {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (out[i].flags & flag_awaited) {
      op_awaiter_base* a = op_awaiter_base::from_token(out[i].token);
      a->result = out[i];
      a->result.token = 0;
      a->result.flags = 0;
      a->waiting.resume();
    } else {
      out[kept++] = out[i];
    }
  }
  return kept;
}

}  // namespace fabrix::detail
