// The device-kernel seam (device_kernels.hpp) without a GPU: a kernel set
// over host memory that holds every copy and combine back until ready().
// A collective that posted a send slot, handed a receive slot back or
// returned before waiting for its kernels would move or keep stale bytes,
// and the element checks below would fail. Also: a kernel failure breaks
// the communicator on every rank, and buffers in memory other than the
// communicator's are refused.
#include "common.hpp"

#include <array>
#include <cstdlib>
#include <span>

namespace {

using fabrix::status;
using fabrix::coll::element_type;
using fabrix::coll::reduce_op;

class deferred_kernels final : public fabrix::coll::device_kernels {
 public:
  fabrix::memory_location location() const noexcept override { return where; }
  fabrix::result<void*> allocate(std::size_t bytes) override {
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (p == nullptr) return fabrix::unexpected(status::no_memory, "deferred_kernels");
    ++allocations;
    return p;
  }
  void deallocate(void* p) noexcept override { std::free(p); }
  status copy(void* dst, const void* src, std::size_t bytes) noexcept override {
    return push({false, element_type::i32, reduce_op::sum, dst, src, nullptr, bytes});
  }
  status combine(element_type t, reduce_op op, void* out, const void* a, const void* b,
                 std::size_t n) noexcept override {
    return push({true, t, op, out, a, b, n});
  }
  fabrix::result<void> ready() override {
    ++readies;
    if (fail_ready_at != 0 && readies >= fail_ready_at)
      return fabrix::unexpected(status::provider_error, "deferred_kernels: injected kernel failure");
    for (std::size_t i = 0; i < pending; ++i) run(queue[i]);
    pending = 0;
    return {};
  }

  fabrix::memory_location where{};
  std::uint64_t readies = 0;
  std::uint64_t ops = 0;
  std::uint64_t allocations = 0;
  std::uint64_t fail_ready_at = 0;  // 0: never

 private:
  struct op_t {
    bool is_combine;
    element_type type;
    reduce_op op;
    void* out;
    const void* a;
    const void* b;
    std::size_t n;  // bytes for a copy, elements for a combine
  };
  status push(const op_t& o) noexcept {
    if (pending == queue.size()) return status::again;  // more than any collective enqueues between waits
    queue[pending++] = o;
    ++ops;
    return status::ok;
  }
  template <class T>
  static void combine_as(const op_t& o) {
    fabrix::coll::host_kernels::combine(static_cast<T*>(o.out), static_cast<const T*>(o.a), static_cast<const T*>(o.b),
                                        o.n, o.op);
  }
  static void run(const op_t& o) {
    if (!o.is_combine) return fabrix::coll::host_kernels::copy(o.out, o.a, o.n);
    switch (o.type) {
      case element_type::i32: return combine_as<std::int32_t>(o);
      case element_type::i64: return combine_as<std::int64_t>(o);
      case element_type::f32: return combine_as<float>(o);
      case element_type::f64: return combine_as<double>(o);
    }
  }
  std::array<op_t, 64> queue{};
  std::size_t pending = 0;
};

template <class T>
void check_all(fxc::comm_t& comm, int rank, int n, std::size_t count, std::uint64_t salt) {
  for (const reduce_op op : {reduce_op::sum, reduce_op::min, reduce_op::max}) {
    ++salt;
    std::vector<T> in(count), out(count, T(-7));
    for (std::size_t i = 0; i < count; ++i) in[i] = fxc::value<T>(rank, i, salt);
    fxc::check_ok(fabrix::coll::allreduce(comm, std::span<const T>(in), std::span<T>(out), op), "allreduce");
    fxc::expect_elements(
        out, [&](std::size_t i) { return fxc::reference<T>(n, i, op, salt); }, "deferred allreduce");

    std::vector<T> block(count, T(-7)), all(count * static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = fxc::value<T>(rank, i, salt);
    fxc::check_ok(fabrix::coll::reduce_scatter(comm, std::span<const T>(all), std::span<T>(block), op),
                  "reduce_scatter");
    const std::size_t base = static_cast<std::size_t>(rank) * count;
    fxc::expect_elements(
        block, [&](std::size_t i) { return fxc::reference<T>(n, base + i, op, salt); }, "deferred reduce_scatter");
  }
  std::vector<T> mine(count), gathered(count * static_cast<std::size_t>(n), T(-7));
  for (std::size_t i = 0; i < count; ++i) mine[i] = fxc::value<T>(rank, i, salt);
  fxc::check_ok(fabrix::coll::allgather(comm, std::span<const T>(mine), std::span<T>(gathered)), "allgather");
  fxc::expect_elements(
      gathered, [&](std::size_t i) { return fxc::value<T>(static_cast<int>(i / count), i % count, salt); },
      "deferred allgather");

  std::vector<T> send(count * static_cast<std::size_t>(n)), recv(send.size(), T(-7));
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = fxc::value<T>(rank, i, salt + 9);
  fxc::check_ok(fabrix::coll::alltoall(comm, std::span<const T>(send), std::span<T>(recv)), "alltoall");
  // Block p of recv is block `rank` of rank p's send.
  fxc::expect_elements(
      recv,
      [&](std::size_t i) {
        return fxc::value<T>(static_cast<int>(i / count), static_cast<std::size_t>(rank) * count + i % count, salt + 9);
      },
      "deferred alltoall");
}

}  // namespace

TEST_CASE("collectives: device-kernel seam, work deferred until ready(), 2-4 ranks") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    deferred_kernels k;
    fabrix::coll::options o = fxc::small_chunks();
    o.device = &k;
    fxc::with_comm(n, o, [&k](fxc::comm_t& comm, int rank, int n) {
      // 1 and 3: one-hop allreduce; 1001 and 4099: many ring rounds with
      // partial chunks and segments that do not divide by n.
      for (const std::size_t count : {std::size_t{1}, std::size_t{3}, std::size_t{1001}, std::size_t{4099}}) {
        check_all<std::int32_t>(comm, rank, n, count, count);
        check_all<double>(comm, rank, n, count, count + 50);
      }
      check_all<std::int64_t>(comm, rank, n, 777, 7);
      check_all<float>(comm, rank, n, 777, 8);
      if (k.ops == 0 || k.readies == 0) fxt::rank_fail("deferred kernels unused", __FILE__, __LINE__);
      // allocate_memory gives the kernels' memory (not the provider's, nor
      // the heap), and collectives run on it.
      const std::uint64_t before = k.allocations;
      auto mem = fxt::must(comm.allocate_memory(1001 * sizeof(double)), "allocate_memory");
      if (k.allocations != before + 1) fxt::rank_fail("not allocated by the kernels", __FILE__, __LINE__);
      const std::span<double> x = mem.as<double>();
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = fxc::value<double>(rank, i, 99);
      fxc::check_ok(fabrix::coll::allreduce(comm, x, reduce_op::sum), "allreduce on allocated memory");
      fxc::expect_elements(
          std::vector<double>(x.begin(), x.end()),
          [&](std::size_t i) { return fxc::reference<double>(n, i, reduce_op::sum, 99); }, "allocated, deferred");
    });
  }
}

