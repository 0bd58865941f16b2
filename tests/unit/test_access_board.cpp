// The access board (fabrix/detail/access_board.hpp): an initiator copies
// into a node-mate's memory by a system call only while the region's
// key-table slot holds its epoch, and a target's release returns only when
// no such copy can still land. The second case is the real race: a forked
// node-mate writes without pause by process_vm_writev while this process
// releases the region, poisons the memory and checks that it stays so.
#include <doctest/doctest.h>
#include <fabrix/detail/access_board.hpp>

#include "child_process.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

using fabrix::detail::board_enter;
using fabrix::detail::board_leave;
using fabrix::detail::board_verdict;
using fabrix::detail::board_watch;
using fabrix::detail::key_table;
using fabrix::detail::key_table_board_slot;
using fabrix::detail::key_table_map;
using fabrix::detail::key_table_open_slot;

namespace {

std::uint64_t fresh_nonce() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ 1;
}

// A domain's own table, as a domain opens it (key_table.hpp).
void open_table(key_table& t, std::uint64_t nonce) {
  t.name = fabrix::detail::key_table_name(static_cast<std::uint32_t>(::getpid()), nonce);
  t.map = key_table_map::open(t.name, true);
  REQUIRE(t.map.mapped());
  t.opened();
}

fabrix::detail::process_identity identity_of(pid_t pid) {
  fabrix::detail::process_identity id;
  id.pid = static_cast<std::uint32_t>(pid);
  char state = 0;
  REQUIRE(fabrix::detail::read_proc_stat(id.pid, state, id.start_time));
  return id;
}

// The byte a node-mate writes with the key of `epoch`: never 0 (the poison).
unsigned char tag_of(std::uint64_t epoch) { return static_cast<unsigned char>((epoch & 0x7f) | 0x80); }

}  // namespace

TEST_CASE("access board: the initiator goes only while the slot holds the epoch, and its board is clear otherwise") {
  key_table target, initiator;
  const std::uint64_t target_nonce = fresh_nonce();
  open_table(target, target_nonce);
  open_table(initiator, fresh_nonce());
  const key_table_map view = key_table_map::open(target.name, false);  // the initiator's read-only mapping
  REQUIRE(view.mapped());
  CHECK(view.owner_uid() == ::geteuid());

  const std::uint64_t epoch = 0x1234;
  const std::uint32_t slot = target.take(epoch, {});
  REQUIRE(slot > key_table_board_slot);  // slots 0 and 1 are the domain's
  CHECK(board_enter(initiator.map, view, target_nonce, slot, epoch) == board_verdict::go);
  CHECK(initiator.map.load(key_table_board_slot) == target_nonce);  // the target sees the copy coming
  board_leave(initiator.map);
  CHECK(initiator.map.load(key_table_board_slot) == 0);

  CHECK(board_enter(initiator.map, view, target_nonce, slot, epoch + 1) == board_verdict::stale);  // another key
  CHECK(initiator.map.load(key_table_board_slot) == 0);
  target.release(slot);
  CHECK(board_enter(initiator.map, view, target_nonce, slot, epoch) == board_verdict::stale);
  CHECK(initiator.map.load(key_table_board_slot) == 0);
  target.map.store(key_table_open_slot, 0);  // the target's domain closed
  CHECK(board_enter(initiator.map, view, target_nonce, slot, epoch) == board_verdict::closed);
  CHECK(initiator.map.load(key_table_board_slot) == 0);
}

