// Choosing a GID: which entry of a port's GID table a queue pair uses as its
// source address. Device-free (unit-tested on made-up tables).
//
// Ranking, best first: RoCE v2 with an IPv4-mapped address, RoCE v2 with a
// global IPv6 address, RoCE v2 link-local, then RoCE v1 (IPv4, then IPv6),
// then InfiniBand. All-zero (unused) entries are never chosen. Ties go to the
// lowest index. FABRIX_VERBS_GID_INDEX overrides the choice.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace fabrix::verbs::detail {

enum class gid_kind : std::uint8_t { ib, roce_v1, roce_v2 };

struct gid_entry {
  std::uint32_t index = 0;
  gid_kind kind = gid_kind::ib;
  std::array<std::uint8_t, 16> raw{};
};

inline bool is_zero(const std::array<std::uint8_t, 16>& g) noexcept {
  for (auto b : g)
    if (b) return false;
  return true;
}
// ::ffff:a.b.c.d
inline bool is_ipv4_mapped(const std::array<std::uint8_t, 16>& g) noexcept {
  for (int i = 0; i < 10; ++i)
    if (g[i]) return false;
  return g[10] == 0xff && g[11] == 0xff;
}
inline bool is_link_local(const std::array<std::uint8_t, 16>& g) noexcept {
  return g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
}

// Higher is better; negative means unusable.
inline int gid_rank(const gid_entry& e) noexcept {
  if (is_zero(e.raw)) return -1;
  switch (e.kind) {
    case gid_kind::roce_v2: return is_ipv4_mapped(e.raw) ? 60 : is_link_local(e.raw) ? 40 : 50;
    case gid_kind::roce_v1: return is_ipv4_mapped(e.raw) ? 30 : 20;
    case gid_kind::ib: return 10;
  }
  return -1;
}

// The position in `table` of the best entry, or nothing when none is usable.
inline std::optional<std::size_t> choose_gid(std::span<const gid_entry> table) noexcept {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < table.size(); ++i) {
    const int r = gid_rank(table[i]);
    if (r < 0) continue;
    if (!best || r > gid_rank(table[*best]) || (r == gid_rank(table[*best]) && table[i].index < table[*best].index))
      best = i;
  }
  return best;
}

// The text of sysfs ports/<p>/gid_attrs/types/<i>: "RoCE v2", "IB/RoCE v1"
// (the kernel's name for v1 on Ethernet and for IB). Nothing for other text.
inline std::optional<gid_kind> parse_sysfs_gid_type(std::string_view text, bool ethernet) noexcept {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text == "RoCE v2") return gid_kind::roce_v2;
  if (text == "IB/RoCE v1") return ethernet ? gid_kind::roce_v1 : gid_kind::ib;
  return std::nullopt;
}

inline std::string_view to_string(gid_kind k) noexcept {
  switch (k) {
    case gid_kind::ib: return "IB";
    case gid_kind::roce_v1: return "RoCE v1";
    case gid_kind::roce_v2: return "RoCE v2";
  }
  return "?";
}

// Text form: dotted IPv4 for mapped addresses, else eight hex groups.
inline std::string gid_text(const std::array<std::uint8_t, 16>& g) {
  std::string out;
  if (is_ipv4_mapped(g)) {
    for (int i = 12; i < 16; ++i) out += std::to_string(g[i]) + (i < 15 ? "." : "");
    return out;
  }
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < 16; i += 2) {
    if (i) out += ':';
    for (int k = 0; k < 2; ++k) {
      out += hex[g[i + k] >> 4];
      out += hex[g[i + k] & 15];
    }
  }
  return out;
}

}  // namespace fabrix::verbs::detail
