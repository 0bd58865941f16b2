// The key bytes of a cuda_ipc remote_buffer: how a peer opens the exporter's
// allocation and where the region lies in it. Needs no CUDA headers.
//
// Encoding (version 1, little-endian), remote_buffer::key:
//   "FXCH" u8 version  u8 kind  u16 device  u64 buffer_id  u64 allocation_size
//   u64 offset  u16 handle_size  handle bytes
// kind 1 (legacy): handle = the 64-byte cudaIpcMemHandle_t.
// kind 2 (vmm):    handle = u64 export id; the importer asks the exporter for
//                  the allocation's fd with it (SCM_RIGHTS, see wire.hpp).
// buffer_id is CU_POINTER_ATTRIBUTE_BUFFER_ID of the exporter's allocation:
// unique within the exporting process, so an address that was freed and
// reused gets a new id and never hits a stale cached mapping.
// `offset` is where the region starts in the allocation; decode_handle checks
// that offset + region length fits in allocation_size.
#pragma once

#include <fabrix/detail/little_endian.hpp>
#include <fabrix/remote_buffer.hpp>
#include <fabrix/result.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace fabrix::cuda::ipc {

enum class handle_kind : std::uint8_t { legacy = 1, vmm = 2 };

inline constexpr std::size_t legacy_handle_size = 64;  // sizeof(cudaIpcMemHandle_t)
inline constexpr std::size_t vmm_handle_size = 8;
inline constexpr std::size_t max_handle_size = 64;
inline constexpr std::size_t handle_header = 34;
inline constexpr std::uint8_t handle_version = 1;

struct ipc_handle {
  handle_kind kind = handle_kind::legacy;
  std::uint16_t device = 0;  // the exporter's device ordinal (informational)
  std::uint64_t buffer_id = 0;
  std::uint64_t allocation_size = 0;
  std::uint64_t offset = 0;  // of the region within the allocation
  std::uint16_t handle_size = 0;
  std::array<std::byte, max_handle_size> handle{};

  std::span<const std::byte> handle_bytes() const noexcept { return {handle.data(), handle_size}; }
  std::uint64_t export_id() const noexcept {  // vmm only
    std::uint64_t v = 0;
    if (handle_size == vmm_handle_size) v = fabrix::detail::le_reader(handle.data()).get<std::uint64_t>();
    return v;
  }
  std::size_t encoded_size() const noexcept { return handle_header + handle_size; }
};

inline ipc_handle make_vmm_handle(std::uint16_t device, std::uint64_t buffer_id, std::uint64_t allocation_size,
                                  std::uint64_t offset, std::uint64_t export_id) {
  ipc_handle h{handle_kind::vmm, device, buffer_id, allocation_size, offset, vmm_handle_size, {}};
  fabrix::detail::le_writer(h.handle.data()).put<std::uint64_t>(export_id);
  return h;
}

// Writes the key into `rb.key` / `rb.key_size`.
inline void encode_handle(const ipc_handle& h, remote_buffer& rb) noexcept {
  fabrix::detail::le_writer w(rb.key.data());
  w.put_bytes(reinterpret_cast<const std::byte*>("FXCH"), 4);
  w.put<std::uint8_t>(handle_version);
  w.put<std::uint8_t>(static_cast<std::uint8_t>(h.kind));
  w.put<std::uint16_t>(h.device);
  w.put<std::uint64_t>(h.buffer_id);
  w.put<std::uint64_t>(h.allocation_size);
  w.put<std::uint64_t>(h.offset);
  w.put<std::uint16_t>(h.handle_size);
  w.put_bytes(h.handle.data(), h.handle_size);
  rb.key_size = static_cast<std::uint16_t>(h.encoded_size());
}

// Refuses (invalid_argument) anything but a complete key of this version
// whose region fits its allocation. Never reads outside `key`.
inline result<ipc_handle> decode_handle(std::span<const std::byte> key, std::uint64_t region_length) {
  auto bad = [](const char* why) { return unexpected(status::invalid_argument, why, "cuda_ipc"); };
  if (key.size() < handle_header || std::memcmp(key.data(), "FXCH", 4) != 0) return bad("not a cuda_ipc key");
  fabrix::detail::le_reader r(key.data() + 4);
  if (r.get<std::uint8_t>() != handle_version) return bad("cuda_ipc key of another version");
  ipc_handle h;
  const auto kind = r.get<std::uint8_t>();
  h.device = r.get<std::uint16_t>();
  h.buffer_id = r.get<std::uint64_t>();
  h.allocation_size = r.get<std::uint64_t>();
  h.offset = r.get<std::uint64_t>();
  h.handle_size = r.get<std::uint16_t>();
  if (kind == static_cast<std::uint8_t>(handle_kind::legacy)) {
    if (h.handle_size != legacy_handle_size) return bad("legacy cuda_ipc handle of the wrong size");
  } else if (kind == static_cast<std::uint8_t>(handle_kind::vmm)) {
    if (h.handle_size != vmm_handle_size) return bad("vmm cuda_ipc handle of the wrong size");
  } else {
    return bad("unknown cuda_ipc handle kind");
  }
  h.kind = static_cast<handle_kind>(kind);
  if (key.size() != handle_header + h.handle_size) return bad("cuda_ipc key length does not match its handle");
  if (h.offset > h.allocation_size || region_length > h.allocation_size - h.offset)
    return bad("cuda_ipc region does not fit in its allocation");
  std::memcpy(h.handle.data(), key.data() + handle_header, h.handle_size);
  return h;
}

}  // namespace fabrix::cuda::ipc
