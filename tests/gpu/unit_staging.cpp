// The staging pipeline's chunking and ordering, with host memory standing in
// for device memory: a memcpy engine, and a manual engine whose copies finish
// only when the test says so (to see the overlap and the in-flight bound).
#include <doctest/doctest.h>
#include <fabrix/cuda/gpu_path.hpp>
#include <fabrix/cuda/staging.hpp>

#include <algorithm>
#include <cstring>
#include <deque>
#include <numeric>
#include <vector>

using fabrix::status;
using fabrix::cuda::staging_chunk;
using fabrix::cuda::staging_direction;
using fabrix::cuda::staging_pipeline;

namespace {

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
  return v;
}

// Copies happen when complete(slot) is called; records the order of starts.
struct manual_engine {
  struct pending {
    void* dst;
    const void* src;
    std::size_t n;
    bool done;
  };
  std::vector<pending> slots;
  std::vector<unsigned> started;
  status fail_next = status::ok;
  explicit manual_engine(unsigned n) : slots(n, pending{nullptr, nullptr, 0, true}) {}
  status start_copy(unsigned slot, void* dst, const void* src, std::size_t n) {
    if (fail_next != status::ok) return fail_next;
    REQUIRE(slots[slot].done);  // the pipeline never reuses a busy slot
    slots[slot] = {dst, src, n, false};
    started.push_back(slot);
    return status::ok;
  }
  status copy_state(unsigned slot) const { return slots[slot].done ? status::ok : status::in_progress; }
  void complete(unsigned slot) {
    auto& p = slots[slot];
    REQUIRE_FALSE(p.done);
    std::memcpy(p.dst, p.src, p.n);
    p.done = true;
  }
  std::size_t busy() const {
    return static_cast<std::size_t>(std::count_if(slots.begin(), slots.end(), [](auto& p) { return !p.done; }));
  }
};

// Drives an outbound run to the end with the memcpy engine; the "wire" is a
// vector the chunks are appended to, in the order the pipeline hands them out.
std::vector<std::byte> run_outbound(std::vector<std::byte>& device, std::size_t chunk, unsigned slots,
                                    std::size_t& max_with_provider) {
  fabrix::cuda::host_copy_engine engine;
  std::vector<std::byte> bounce(chunk * slots);
  staging_pipeline<fabrix::cuda::host_copy_engine> p(engine, bounce, chunk, slots);
  REQUIRE(p.start(staging_direction::outbound, device.data(), device.size()) == status::ok);
  std::vector<std::byte> wire;
  std::deque<staging_chunk> with_provider;
  staging_chunk ready[4];
  max_with_provider = 0;
  std::size_t expected_offset = 0;
  while (!p.finished()) {
    const std::size_t n = p.progress(ready);
    for (std::size_t i = 0; i < n; ++i) {
      CHECK(ready[i].offset == expected_offset);  // in order, no gap, no overlap
      expected_offset += ready[i].length;
      with_provider.push_back(ready[i]);
    }
    max_with_provider = std::max(max_with_provider, with_provider.size());
    REQUIRE(!with_provider.empty());  // otherwise the pipeline would be stuck
    const staging_chunk c = with_provider.front();
    with_provider.pop_front();
    wire.insert(wire.end(), c.bounce, c.bounce + c.length);
    REQUIRE(p.transfer_done(c.slot) == status::ok);
  }
  CHECK(p.error() == status::ok);
  CHECK(expected_offset == device.size());
  return wire;
}

}  // namespace

