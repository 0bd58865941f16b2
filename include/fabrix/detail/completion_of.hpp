// Provider kit: the completion an operation reports when it succeeds — its
// token, opcode, flags (internal routing bits, copied through) and imm, and
// the bytes of its local side (0 for a flush). A provider sets status,
// native_code, peer and, for a recv, bytes when the operation finishes.
#pragma once

#include <fabrix/completion.hpp>
#include <fabrix/operation.hpp>

namespace fabrix::detail {

inline completion completion_of(const operation& o) noexcept {
  return completion{.token = o.token,
                    .bytes = o.code == opcode::flush ? 0 : o.local_bytes(),
                    .op = o.code,
                    .flags = o.flags,
                    .imm = o.imm};
}

}  // namespace fabrix::detail
