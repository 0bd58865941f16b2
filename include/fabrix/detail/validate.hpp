// The argument checks every provider relies on: done once, in the core,
// before an operation reaches a provider.
#pragma once

#include <fabrix/capabilities.hpp>
#include <fabrix/operation.hpp>
#include <fabrix/remote_key.hpp>

#include <cstdint>

namespace fabrix::detail {

inline bool fits(std::uint64_t offset, std::uint64_t length, std::uint64_t size) noexcept {
  return offset <= size && length <= size - offset;
}

inline access rights_needed(opcode op) noexcept {
  switch (op) {
    case opcode::write:
    case opcode::write_with_imm: return access::remote_write;
    case opcode::read: return access::remote_read;
    case opcode::fetch_add:
    case opcode::compare_swap: return access::remote_atomic;
    default: return access::local;
  }
}

inline bool uses_remote(opcode op) noexcept { return op != opcode::send && op != opcode::recv && op != opcode::flush; }

inline status check_caps(opcode op, const capabilities& caps) noexcept {
  switch (op) {
    case opcode::write:
    case opcode::read: return caps.rma ? status::ok : status::unsupported;
    case opcode::write_with_imm: return caps.write_with_imm ? status::ok : status::unsupported;
    case opcode::fetch_add:
    case opcode::compare_swap: return caps.atomics ? status::ok : status::unsupported;
    case opcode::send:
    case opcode::recv: return caps.send_recv ? status::ok : status::unsupported;
    case opcode::flush: return status::ok;
    case opcode::remote_write_imm: return status::invalid_argument;  // not postable
  }
  return status::invalid_argument;
}

inline bool may_be_unsignaled(opcode op) noexcept { return op != opcode::recv && op != opcode::flush; }
inline bool has_delivery_level(opcode op) noexcept {
  return op == opcode::write || op == opcode::write_with_imm || op == opcode::send;
}

// The options a provider acts on for `o`: its own, plus the queue pair's
// defaults where they apply: unsignaled and delivered only to operations
// that take them; awaited operations stay signaled; a wrapper's own inner
// operations (other internal routing bits) take none; fence is never a
// default. Providers call this once per operation.
inline op_options options_of(const operation& o, op_options defaults) noexcept {
  if (defaults == op_options::none || (o.flags & ~flag_awaited) != 0) return o.options;
  op_options d = op_options::none;
  if (has(defaults, op_options::unsignaled) && may_be_unsignaled(o.code) && o.flags == 0)
    d = d | op_options::unsignaled;
  if (has(defaults, op_options::delivered) && has_delivery_level(o.code)) d = d | op_options::delivered;
  return o.options | d;
}

inline status check_options(const operation& o) noexcept {
  if (has(o.options, op_options::unsignaled) && (!may_be_unsignaled(o.code) || (o.flags & flag_awaited)))
    return status::invalid_argument;
  if (has(o.options, op_options::fence) && o.code == opcode::recv) return status::invalid_argument;
  constexpr auto known = op_options::unsignaled | op_options::delivered | op_options::fence;
  if ((o.options | known) != known) return status::invalid_argument;
  return status::ok;
}

// The remote side of a one-sided operation: a remote_key the queue pair
// `importer` imported (checked once at import: only the range and rights
// here; import ids are process-wide and never reused, so the importer names
// the queue pair, and with it the provider), or a remote_buffer (its seal and
// key are the provider's to check).
// Sets `base` to the peer's address of the region's byte 0.
inline status check_remote(const operation& o, provider_id self, std::uint64_t importer, std::uint64_t& base) noexcept {
  std::uint64_t length = 0;
  access rights = access::local;
  if (const remote_key* k = o.remote.key) {
    if (o.remote.buffer != nullptr || k->importer != importer) return status::invalid_argument;
    base = k->address;
    length = k->length;
    rights = k->rights;
  } else {
    const remote_buffer* rb = o.remote.buffer;
    if (rb == nullptr || rb->provider != self) return status::invalid_argument;
    base = rb->address;
    length = rb->length;
    rights = rb->rights;
  }
  if (!fits(o.remote.offset, o.remote.length, length)) return status::out_of_range;
  if (!allows(rights, rights_needed(o.code))) return status::access_denied;
  return status::ok;
}

// What a queue pair checks its operations against, computed once when it
// is made: the provider `self`, the domain `owner` (never 0; its regions
// alone may supply local slices), the queue pair's `importer` id (whose remote_keys
// alone it takes), the opcodes the provider's capabilities accept (a bit
// per opcode) and its scatter-gather limit.
struct post_rules {
  provider_id self = provider_id::none;
  std::uint64_t owner = 0;
  std::uint64_t importer = 0;
  std::uint32_t accepted = 0;
  std::uint32_t max_sge = 0;

  // write and read, where accepted with one local slice: the opcodes
  // common_shape_ok may pass; send and recv likewise, for message_shape_ok.
  std::uint32_t common = 0;
  std::uint32_t messages = 0;