TEST_CASE("staging outbound: every size moves every byte, in order, in chunks of at most `chunk`") {
  for (std::size_t size : {std::size_t{1}, std::size_t{999}, std::size_t{1000}, std::size_t{1001}, std::size_t{4096},
                           std::size_t{65536 + 3}, std::size_t{1} << 20}) {
    for (unsigned slots : {1u, 2u, 4u}) {
      auto device = pattern(size, static_cast<unsigned>(size + slots));
      std::size_t max_with_provider = 0;
      const auto wire = run_outbound(device, 1000, slots, max_with_provider);
      CAPTURE(size);
      CAPTURE(slots);
      REQUIRE(wire.size() == device.size());
      CHECK(std::memcmp(wire.data(), device.data(), size) == 0);
      CHECK(max_with_provider <= slots);
    }
  }
}

TEST_CASE("staging: nothing to move finishes at once") {
  fabrix::cuda::host_copy_engine engine;
  std::vector<std::byte> bounce(64), device(1);
  staging_pipeline<fabrix::cuda::host_copy_engine> p(engine, bounce, 32, 2);
  REQUIRE(p.start(staging_direction::outbound, device.data(), 0) == status::ok);
  staging_chunk ready[2];
  CHECK(p.progress(ready) == 0);
  CHECK(p.finished());
  CHECK(p.chunks() == 0);
}

TEST_CASE("staging outbound: copies overlap transfers, at most N slots busy, slots reused round-robin") {
  manual_engine engine(2);
  std::vector<std::byte> bounce(2 * 100);
  auto device = pattern(450, 3);  // chunks 100,100,100,100,50
  staging_pipeline<manual_engine> p(engine, bounce, 100, 2);
  REQUIRE(p.start(staging_direction::outbound, device.data(), device.size()) == status::ok);
  staging_chunk ready[8];
  // Two copies start at once (double buffering); nothing is ready yet.
  CHECK(p.progress(ready) == 0);
  CHECK(engine.started == std::vector<unsigned>{0, 1});
  CHECK(engine.busy() == 2);
  // Chunk 1's copy finishing first does not let it overtake chunk 0.
  engine.complete(1);
  CHECK(p.progress(ready) == 0);
  engine.complete(0);
  REQUIRE(p.progress(ready) == 2);
  CHECK(ready[0].index == 0);
  CHECK(ready[1].index == 1);
  CHECK(std::memcmp(ready[0].bounce, device.data(), 100) == 0);
  CHECK(std::memcmp(ready[1].bounce, device.data() + 100, 100) == 0);
  // While both slots are with the provider, no copy may start.
  CHECK(p.progress(ready) == 0);
  CHECK(engine.started.size() == 2);
  CHECK(p.in_flight() == 2);
  // The transfer of chunk 0 ends: chunk 2's copy starts in slot 0 while chunk 1 is still on the wire.
  REQUIRE(p.transfer_done(ready[0].slot) == status::ok);
  CHECK(engine.started == std::vector<unsigned>{0, 1, 0});
  CHECK(p.transfer_done(ready[0].slot) == status::invalid_argument);  // not handed out any more
  engine.complete(0);
  staging_chunk more[8];
  REQUIRE(p.progress(more) == 1);
  CHECK(more[0].index == 2);
  CHECK(more[0].offset == 200);
  CHECK(std::memcmp(more[0].bounce, device.data() + 200, 100) == 0);
  REQUIRE(p.transfer_done(ready[1].slot) == status::ok);
  REQUIRE(p.transfer_done(more[0].slot) == status::ok);
  engine.complete(1);
  engine.complete(0);
  REQUIRE(p.progress(more) == 2);
  CHECK(more[0].index == 3);
  CHECK(more[1].index == 4);
  CHECK(more[1].length == 50);  // the last, partial chunk
  CHECK(std::memcmp(more[1].bounce, device.data() + 400, 50) == 0);
  CHECK_FALSE(p.finished());
  REQUIRE(p.transfer_done(more[0].slot) == status::ok);
  REQUIRE(p.transfer_done(more[1].slot) == status::ok);
  CHECK(p.finished());
  CHECK(p.completed_chunks() == 5);
}

