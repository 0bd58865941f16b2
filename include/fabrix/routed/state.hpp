// The state of a routed domain (routed.hpp): its provider domains, its
// identity, and the joins that make one flush out of several.
//
// Lifetime: owned by the routed domain_impl on the heap; endpoints and
// regions point into it and are destroyed before it (the core keeps the
// domain alive while they live). Threading: as its domain.
#pragma once

#include <fabrix/any_provider.hpp>
#include <fabrix/detail/domain_identity.hpp>
#include <fabrix/detail/slot_pool.hpp>
#include <fabrix/routed/address.hpp>
#include <fabrix/routed/config.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fabrix::detail {

// completion::flags bit of the flushes a routed endpoint posts on its
// providers' endpoints for one user flush: token is a routed_join*.
inline constexpr std::uint8_t flag_routed = 0x20;

inline constexpr std::uint8_t class_bit(route_class c) noexcept {
  return static_cast<std::uint8_t>(1u << static_cast<unsigned>(c));
}

struct routed_sub {
  route_choice choice;
  std::uint8_t classes = 0;  // class_bit per route_class it serves
  std::optional<any_provider::domain_impl> dom;
};

// One user flush spread over several provider endpoints: completes, with
// the user's token and flags and the first error, when all of them have.
// An abandoned join (its user flush was refused after part of it was
// posted) completes nothing.
struct routed_join {
  std::uint64_t token = 0;
  std::uint8_t flags = 0;
  std::uint8_t remaining = 0;
  bool abandoned = false;
  status result = status::ok;
  std::int32_t native_code = 0;
  routed_join* next_free = nullptr;
};

struct routed_state {
  static constexpr std::size_t join_capacity = 1024;

  std::vector<routed_sub> subs;  // at most routed_max_subs
  std::array<int, route_classes> class_sub{-1, -1, -1};
  domain_identity id = draw_domain_identity();
  std::uint64_t node = 0;
  std::uint64_t next_epoch = 1;
  std::size_t poll_start = 0;  // the sub polled first, rotating
  slot_pool<routed_join> joins{join_capacity};

  const routed_sub* sub_of(route_class c) const noexcept {
    const int i = class_sub[static_cast<std::size_t>(c)];
    return i < 0 ? nullptr : &subs[static_cast<std::size_t>(i)];
  }

  // A provider completion of a join's flush: the user's completion into
  // `out` when it was the last, true then.
  bool finish_join(const completion& c, completion& out) noexcept {
    auto* j = reinterpret_cast<routed_join*>(c.token);
    if (c.status != status::ok && j->result == status::ok) {
      j->result = c.status;
      j->native_code = c.native_code;
    }
    if (--j->remaining != 0) return false;
    const bool report = !j->abandoned;
    if (report) {
      out = completion{};
      out.token = j->token;
      out.flags = j->flags;
      out.op = opcode::flush;
      out.status = j->result;
      out.native_code = j->native_code;
    }
    joins.give_back(j);
    return report;
  }
};

// A registration in every provider domain that takes the memory; the
// routed region's descriptor() is this object (stable on the heap), from
// which an endpoint finds the provider's registration for its route.
struct routed_region_state {
  std::array<std::optional<any_provider::region_impl>, routed_max_subs> subs;
  remote_buffer remote;
};

}  // namespace fabrix::detail
