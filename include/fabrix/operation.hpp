// fabrix::operation — one data-path operation as a value, for batched posting
// (queue_pair::post(span<const operation>)) and for the provider contract.
// queue_pair's write()/read()/... build these; users build them with the
// factories in fabrix::op for batches.
#pragma once

#include <fabrix/completion.hpp>
#include <fabrix/local_slice.hpp>
#include <fabrix/remote_buffer.hpp>
#include <fabrix/remote_key.hpp>

#include <cstdint>
#include <span>

namespace fabrix {

// What the caller asks of one operation beyond its arguments (bits).
//   unsignaled: no completion unless it fails (then an error completion with
//     its token comes as usual); counted in queue_pair::finished() once it
//     has finished. For write, read, write_with_imm, fetch_add,
//     compare_swap and send; posting a recv or flush with it is
//     invalid_argument, and awaited operations are always signaled.
//   delivered: completion_level::delivered (write, write_with_imm, send;
//     other operations already give at least that).
//   fence: the operation starts only after every operation posted before it
//     on the same queue pair is complete at the target (queue_pair::fence()
//     sets it on the next one). Not for recv (invalid_argument).
enum class op_options : std::uint8_t {
  none = 0,
  unsignaled = 1,
  delivered = 2,
  fence = 4,
};
constexpr op_options operator|(op_options a, op_options b) noexcept {
  return static_cast<op_options>(static_cast<std::uint8_t>(a) | static_cast<std::uint8_t>(b));
}
constexpr op_options operator&(op_options a, op_options b) noexcept {
  return static_cast<op_options>(static_cast<std::uint8_t>(a) & static_cast<std::uint8_t>(b));
}
constexpr bool has(op_options set, op_options bit) noexcept { return (set & bit) == bit && bit != op_options::none; }

struct operation {
  fabrix::opcode code = opcode::write;
  // The local side: `local`, or the slices of `gather` when it is not empty
  // (scatter-gather; `gather` must stay alive until the post call returns).
  local_slice local{};
  std::span<const local_slice> gather{};
  remote_slice remote{};
  std::uint64_t token = 0;
  std::uint64_t operand = 0;  // fetch_add: addend; compare_swap: value to swap in
  std::uint64_t compare = 0;  // compare_swap: expected value
  std::uint32_t imm = 0;      // write_with_imm
  std::uint8_t flags = 0;     // internal routing bits (completion::flags); leave zero
  op_options options = op_options::none;

  std::span<const local_slice> locals() const noexcept {
    return gather.empty() ? std::span<const local_slice>(&local, 1) : gather;
  }
  std::uint64_t local_bytes() const noexcept {
    if (gather.empty()) return local.length;
    std::uint64_t n = 0;
    for (const auto& s : locals()) n += s.length;
    return n;
  }
};

// Factories for batches: `ops.push_back(fabrix::op::write(src, dst, 7));`
namespace op {
inline operation write(const local_slice& src, remote_slice dst, std::uint64_t token,
                       op_options opts = op_options::none) {
  return {.code = opcode::write, .local = src, .remote = dst, .token = token, .options = opts};
}
inline operation write(std::span<const local_slice> src, remote_slice dst, std::uint64_t token,
                       op_options opts = op_options::none) {
  return {.code = opcode::write, .gather = src, .remote = dst, .token = token, .options = opts};
}
inline operation read(const local_slice& dst, remote_slice src, std::uint64_t token,
                      op_options opts = op_options::none) {
  return {.code = opcode::read, .local = dst, .remote = src, .token = token, .options = opts};
}
inline operation read(std::span<const local_slice> dst, remote_slice src, std::uint64_t token,
                      op_options opts = op_options::none) {
  return {.code = opcode::read, .gather = dst, .remote = src, .token = token, .options = opts};
}
inline operation write_with_imm(const local_slice& src, remote_slice dst, std::uint32_t imm, std::uint64_t token,
                                op_options opts = op_options::none) {
  return {.code = opcode::write_with_imm, .local = src, .remote = dst, .token = token, .imm = imm, .options = opts};
}
inline operation fetch_add(const local_slice& result8, remote_slice target8, std::uint64_t add, std::uint64_t token,
                           op_options opts = op_options::none) {
  return {
      .code = opcode::fetch_add, .local = result8, .remote = target8, .token = token, .operand = add, .options = opts};
}
inline operation compare_swap(const local_slice& result8, remote_slice target8, std::uint64_t expected,
                              std::uint64_t desired, std::uint64_t token, op_options opts = op_options::none) {
  return {.code = opcode::compare_swap,
          .local = result8,
          .remote = target8,
          .token = token,
          .operand = desired,
          .compare = expected,
          .options = opts};
}
inline operation send(const local_slice& src, std::uint64_t token, op_options opts = op_options::none) {
  return {.code = opcode::send, .local = src, .token = token, .options = opts};
}
inline operation recv(const local_slice& dst, std::uint64_t token) {
  return {.code = opcode::recv, .local = dst, .token = token};
}
inline operation flush(std::uint64_t token) { return {.code = opcode::flush, .token = token}; }
}  // namespace op

}  // namespace fabrix
