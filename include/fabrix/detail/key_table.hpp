// A domain's key table: which of its registrations are alive, readable by
// its peers on the same node, so that an operation through the remote_buffer
// of a deregistered region is refused by the initiator before the transport
// sees it. Provider-independent; the providers say how the slot travels and
// when a table is consulted (ofi: key.hpp and post.hpp; ucx: state.hpp and
// post.hpp).
//
// Why: the transport cannot be trusted to answer a stale key itself. ofi:
// neither tested libfabric provider does so in a way that leaves the queue
// pair usable (shm 1.17's target drops the operation without a response;
// tcp 1.17's target shuts the connection down). ucx: memory UCX allocated
// in a shared-memory segment is written directly by peers that map it, and
// after deregistration the segment lives on in their mappings.
//
// How: a shared-memory object "/fabrix_<pid>_<nonce>_keys" (mode 0600) of
// key_table_slots 8-byte entries. A registration takes a slot and stores its
// remote_buffer epoch there; deregistration stores 0 before the transport
// forgets the region. The slot travels sealed in the remote_buffer (where is
// the provider's choice). A peer on this node maps the table read-only at
// connect and, before an RMA or atomic through a remote_buffer that names a
// slot, loads it (one acquire load): another value than the buffer's epoch
// fails the operation, and nothing is done. Epochs are never reused within a
// domain, so a reused slot never revives an old key. Slot 0 says whether the
// domain is open (1) or closed (0): a region that went away with its whole
// domain is the peer's departure, not a stale key. No table (another node or
// user, shm_open failed, table full): the provider's own behaviour (README).
//
// After the epochs, each slot has the extent its registration covers
// (key_extent: address, length, rights), written before the epoch is
// stored. Paths that reach a peer's memory without the peer's own check
// (UCX's direct copies and CMA) take a remote_buffer only where the owner's
// extent covers what it claims: every member of a job knows every peer's
// seal secret, so a sealed remote_buffer alone does not bound the range.
//
// Slot 1 is the domain's access board (access_board.hpp): while it reaches a
// peer's memory by a system call of its own (UCX: CMA), it holds that peer
// domain's nonce there, so the peer can wait for it before it lets the memory
// go.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fabrix::detail {

inline constexpr std::uint32_t key_table_slots = 1u << 16;
inline constexpr std::uint32_t key_table_no_slot = 0xffffffffu;  // key_table::take: no table, or it is full

// What a registration covers, as its owner registered it: the bytes
// [address, address + length) and its rights (fabrix::access bits).
struct key_extent {
  std::uint64_t address = 0;
  std::uint64_t length = 0;
  std::uint64_t rights = 0;

  // Whether [address, address + length) lies inside and `rights` are among
  // the extent's.
  bool covers(std::uint64_t a, std::uint64_t n, std::uint64_t r) const noexcept {
    return a >= address && n <= length && a - address <= length - n && (rights & r) == r;
  }
};
inline constexpr std::size_t key_table_extent_words = sizeof(key_extent) / sizeof(std::uint64_t);
inline constexpr std::size_t key_table_bytes = key_table_slots * sizeof(std::uint64_t) * (1 + key_table_extent_words);

inline std::string key_table_name(std::uint32_t pid, std::uint64_t nonce) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "/fabrix_%u_%016llx_keys", static_cast<unsigned>(pid),
                static_cast<unsigned long long>(nonce));
  return buf;
}

// A mapping of a key table (ours read-write, a peer's read-only).
class key_table_map {
 public:
  key_table_map() = default;
  key_table_map(key_table_map&& o) noexcept : entries_(std::exchange(o.entries_, nullptr)), owner_uid_(o.owner_uid_) {}
  key_table_map& operator=(key_table_map&& o) noexcept {
    if (this != &o) {
      unmap();
      entries_ = std::exchange(o.entries_, nullptr);
      owner_uid_ = o.owner_uid_;
    }
    return *this;
  }
  ~key_table_map() { unmap(); }