TEST_CASE("staging inbound: chunks filled out of order reach the device in order, every byte checked") {
  manual_engine engine(3);
  std::vector<std::byte> bounce(3 * 64);
  const auto source = pattern(64 * 7 + 5, 9);  // what the peer sends
  std::vector<std::byte> device(source.size(), std::byte{0});
  staging_pipeline<manual_engine> p(engine, bounce, 64, 3);
  REQUIRE(p.start(staging_direction::inbound, device.data(), device.size()) == status::ok);
  std::vector<staging_chunk> pending;
  staging_chunk ready[8];
  std::size_t handed = 0, rounds = 0;
  while (!p.finished()) {
    REQUIRE(++rounds < 1000);
    const std::size_t n = p.progress(ready);
    for (std::size_t i = 0; i < n; ++i) {
      CHECK(ready[i].index == handed++);
      pending.push_back(ready[i]);
    }
    CHECK(pending.size() + engine.busy() <= 3);
    CHECK(p.in_flight() <= 3);
    // The "transport" fills the newest chunk first.
    if (!pending.empty()) {
      const staging_chunk c = pending.back();
      pending.pop_back();
      std::memcpy(c.bounce, source.data() + c.offset, c.length);
      REQUIRE(p.transfer_done(c.slot) == status::ok);
    }
    // Device copies complete whenever they were started.
    for (unsigned s = 0; s < 3; ++s)
      if (!engine.slots[s].done) engine.complete(s);
  }
  CHECK(p.error() == status::ok);
  CHECK(handed == 8);
  CHECK(std::memcmp(device.data(), source.data(), source.size()) == 0);
}

TEST_CASE("staging: an engine error stops the run and is reported") {
  manual_engine engine(2);
  std::vector<std::byte> bounce(2 * 10);
  auto device = pattern(100, 1);
  staging_pipeline<manual_engine> p(engine, bounce, 10, 2);
  engine.fail_next = status::provider_error;
  REQUIRE(p.start(staging_direction::outbound, device.data(), device.size()) == status::ok);
  staging_chunk ready[4];
  CHECK(p.progress(ready) == 0);
  CHECK(p.error() == status::provider_error);
  CHECK(p.finished());
  // A new run may start after a failed one.
  engine.fail_next = status::ok;
  CHECK(p.start(staging_direction::outbound, device.data(), device.size()) == status::ok);
}

TEST_CASE("staging: refuses a bounce buffer smaller than slots x chunk, and a second start mid-run") {
  fabrix::cuda::host_copy_engine engine;
  std::vector<std::byte> small(100), device(1000);
  staging_pipeline<fabrix::cuda::host_copy_engine> bad(engine, small, 64, 2);
  CHECK(bad.start(staging_direction::outbound, device.data(), device.size()) == status::invalid_argument);
  std::vector<std::byte> bounce(128);
  staging_pipeline<fabrix::cuda::host_copy_engine> p(engine, bounce, 64, 2);
  REQUIRE(p.start(staging_direction::outbound, device.data(), device.size()) == status::ok);
  CHECK(p.start(staging_direction::outbound, device.data(), device.size()) == status::invalid_argument);
}

TEST_CASE("gpu_path: direct beats staged beats none; the refusal is unsupported and says why") {
  using fabrix::gpu_path;
  CHECK(fabrix::cuda::choose_gpu_path(true, true) == gpu_path::direct);
  CHECK(fabrix::cuda::choose_gpu_path(true, false) == gpu_path::direct);
  CHECK(fabrix::cuda::choose_gpu_path(false, true) == gpu_path::staged);
  CHECK(fabrix::cuda::choose_gpu_path(false, false) == gpu_path::none);
  fabrix::result<int> r = fabrix::cuda::refuse_device_memory("verbs", "no dma-buf");
  REQUIRE_FALSE(r.has_value());
  CHECK(r.code() == status::unsupported);
  CHECK(r.error().provider == "verbs");
  CHECK(r.error().message.find("no dma-buf") != std::string::npos);
}
