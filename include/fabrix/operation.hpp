// fabrix::operation — one data-path operation as a value, for batched posting
// (queue_pair::post(span<const operation>)) and for the provider contract.
// queue_pair's write()/read()/... build these; users build them with the
// factories in fabrix::op for batches.
#pragma once

#include <fabrix/completion.hpp>
#include <fabrix/local_slice.hpp>
#include <fabrix/remote_buffer.hpp>

#include <cstdint>
#include <span>

namespace fabrix {

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

  std::span<const local_slice> locals() const noexcept {
    return gather.empty() ? std::span<const local_slice>(&local, 1) : gather;
  }
  std::uint64_t local_bytes() const noexcept {
    std::uint64_t n = 0;
    for (const auto& s : locals()) n += s.length;
    return n;
  }
};

// Factories for batches: `ops.push_back(fabrix::op::write(src, dst, 7));`
namespace op {
inline operation write(const local_slice& src, remote_slice dst, std::uint64_t token) {
  return {.code = opcode::write, .local = src, .remote = dst, .token = token};
}
inline operation write(std::span<const local_slice> src, remote_slice dst, std::uint64_t token) {
  return {.code = opcode::write, .gather = src, .remote = dst, .token = token};
}
inline operation read(const local_slice& dst, remote_slice src, std::uint64_t token) {
  return {.code = opcode::read, .local = dst, .remote = src, .token = token};
}
inline operation read(std::span<const local_slice> dst, remote_slice src, std::uint64_t token) {
  return {.code = opcode::read, .gather = dst, .remote = src, .token = token};
}
inline operation write_with_imm(const local_slice& src, remote_slice dst, std::uint32_t imm, std::uint64_t token) {
  return {.code = opcode::write_with_imm, .local = src, .remote = dst, .token = token, .imm = imm};
}
inline operation fetch_add(const local_slice& result8, remote_slice target8, std::uint64_t add, std::uint64_t token) {
  return {.code = opcode::fetch_add, .local = result8, .remote = target8, .token = token, .operand = add};
}
inline operation compare_swap(const local_slice& result8, remote_slice target8, std::uint64_t expected,
                              std::uint64_t desired, std::uint64_t token) {
  return {.code = opcode::compare_swap,
          .local = result8,
          .remote = target8,
          .token = token,
          .operand = desired,
          .compare = expected};
}
inline operation send(const local_slice& src, std::uint64_t token) {
  return {.code = opcode::send, .local = src, .token = token};
}
inline operation recv(const local_slice& dst, std::uint64_t token) {
  return {.code = opcode::recv, .local = dst, .token = token};
}
inline operation flush(std::uint64_t token) { return {.code = opcode::flush, .token = token}; }
}  // namespace op

}  // namespace fabrix