  // Maps the table `name`; an empty map when it cannot be opened.
  static key_table_map open(const std::string& name, bool create) {
    key_table_map m;
    const int fd =
        create ? ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600) : ::shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) return m;
    if (create && ::ftruncate(fd, static_cast<off_t>(key_table_bytes)) != 0) {
      ::close(fd);
      ::shm_unlink(name.c_str());
      return m;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != key_table_bytes) {
      ::close(fd);
      return m;
    }
    void* p = ::mmap(nullptr, key_table_bytes, create ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p != MAP_FAILED) m.entries_ = static_cast<std::uint64_t*>(p);
    m.owner_uid_ = st.st_uid;
    return m;
  }

  bool mapped() const noexcept { return entries_ != nullptr; }
  // The user owning the table's object (a peer's: who made it).
  uid_t owner_uid() const noexcept { return owner_uid_; }
  // The epoch of the registration alive in `slot`, 0 for none.
  std::uint64_t load(std::uint32_t slot) const noexcept {
    return std::atomic_ref<std::uint64_t>(entries_[slot]).load(std::memory_order_acquire);
  }
  void store(std::uint32_t slot, std::uint64_t epoch) noexcept {
    std::atomic_ref<std::uint64_t>(entries_[slot]).store(epoch, std::memory_order_release);
  }
  // The same, sequentially consistent: the access board's two halves each
  // store one word and then load the other side's (access_board.hpp), which
  // acquire/release alone does not order.
  std::uint64_t load_seq_cst(std::uint32_t slot) const noexcept {
    return std::atomic_ref<std::uint64_t>(entries_[slot]).load(std::memory_order_seq_cst);
  }
  void store_seq_cst(std::uint32_t slot, std::uint64_t value) noexcept {
    std::atomic_ref<std::uint64_t>(entries_[slot]).store(value, std::memory_order_seq_cst);
  }
  // The extent of `slot`'s registration. Meaningful only between two loads
  // of the slot that both return the registration's epoch (epochs are never
  // reused, and the owner writes the extent before it stores the epoch).
  key_extent extent(std::uint32_t slot) const noexcept {
    std::uint64_t* w = extent_words(slot);
    return {std::atomic_ref<std::uint64_t>(w[0]).load(std::memory_order_relaxed),
            std::atomic_ref<std::uint64_t>(w[1]).load(std::memory_order_relaxed),
            std::atomic_ref<std::uint64_t>(w[2]).load(std::memory_order_relaxed)};
  }
  void set_extent(std::uint32_t slot, const key_extent& e) noexcept {
    std::uint64_t* w = extent_words(slot);
    std::atomic_ref<std::uint64_t>(w[0]).store(e.address, std::memory_order_relaxed);
    std::atomic_ref<std::uint64_t>(w[1]).store(e.length, std::memory_order_relaxed);
    std::atomic_ref<std::uint64_t>(w[2]).store(e.rights, std::memory_order_relaxed);
  }

 private:
  void unmap() noexcept {
    if (entries_) ::munmap(entries_, key_table_bytes);
    entries_ = nullptr;
  }
  std::uint64_t* extent_words(std::uint32_t slot) const noexcept {
    return entries_ + key_table_slots + static_cast<std::size_t>(slot) * key_table_extent_words;
  }
  std::uint64_t* entries_ = nullptr;
  uid_t owner_uid_ = static_cast<uid_t>(-1);
};

// Whether the owner of `table` has a live registration with `epoch` in
// `slot` whose extent covers [address, address + length) with `rights`.
// False when it does not — and when the slot no longer holds the epoch (the
// extent read may then be another registration's; the caller's per-operation
// epoch check refuses such a region anyway).
inline bool extent_confirms(const key_table_map& table, std::uint32_t slot, std::uint64_t epoch, std::uint64_t address,
                            std::uint64_t length, std::uint64_t rights) noexcept {
  if (!table.mapped() || slot >= key_table_slots || table.load(slot) != epoch) return false;
  const key_extent e = table.extent(slot);
  return table.load(slot) == epoch && e.covers(address, length, rights);
}

inline constexpr std::uint32_t key_table_open_slot = 0;   // 1 while the domain is open
inline constexpr std::uint32_t key_table_board_slot = 1;  // access_board.hpp