TEST_CASE("key table: a slot carries its registration's extent, which confirms only what the owner registered") {
  using fabrix::detail::extent_confirms;
  using fabrix::detail::key_extent;
  key_table target;
  open_table(target, fresh_nonce());
  const key_table_map view = key_table_map::open(target.name, false);
  REQUIRE(view.mapped());
  const std::uint64_t base = 0x7f0000001000, rw = 3, r = 1, w = 2;
  const std::uint64_t epoch = 0x55;
  const std::uint32_t slot = target.take(epoch, key_extent{base, 4096, r});
  REQUIRE(slot > key_table_board_slot);
  CHECK(view.extent(slot).address == base);
  CHECK(view.extent(slot).length == 4096);
  CHECK(extent_confirms(view, slot, epoch, base, 4096, r));        // the whole region
  CHECK(extent_confirms(view, slot, epoch, base + 4000, 96, r));   // its end
  CHECK(extent_confirms(view, slot, epoch, base + 4096, 0, r));    // empty, at its end
  CHECK(!extent_confirms(view, slot, epoch, base + 4000, 97, r));  // one byte past
  CHECK(!extent_confirms(view, slot, epoch, base - 1, 2, r));      // one byte before
  CHECK(!extent_confirms(view, slot, epoch, base, 8192, r));       // a forged length
  CHECK(!extent_confirms(view, slot, epoch, base + 8, ~0ull, r));  // wrapping around
  CHECK(!extent_confirms(view, slot, epoch, base, 8, w));          // a right it lacks
  CHECK(!extent_confirms(view, slot, epoch, base, 8, rw));
  CHECK(!extent_confirms(view, slot, epoch + 1, base, 8, r));  // another registration's key
  target.release(slot);
  CHECK(!extent_confirms(view, slot, epoch, base, 8, r));  // deregistered
  const std::uint32_t again = target.take(epoch + 1, key_extent{base, 64, rw});
  CHECK(again == slot);  // reused: the new registration's extent
  CHECK(extent_confirms(view, slot, epoch + 1, base, 64, w));
  CHECK(!extent_confirms(view, slot, epoch + 1, base, 4096, r));

  // The providers' rule (confirms_claim): no slot, no table: not confirmed;
  // a slot that holds another epoch: let through (every operation on it is
  // refused stale); otherwise the extent decides.
  using fabrix::detail::confirms_claim;
  CHECK(confirms_claim(view, slot, epoch + 1, base, 64, w));
  CHECK(!confirms_claim(view, slot, epoch + 1, base, 65, w));
  CHECK(confirms_claim(view, slot, epoch, base, 1 << 20, rw));  // the old registration's key: stale
  CHECK(!confirms_claim(view, key_table_board_slot, 0, base, 8, r));
  CHECK(!confirms_claim(view, fabrix::detail::key_table_no_slot, epoch + 1, base, 8, r));
  CHECK(!confirms_claim(key_table_map{}, slot, epoch + 1, base, 8, r));
}

TEST_CASE("access board: scan_boards finds every table of this user's domains, and forgets closed ones") {
  std::vector<board_watch> boards;
  std::uint64_t nonce = fresh_nonce();
  {
    key_table t;
    open_table(t, nonce);
    fabrix::detail::scan_boards(boards);
    CHECK(std::count_if(boards.begin(), boards.end(), [&](const board_watch& b) { return b.nonce == nonce; }) == 1);
    fabrix::detail::scan_boards(boards);  // known ones are not added again
    CHECK(std::count_if(boards.begin(), boards.end(), [&](const board_watch& b) { return b.nonce == nonce; }) == 1);
  }  // the domain closes: its table is unlinked
  fabrix::detail::scan_boards(boards);
  CHECK(std::count_if(boards.begin(), boards.end(), [&](const board_watch& b) { return b.nonce == nonce; }) == 0);
}

TEST_CASE("access board: a release waits for a board naming it, but not for a process that is gone") {
  key_table initiator;
  open_table(initiator, fresh_nonce());
  const std::uint64_t target_nonce = fresh_nonce();
  const pid_t child = fxt_child::spawn([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return 0;
  });
  std::vector<board_watch> boards;
  boards.push_back({1, identity_of(child), key_table_map::open(initiator.name, false)});
  REQUIRE(boards[0].map.mapped());

  initiator.map.store(key_table_board_slot, target_nonce + 1);  // busy with another domain: no wait
  fabrix::detail::wait_for_boards(boards, target_nonce);

  // Busy with this target while the process runs: the wait lasts until the
  // board clears.
  initiator.map.store(key_table_board_slot, target_nonce);
  std::thread clearer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    board_leave(initiator.map);
  });
  const auto t0 = std::chrono::steady_clock::now();
  fabrix::detail::wait_for_boards(boards, target_nonce);
  const auto waited = std::chrono::steady_clock::now() - t0;
  clearer.join();
  CHECK(waited >= std::chrono::milliseconds(40));

  // Left busy by a process that then exited: the wait ends when it is gone.
  initiator.map.store(key_table_board_slot, target_nonce);
  CHECK(fxt_child::reap(child, std::chrono::seconds(10)) == 0);
  fabrix::detail::wait_for_boards(boards, target_nonce);
  CHECK(initiator.map.load(key_table_board_slot) == target_nonce);
}

