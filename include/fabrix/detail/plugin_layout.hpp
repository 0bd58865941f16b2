// The plugin ABI's value conversions, shared by the host's adapter
// (plugin_domain.hpp) and the plugin's exporter (plugin_export.hpp).
//
// local_slice, remote_buffer and completion cross without copies: the C
// mirrors in provider_abi.h have their exact layout, which the static_asserts
// below check on whichever side includes this (a plugin built with another
// compiler or other flags is checked by its own build). Arrays of them are
// passed as pointers, cast on one side and cast back on the other: the
// objects behind them are always of the C++ type. Everything else is
// converted field by field, into the caller's storage (no allocation).
#pragma once

#include <fabrix/provider_abi.h>
#include <fabrix/capabilities.hpp>
#include <fabrix/completion.hpp>
#include <fabrix/domain_options.hpp>
#include <fabrix/error.hpp>
#include <fabrix/local_slice.hpp>
#include <fabrix/operation.hpp>
#include <fabrix/remote_buffer.hpp>
#include <fabrix/remote_key.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <string_view>
#include <type_traits>

namespace fabrix::detail::plugin_abi {

// --- numbers ---------------------------------------------------------------
static_assert(FABRIX_STATUS_OK == static_cast<int>(status::ok));
static_assert(FABRIX_STATUS_AGAIN == static_cast<int>(status::again));
static_assert(FABRIX_STATUS_INVALID_ARGUMENT == static_cast<int>(status::invalid_argument));
static_assert(FABRIX_STATUS_UNSUPPORTED == static_cast<int>(status::unsupported));
static_assert(FABRIX_STATUS_TRUNCATED == static_cast<int>(status::truncated));
static_assert(FABRIX_STATUS_PROVIDER_ERROR == static_cast<int>(status::provider_error));
static_assert(FABRIX_STATUS_STALE_KEY == static_cast<int>(status::stale_key));
static_assert(FABRIX_OP_FLUSH == static_cast<int>(opcode::flush));
static_assert(FABRIX_OP_REMOTE_WRITE_IMM == static_cast<int>(opcode::remote_write_imm));
static_assert(FABRIX_OPTION_UNSIGNALED == static_cast<int>(op_options::unsignaled));
static_assert(FABRIX_OPTION_DELIVERED == static_cast<int>(op_options::delivered));
static_assert(FABRIX_OPTION_FENCE == static_cast<int>(op_options::fence));
static_assert(FABRIX_ACCESS_REMOTE_READ == static_cast<int>(access::remote_read));
static_assert(FABRIX_ACCESS_REMOTE_WRITE == static_cast<int>(access::remote_write));
static_assert(FABRIX_ACCESS_REMOTE_ATOMIC == static_cast<int>(access::remote_atomic));
static_assert(FABRIX_MEMORY_CUDA_DEVICE == static_cast<int>(memory_kind::cuda_device));
static_assert(FABRIX_GPU_DIRECT == static_cast<int>(gpu_path::direct));
static_assert(FABRIX_MAX_KEY_SIZE == remote_buffer::max_key_size);

// --- layouts of the types that cross uncopied --------------------------------
#define FABRIX_SAME_FIELD(C, CXX, c_field, cxx_field) \
  static_assert(offsetof(C, c_field) == offsetof(CXX, cxx_field) && sizeof(C::c_field) == sizeof(CXX::cxx_field))

static_assert(std::is_standard_layout_v<local_slice> && sizeof(fabrix_local_slice) == sizeof(local_slice));
FABRIX_SAME_FIELD(fabrix_local_slice, local_slice, address, address);
FABRIX_SAME_FIELD(fabrix_local_slice, local_slice, length, length);
FABRIX_SAME_FIELD(fabrix_local_slice, local_slice, descriptor, descriptor);
FABRIX_SAME_FIELD(fabrix_local_slice, local_slice, owner, owner);
static_assert(offsetof(fabrix_local_slice, kind) == offsetof(local_slice, location) + offsetof(memory_location, kind));
static_assert(offsetof(fabrix_local_slice, device) ==
              offsetof(local_slice, location) + offsetof(memory_location, device));

static_assert(std::is_standard_layout_v<remote_buffer> && sizeof(fabrix_remote_buffer) == sizeof(remote_buffer));
FABRIX_SAME_FIELD(fabrix_remote_buffer, remote_buffer, provider, provider);
FABRIX_SAME_FIELD(fabrix_remote_buffer, remote_buffer, rights, rights);
static_assert(offsetof(fabrix_remote_buffer, kind) ==
              offsetof(remote_buffer, location) + offsetof(memory_location, kind));
static_assert(offsetof(fabrix_remote_buffer, device) ==
              offsetof(remote_buffer, location) + offsetof(memory_location, device));
FABRIX_SAME_FIELD(fabrix_remote_buffer, remote_buffer, address, address);
FABRIX_SAME_FIELD(fabrix_remote_buffer, remote_buffer, length, length);
FABRIX_SAME_FIELD(fabrix_remote_buffer, remote_buffer, owner, owner);
FABRIX_SAME_FIELD(fabrix_remote_buffer, remote_buffer, epoch, epoch);
FABRIX_SAME_FIELD(fabrix_remote_buffer, remote_buffer, seal, seal);
FABRIX_SAME_FIELD(fabrix_remote_buffer, remote_buffer, key_size, key_size);
FABRIX_SAME_FIELD(fabrix_remote_buffer, remote_buffer, key, key);

static_assert(std::is_standard_layout_v<completion> && sizeof(fabrix_completion) == sizeof(completion));
FABRIX_SAME_FIELD(fabrix_completion, completion, token, token);
FABRIX_SAME_FIELD(fabrix_completion, completion, bytes, bytes);
FABRIX_SAME_FIELD(fabrix_completion, completion, status, status);
FABRIX_SAME_FIELD(fabrix_completion, completion, op, op);
FABRIX_SAME_FIELD(fabrix_completion, completion, flags, flags);
FABRIX_SAME_FIELD(fabrix_completion, completion, imm, imm);
FABRIX_SAME_FIELD(fabrix_completion, completion, native_code, native_code);
FABRIX_SAME_FIELD(fabrix_completion, completion, peer, peer);
#undef FABRIX_SAME_FIELD

inline const fabrix_local_slice* to_c(const local_slice* s) noexcept {
  return reinterpret_cast<const fabrix_local_slice*>(s);
}
inline const local_slice* from_c(const fabrix_local_slice* s) noexcept {
  return reinterpret_cast<const local_slice*>(s);
}
inline const fabrix_remote_buffer* to_c(const remote_buffer* b) noexcept {
  return reinterpret_cast<const fabrix_remote_buffer*>(b);
}
inline const remote_buffer* from_c(const fabrix_remote_buffer* b) noexcept {
  return reinterpret_cast<const remote_buffer*>(b);
}
inline fabrix_completion* to_c(completion* c) noexcept { return reinterpret_cast<fabrix_completion*>(c); }
inline completion* from_c(fabrix_completion* c) noexcept { return reinterpret_cast<completion*>(c); }

// Copies a remote_buffer the other side wrote into its C mirror.
inline void copy_remote(const fabrix_remote_buffer& from, remote_buffer& to) noexcept {
  std::memcpy(static_cast<void*>(&to), &from, sizeof(to));
}
inline void copy_remote(const remote_buffer& from, fabrix_remote_buffer& to) noexcept {
  std::memcpy(&to, &from, sizeof(to));
}

// --- field by field ----------------------------------------------------------
inline fabrix_capabilities to_c(const capabilities& c) noexcept {
  fabrix_capabilities out{};
  out.rma = c.rma;
  out.write_with_imm = c.write_with_imm;
  out.atomics = c.atomics;
  out.send_recv = c.send_recv;
  out.gpu = static_cast<std::uint8_t>(c.gpu);
  out.needs_target_progress = c.needs_target_progress;
  out.max_sge = c.max_sge;
  return out;
}
inline capabilities from_c(const fabrix_capabilities& c) noexcept {
  capabilities out;
  out.rma = c.rma != 0;
  out.write_with_imm = c.write_with_imm != 0;
  out.atomics = c.atomics != 0;
  out.send_recv = c.send_recv != 0;
  out.gpu = c.gpu <= FABRIX_GPU_DIRECT ? static_cast<gpu_path>(c.gpu) : gpu_path::none;
  out.needs_target_progress = c.needs_target_progress != 0;
  out.max_sge = c.max_sge;
  return out;
}

// The strings point into `o`: valid while it is.
inline fabrix_domain_options to_c(const domain_options& o) noexcept {
  fabrix_domain_options out{};
  out.provider = o.provider.c_str();
  out.transport = o.transport.c_str();
  out.device = o.device.c_str();
  out.max_outstanding = o.max_outstanding;
  out.max_posted_recvs = o.max_posted_recvs;
  out.wakeup = o.wakeup ? 1 : 0;
  return out;
}
inline domain_options from_c(const fabrix_domain_options& o) {
  domain_options out;
  out.provider = o.provider != nullptr ? o.provider : "";
  out.transport = o.transport != nullptr ? o.transport : "";
  out.device = o.device != nullptr ? o.device : "";
  out.max_outstanding = static_cast<std::size_t>(o.max_outstanding);
  out.max_posted_recvs = static_cast<std::size_t>(o.max_posted_recvs);
  out.wakeup = o.wakeup != 0;
  return out;
}

// One operation into its C form; `locals` keeps pointing at `o`'s slices.
inline void to_c(const operation& o, fabrix_operation& out) noexcept {
  out.code = static_cast<std::uint8_t>(o.code);
  out.options = static_cast<std::uint8_t>(o.options);
  out.flags = o.flags;
  out.reserved = 0;
  out.imm = o.imm;
  out.token = o.token;
  out.operand = o.operand;
  out.compare = o.compare;
  const auto locals = o.locals();
  out.locals = to_c(locals.data());
  out.local_count = locals.size();
  fabrix_remote_slice& r = out.remote;
  r = fabrix_remote_slice{};
  r.buffer = to_c(o.remote.buffer);
  r.offset = o.remote.offset;
  r.length = o.remote.length;
  if (const remote_key* k = o.remote.key) {
    r.key_ref = {k->ref.index, k->ref.generation};
    r.key_address = k->address;
    r.key_length = k->length;
    r.key_rights = static_cast<std::uint32_t>(k->rights);
    r.key_provider = static_cast<std::uint16_t>(k->provider);
    r.key_kind = static_cast<std::uint8_t>(k->location.kind);
    r.key_device = k->location.device;
  }
}

// One C operation back into an operation. An imported key is rebuilt in
// the raw storage at `key_slot` (sizeof and alignof remote_key), which must
// outlive the post call that uses the operation. The key's importer is 0:
// the host's queue pair has checked it.
inline operation from_c(const fabrix_operation& o, void* key_slot) noexcept {
  operation out;
  out.code = static_cast<opcode>(o.code);
  out.options = static_cast<op_options>(o.options);
  out.flags = o.flags;
  out.imm = o.imm;
  out.token = o.token;
  out.operand = o.operand;
  out.compare = o.compare;
  if (o.local_count == 1)
    out.local = *from_c(o.locals);
  else if (o.local_count > 1)
    out.gather = std::span<const local_slice>(from_c(o.locals), static_cast<std::size_t>(o.local_count));
  const fabrix_remote_slice& r = o.remote;
  out.remote.offset = r.offset;
  out.remote.length = r.length;
  if (r.buffer != nullptr) {
    out.remote.buffer = from_c(r.buffer);
  } else if (r.key_ref.generation != 0) {
    auto* key = ::new (key_slot) remote_key;
    key->provider = static_cast<provider_id>(r.key_provider);
    key->rights = static_cast<access>(r.key_rights);
    key->location = memory_location{static_cast<memory_kind>(r.key_kind), r.key_device};
    key->address = r.key_address;
    key->length = r.key_length;
    key->ref = import_ref{r.key_ref.index, r.key_ref.generation};
    out.remote.key = key;
  }
  return out;
}

// A status number a plugin returned, as a status; a number fabrix does not
// know (a plugin of a later ABI, or a bug) reads as provider_error.
constexpr status status_from_plugin(std::int32_t code) noexcept {
  return code >= FABRIX_STATUS_OK && code <= FABRIX_STATUS_STALE_KEY ? static_cast<status>(code)
                                                                     : status::provider_error;
}

// Fills a C error from an error (message truncated to fit, NUL-terminated).
inline std::int32_t fail(fabrix_error* out, status code, std::string_view message, long native = 0) noexcept {
  if (out != nullptr) {
    out->status = static_cast<std::int32_t>(code);
    out->native_code = native;
    const std::size_t n = message.size() < sizeof(out->message) - 1 ? message.size() : sizeof(out->message) - 1;
    std::memcpy(out->message, message.data(), n);
    out->message[n] = '\0';
  }
  return static_cast<std::int32_t>(code);
}
inline std::int32_t fail(fabrix_error* out, const error& e) noexcept {
  return fail(out, e.code, e.message, e.native_code);
}

}  // namespace fabrix::detail::plugin_abi
