// For the provider slot tests: the one slot of a pool of one is dirtied by
// the test, given back (slot_pool::give_back resets it, through recycle()
// where the slot has one) and taken again, then checked.
#pragma once

#include <doctest/doctest.h>

#include <fabrix/detail/slot_pool.hpp>

template <class Slot, class Dirty, class Check>
void slot_round_trip(Dirty dirty, Check check) {
  fabrix::detail::slot_pool<Slot> pool(1);
  Slot* s = pool.take();
  REQUIRE(s != nullptr);
  dirty(*s);
  pool.give_back(s);
  CHECK(pool.in_use() == 0);
  Slot* again = pool.take();
  REQUIRE(again == s);
  check(*again);
}