TEST_CASE("access board: no copy of a node-mate writing without pause lands after the release returned") {
  key_table target, initiator;
  const std::uint64_t target_nonce = fresh_nonce(), initiator_nonce = fresh_nonce();
  open_table(target, target_nonce);
  open_table(initiator, initiator_nonce);
  // A word the target uses to tell the node-mate which key it holds (an
  // epoch; ~0: stop), as a remote_buffer would, and the region's slot.
  const std::uint32_t announce = target.take(0, {});
  std::uint32_t slot = target.take(0, {});
  std::vector<unsigned char> memory(64 * 1024, 0);  // the region's bytes
  const pid_t self = ::getpid();
  const auto remote_address = reinterpret_cast<std::uintptr_t>(memory.data());
  const std::uint64_t stop = ~std::uint64_t{0};

  const pid_t child = fxt_child::spawn([&] {
    const key_table_map view = key_table_map::open(target.name, false);
    if (!view.mapped()) return 2;
    std::vector<unsigned char> source(memory.size());
    std::uint64_t filled = 0;
    for (;;) {
      const std::uint64_t epoch = view.load(announce);
      if (epoch == stop) return 0;
      if (epoch == 0) continue;
      if (epoch != filled) std::memset(source.data(), tag_of(filled = epoch), source.size());
      if (board_enter(initiator.map, view, target_nonce, slot, epoch) != board_verdict::go) continue;
      const iovec local{source.data(), source.size()};
      const iovec remote{reinterpret_cast<void*>(remote_address), source.size()};
      const ssize_t n = ::process_vm_writev(self, &local, 1, &remote, 1, 0);
      board_leave(initiator.map);
      if (n != static_cast<ssize_t>(source.size())) return 4;
    }
  });
  // The target never connected to the node-mate: it finds its board among
  // the tables of this user (as a UCX region's release does).
  std::vector<board_watch> boards;
  fabrix::detail::scan_boards(boards);
  CHECK(std::count_if(boards.begin(), boards.end(), [&](const board_watch& b) { return b.nonce == initiator_nonce; }) ==
        1);

  int rounds = 0, late = 0;
  for (std::uint64_t epoch = 100; epoch < 400; ++epoch, ++rounds) {
    target.map.store(slot, epoch);
    target.map.store(announce, epoch);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::atomic_ref<unsigned char>(memory.back()).load(std::memory_order_acquire) != tag_of(epoch))
      if (std::chrono::steady_clock::now() > until) FAIL("the node-mate wrote nothing in 5 s");
    target.release(slot);                                         // key_table::release: the slot is cleared
    fabrix::detail::wait_for_boards(boards, target_nonce);        // the region's release returns
    std::memset(memory.data(), 0, memory.size());                 // the memory is the owner's again
    std::this_thread::sleep_for(std::chrono::microseconds(500));  // the node-mate keeps trying meanwhile
    for (unsigned char b : memory) late += b != 0 ? 1 : 0;
    if (late != 0) break;
    slot = target.take(0, {});  // the same slot, with the next epoch
  }
  target.map.store(announce, stop);
  CHECK(fxt_child::reap(child, std::chrono::seconds(10)) == 0);
  CHECK_MESSAGE(late == 0, "bytes written after the release returned, in round " << rounds);
  CHECK(rounds == 300);
}