  post_rules(provider_id self_, std::uint64_t owner_, std::uint64_t importer_, const capabilities& caps) noexcept
      : self(self_), owner(owner_), importer(importer_), max_sge(caps.max_sge) {
    for (auto op : {opcode::write, opcode::read, opcode::write_with_imm, opcode::fetch_add, opcode::compare_swap,
                    opcode::send, opcode::recv, opcode::flush})
      if (check_caps(op, caps) == status::ok) accepted |= bit(op);
    if (max_sge >= 1) {
      common = accepted & (bit(opcode::write) | bit(opcode::read));
      messages = accepted & (bit(opcode::send) | bit(opcode::recv));
    }
  }
  static constexpr std::uint32_t bit(opcode op) noexcept { return 1u << static_cast<unsigned>(op); }
};

// Whether `o` takes no options, or only unsignaled and delivered on an
// operation of the caller's own (no internal flags): the options the quick
// checks pass.
inline bool plain_options(const operation& o) noexcept {
  constexpr auto plain = static_cast<std::uint8_t>(op_options::unsignaled | op_options::delivered);
  return o.options == op_options::none || (o.flags == 0 && (static_cast<std::uint8_t>(o.options) & ~plain) == 0);
}

// Whether `o` is a send or recv of one local slice of the rules' domain
// where the provider takes them, with options at most unsignaled and
// delivered (a send) or none (a recv): what validate_all() passes for
// messages, in a few compares.
inline bool message_shape_ok(const operation& o, const post_rules& rules) noexcept {
  const bool is_send = o.code == opcode::send;
  if (!is_send && o.code != opcode::recv) return false;
  if ((rules.messages & post_rules::bit(o.code)) == 0) return false;
  if (!plain_options(o) || (!is_send && o.options != op_options::none)) return false;
  return o.gather.empty() && o.local.owner == rules.owner;  // owner 0: a refused slice
}

// Whether `o` has the shape most operations have and passes every check
// validate() would make: a write or read of one valid local slice of the
// rules' domain through a remote_key the rules' queue pair imported, in
// range, with the rights, options at most unsignaled and delivered; or a
// message (message_shape_ok). One run of compares, no loop and no switch.
// False says only "not this shape, or not valid": validate_all() then
// decides, and gives the error.
inline bool common_shape_ok(const operation& o, const post_rules& rules) noexcept {
  const bool is_write = o.code == opcode::write;
  if (!is_write && o.code != opcode::read) return message_shape_ok(o, rules);
  if ((rules.common & post_rules::bit(o.code)) == 0) return false;
  if (!plain_options(o)) return false;
  const local_slice& l = o.local;
  const remote_key* k = o.remote.key;
  if (!o.gather.empty() || l.owner != rules.owner) return false;  // owner 0: a refused slice
  if (k == nullptr || o.remote.buffer != nullptr || k->importer != rules.importer) return false;
  return fits(o.remote.offset, o.remote.length, k->length) &&
         allows(k->rights, is_write ? access::remote_write : access::remote_read) && l.length == o.remote.length;
}

// Checks one operation against `rules`, every shape (per operation: a few
// compares; one local slice takes no loop).
// Returns ok, or the error the caller sees: unsupported, invalid_argument
// (foreign provider, domain or queue pair, bad sizes, unaligned atomics,
// options the operation cannot take), out_of_range (a slice
// outside its region), access_denied (rights the remote region lacks).
inline status validate_all(const operation& o, const post_rules& rules) noexcept {
  const auto code = static_cast<unsigned>(o.code);
  if (code > static_cast<unsigned>(opcode::flush)) return status::invalid_argument;  // remote_write_imm or unknown
  if ((rules.accepted & post_rules::bit(o.code)) == 0) return status::unsupported;
  if (o.options != op_options::none)
    if (status s = check_options(o); s != status::ok) return s;
  if (o.code == opcode::flush) return status::ok;

  std::uint64_t bytes = 0;
  if (o.gather.empty()) {
    const local_slice& l = o.local;
    if (rules.max_sge < 1) return status::invalid_argument;
    if (!l.valid()) return status::out_of_range;
    if (l.owner != rules.owner) return status::invalid_argument;  // another domain
    bytes = l.length;
  } else {
    if (o.gather.size() > rules.max_sge) return status::invalid_argument;
    for (const auto& l : o.gather) {
      if (!l.valid()) return status::out_of_range;
      if (l.owner != rules.owner) return status::invalid_argument;
      bytes += l.length;
    }
  }
  if (!uses_remote(o.code)) return status::ok;

  std::uint64_t base = 0;
  if (status s = check_remote(o, rules.self, rules.importer, base); s != status::ok) return s;

  if (o.code == opcode::fetch_add || o.code == opcode::compare_swap) {
    const std::uint64_t raddr = base + o.remote.offset;
    const auto locals = o.locals();
    const auto laddr = reinterpret_cast<std::uintptr_t>(locals[0].address);
    if (locals.size() != 1 || locals[0].length != 8 || o.remote.length != 8) return status::invalid_argument;
    if (raddr % 8 != 0 || laddr % 8 != 0) return status::invalid_argument;
    return status::ok;
  }
  if (bytes != o.remote.length) return status::invalid_argument;
  return status::ok;
}

// What queue_pair::post checks: common_shape_ok first (most operations stop
// there), else every check. Same result as validate_all for every operation.
inline status validate(const operation& o, const post_rules& rules) noexcept {
  return common_shape_ok(o, rules) ? status::ok : validate_all(o, rules);
}

}  // namespace fabrix::detail