TEST_CASE("collectives: a failing device kernel breaks the communicator on every rank") {
  deferred_kernels k;
  fabrix::coll::options o = fxc::small_chunks();
  o.timeout = std::chrono::seconds(10);
  o.device = &k;
  fxc::with_comm(3, o, [&k](fxc::comm_t& comm, int rank, int) {
    std::vector<float> v(5000, 1.0f);
    // Every rank is past create() before rank 1 fails (else a slow rank's
    // create() can be the call that hears the abort); the barrier itself
    // may already see it on a slow rank, which the allreduce then reports.
    (void)comm.barrier();
    if (rank == 1) k.fail_ready_at = k.readies + 3;
    auto r = fabrix::coll::allreduce(comm, std::span<float>(v), reduce_op::sum);
    if (r) fxt::rank_fail("allreduce succeeded despite a failed kernel", __FILE__, __LINE__);
    if (rank == 1 && r.error().message.find("injected kernel failure") == std::string::npos)
      fxt::rank_fail("wrong error on the failing rank", __FILE__, __LINE__, r.error().describe());
    if (comm.health()) fxt::rank_fail("communicator still healthy", __FILE__, __LINE__);
  });
}

TEST_CASE("collectives: buffers in other memory than the communicator's are refused") {
  fxc::with_comm(2, fxc::small_chunks(), [](fxc::comm_t& comm, int, int) {
    std::vector<float> v(100, 1.0f);
    const fabrix::memory_location gpu{fabrix::memory_kind::cuda_device, 0};
    auto r = fabrix::coll::allreduce(comm, std::span<float>(v), reduce_op::sum, gpu);
    if (r || r.error().code != status::unsupported)
      fxt::rank_fail("device buffers on a host communicator not refused", __FILE__, __LINE__);
    std::vector<float> all(200);
    auto g = fabrix::coll::allgather(comm, std::span<const float>(v), std::span<float>(all), gpu);
    if (g || g.error().code != status::unsupported)
      fxt::rank_fail("allgather of device buffers not refused", __FILE__, __LINE__);
    // A refusal is not a failure of the communicator.
    fxc::check_ok(comm.health(), "health after refusal");
    fxc::check_ok(fabrix::coll::allreduce(comm, std::span<float>(v), reduce_op::sum), "allreduce after refusal");
    for (float x : v)
      if (x != 2.0f) fxt::rank_fail("allreduce after refusal", __FILE__, __LINE__);
  });
}

TEST_CASE("collectives: device scratch on a provider that cannot register device memory is refused") {
  if (fxc::P::caps.gpu == fabrix::gpu_path::direct) return;
  deferred_kernels k;
  k.where = {fabrix::memory_kind::cuda_device, 0};
  fabrix::coll::options o = fxc::small_chunks();
  o.device = &k;
  fxt::run_ranks(2, [&](int, fabrix::bootstrap& boot) {
    auto dom = fxt::open_static();
    auto c = fxc::comm_t::create(dom, boot, o);
    if (c || c.error().code != status::unsupported)
      fxt::rank_fail("device scratch accepted", __FILE__, __LINE__, c ? "" : c.error().describe());
  });
}