// The rule of the paths that reach a peer's memory without the peer's own
// check (UCX's direct copies and CMA, ofi shm's local reads), applied once
// when a remote_buffer is first used or imported: whether its claim
// [address, address + length) with `rights`, through the registration of
// `epoch` in `slot`, may take such a path. False without a table or slot
// (the path is not taken). True when the slot no longer holds the epoch: no
// extent can be checked, and every operation on the region is refused
// stale by its per-operation epoch check anyway (epochs are never reused).
// Otherwise whether the owner's extent covers the claim (extent_confirms).
inline bool confirms_claim(const key_table_map& table, std::uint32_t slot, std::uint64_t epoch, std::uint64_t address,
                           std::uint64_t length, std::uint64_t rights) noexcept {
  if (!table.mapped() || slot <= key_table_board_slot || slot >= key_table_slots) return false;
  return table.load(slot) != epoch || extent_confirms(table, slot, epoch, address, length, rights);
}

// This domain's own table and its free slots.
struct key_table {
  key_table_map map;
  std::string name;                                     // unlinked when the domain closes
  std::uint32_t next_fresh = key_table_board_slot + 1;  // the slots before are the domain's own
  std::vector<std::uint32_t> free_slots;

  key_table() = default;
  key_table(const key_table&) = delete;
  key_table& operator=(const key_table&) = delete;
  ~key_table() {
    if (!map.mapped()) return;
    map.store(key_table_open_slot, 0);  // closed: peers that still hold the mapping see it
    ::shm_unlink(name.c_str());
  }
  void opened() {
    if (map.mapped()) map.store(key_table_open_slot, 1);
  }

  // A slot holding `epoch` and `extent` (what the registration covers), or
  // key_table_no_slot when there is no table or it is full.
  std::uint32_t take(std::uint64_t epoch, const key_extent& extent) {
    if (!map.mapped()) return key_table_no_slot;
    std::uint32_t slot;
    if (!free_slots.empty()) {
      slot = free_slots.back();
      free_slots.pop_back();
    } else if (next_fresh < key_table_slots) {
      slot = next_fresh++;
    } else {
      return key_table_no_slot;
    }
    map.set_extent(slot, extent);
    map.store(slot, epoch);  // release: the extent is seen with the epoch
    return slot;
  }
  // The registration in `slot` is gone: peers refuse its key from now on
  // (sequentially consistent: see access_board.hpp).
  void release(std::uint32_t slot) {
    if (!map.mapped() || slot <= key_table_board_slot || slot >= key_table_slots) return;
    map.store_seq_cst(slot, 0);
    free_slots.push_back(slot);
  }
};

// Calls f(name, pid, nonce, rest) for every shared-memory object
// "fabrix_<pid>_<16 hex digits><rest>" in /dev/shm (key tables, ofi's shm
// regions; `name` without the leading slash).
template <class F>
void each_fabrix_shm_object(F&& f) {
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return;
  while (const dirent* e = ::readdir(dir)) {
    int pid = 0;
    char hex[17] = {};
    int end = 0;
    if (std::sscanf(e->d_name, "fabrix_%d_%16[0-9a-f]%n", &pid, hex, &end) != 2 || std::strlen(hex) != 16 || pid <= 0)
      continue;
    f(std::string_view(e->d_name), static_cast<std::uint32_t>(pid), std::strtoull(hex, nullptr, 16),
      std::string_view(e->d_name + end));
  }
  ::closedir(dir);
}

// Removes shared-memory objects "fabrix_<pid>_<16 hex digits>..." (key
// tables, ofi's shm regions) of this user whose process is gone: a process
// that ends without closing its domain (killed, or _Exit) leaves them behind.
inline void remove_stale_shm_regions() {
  const uid_t me = ::geteuid();
  each_fabrix_shm_object([me](std::string_view name, std::uint32_t pid, std::uint64_t, std::string_view) {
    struct stat st {};
    const std::string path = "/dev/shm/" + std::string(name);
    if (::stat(path.c_str(), &st) != 0 || st.st_uid != me) return;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)
      return;  // its process still runs (or is not ours to judge)
    ::shm_unlink(std::string(name).c_str());
  });
}

}  // namespace fabrix::detail
