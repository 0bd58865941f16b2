// The collectives on GPU memory: cuda_ipc between 2, 3 and 4 forked
// processes on one GPU, buffers and scratch in device memory, copies and
// reductions by the CUDA kernels (fabrix::cuda::collective_kernels). Every
// element is copied back and compared with the serial reference on the
// host, for counts that do not divide by the ranks or the chunks. Exit 77
// (skipped) without a CUDA device.
#include "common.hpp"

#include <fabrix/cuda/available.hpp>
#include <fabrix/cuda/collective_kernels.hpp>
#include <fabrix/cuda/device_buffer.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <span>

namespace {

using fabrix::coll::reduce_op;
using fabrix::cuda::device_buffer;

constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::min, reduce_op::max};

template <class T>
device_buffer to_device(const std::vector<T>& v) {
  auto b = fxt::must(device_buffer::create(std::max<std::size_t>(v.size() * sizeof(T), 8)), "device_buffer");
  const auto bytes = std::as_bytes(std::span<const T>(v));
  if (b.copy_from_host(0, bytes) != fabrix::status::ok) fxt::rank_fail("copy to device", __FILE__, __LINE__);
  return b;
}

template <class T>
std::vector<T> to_host(const device_buffer& b, std::size_t count) {
  std::vector<T> v(count);
  if (b.copy_to_host(0, std::as_writable_bytes(std::span<T>(v))) != fabrix::status::ok)
    fxt::rank_fail("copy to host", __FILE__, __LINE__);
  return v;
}

template <class T>
std::span<T> on(device_buffer& b, std::size_t count) {
  return {reinterpret_cast<T*>(b.data()), count};
}

// Runs body(comm, where, rank, n) on n ranks, each with device scratch.
template <class Body>
void with_device_comm(int n, fabrix::coll::options o, Body body) {
  fxt::run_ranks(
      n,
      [&](int rank, fabrix::bootstrap& boot) {
        auto dom = fxt::open_static();
        auto kernels = fxt::must(fabrix::cuda::collective_kernels::create(0), "collective_kernels");
        o.device = kernels.get();
        auto comm = fxt::must(fxc::comm_t::create(dom, boot, o), "communicator::create");
        if (comm.memory().kind != fabrix::memory_kind::cuda_device)
          fxt::rank_fail("scratch not in device memory", __FILE__, __LINE__);
        body(comm, kernels->location(), rank, n);
        (void)boot.barrier();
      },
      std::chrono::seconds(120));
}

template <class T>
void allreduce_case(fxc::comm_t& comm, fabrix::memory_location gpu, int rank, int n, std::size_t count,
                    std::uint64_t salt) {
  for (const reduce_op op : all_ops) {
    ++salt;
    std::vector<T> in(count);
    for (std::size_t i = 0; i < count; ++i) in[i] = fxc::value<T>(rank, i, salt);
    auto din = to_device(in);
    auto dout = to_device(std::vector<T>(count, T(-7)));
    const bool in_place = salt % 2 == 0;
    auto r = in_place
                 ? fabrix::coll::allreduce(comm, on<T>(din, count), op, gpu)
                 : fabrix::coll::allreduce(comm, std::span<const T>(on<T>(din, count)), on<T>(dout, count), op, gpu);
    fxc::check_ok(r, "device allreduce");
    fxc::expect_elements(
        to_host<T>(in_place ? din : dout, count), [&](std::size_t i) { return fxc::reference<T>(n, i, op, salt); },
        "device allreduce " + std::string(fabrix::coll::to_string(op)) + " of " + std::to_string(count));
  }
}

template <class T>
void reduce_scatter_case(fxc::comm_t& comm, fabrix::memory_location gpu, int rank, int n, std::size_t count,
                         std::uint64_t salt) {
  for (const reduce_op op : all_ops) {
    ++salt;
    std::vector<T> in(count * static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = fxc::value<T>(rank, i, salt);
    auto din = to_device(in);
    auto dout = to_device(std::vector<T>(count, T(-7)));
    fxc::check_ok(
        fabrix::coll::reduce_scatter(comm, std::span<const T>(on<T>(din, in.size())), on<T>(dout, count), op, gpu),
        "device reduce_scatter");
    const std::size_t base = static_cast<std::size_t>(rank) * count;
    fxc::expect_elements(
        to_host<T>(dout, count), [&](std::size_t i) { return fxc::reference<T>(n, base + i, op, salt); },
        "device reduce_scatter " + std::string(fabrix::coll::to_string(op)) + " of " + std::to_string(count));
  }
}

template <class T>
void movement_case(fxc::comm_t& comm, fabrix::memory_location gpu, int rank, int n, std::size_t count,
                   std::uint64_t salt) {
  const std::size_t all = count * static_cast<std::size_t>(n);
  std::vector<T> mine(count);
  for (std::size_t i = 0; i < count; ++i) mine[i] = fxc::value<T>(rank, i, salt);
  auto dmine = to_device(mine);
  auto dgathered = to_device(std::vector<T>(all, T(-7)));
  fxc::check_ok(fabrix::coll::allgather(comm, std::span<const T>(on<T>(dmine, count)), on<T>(dgathered, all), gpu),
                "device allgather");
  fxc::expect_elements(
      to_host<T>(dgathered, all),
      [&](std::size_t i) { return fxc::value<T>(static_cast<int>(i / count), i % count, salt); },
      "device allgather of " + std::to_string(count));

  std::vector<T> send(all);
  for (std::size_t i = 0; i < all; ++i) send[i] = fxc::value<T>(rank, i, salt + 1);
  auto dsend = to_device(send);
  auto drecv = to_device(std::vector<T>(all, T(-7)));
  fxc::check_ok(fabrix::coll::alltoall(comm, std::span<const T>(on<T>(dsend, all)), on<T>(drecv, all), gpu),
                "device alltoall");
  fxc::expect_elements(
      to_host<T>(drecv, all),
      [&](std::size_t i) {
        return fxc::value<T>(static_cast<int>(i / count), static_cast<std::size_t>(rank) * count + i % count, salt + 1);
      },
      "device alltoall of " + std::to_string(count));
}

}  // namespace

TEST_CASE("gpu collectives: every collective, dtype and op on device memory, 2-4 ranks, small chunks") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    with_device_comm(n, fxc::small_chunks(), [](fxc::comm_t& comm, fabrix::memory_location gpu, int rank, int n) {
      // 264-byte chunks: 1 and 3 take the one-hop allreduce, 1001 and 4099
      // the ring with partial chunks and uneven segments.
      for (const std::size_t count : {std::size_t{1}, std::size_t{3}, std::size_t{1001}, std::size_t{4099}}) {
        allreduce_case<std::int32_t>(comm, gpu, rank, n, count, count);
        allreduce_case<std::int64_t>(comm, gpu, rank, n, count, count + 10);
        allreduce_case<float>(comm, gpu, rank, n, count, count + 20);
        allreduce_case<double>(comm, gpu, rank, n, count, count + 30);
      }
      for (const std::size_t count : {std::size_t{1}, std::size_t{1001}}) {
        reduce_scatter_case<std::int32_t>(comm, gpu, rank, n, count, count + 40);
        reduce_scatter_case<std::int64_t>(comm, gpu, rank, n, count, count + 50);
        reduce_scatter_case<float>(comm, gpu, rank, n, count, count + 60);
        reduce_scatter_case<double>(comm, gpu, rank, n, count, count + 70);
        movement_case<std::int32_t>(comm, gpu, rank, n, count, count + 80);
        movement_case<double>(comm, gpu, rank, n, count, count + 90);
      }
      // Host buffers on a device communicator are refused, and it stays usable.
      std::vector<float> host(10, 1.0f);
      auto r = fabrix::coll::allreduce(comm, std::span<float>(host), reduce_op::sum);
      if (r || r.error().code != fabrix::status::unsupported)
        fxt::rank_fail("host buffers on a device communicator not refused", __FILE__, __LINE__);
      fxc::check_ok(comm.health(), "health after refusal");
    });
  }
}

TEST_CASE("gpu collectives: several MiB with the default chunking, 2 and 4 ranks") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    with_device_comm(n, fabrix::coll::options{}, [](fxc::comm_t& comm, fabrix::memory_location gpu, int rank, int n) {
      const std::size_t count = (std::size_t{3} << 20) / sizeof(float) + 5;
      allreduce_case<float>(comm, gpu, rank, n, count, 200);
      reduce_scatter_case<double>(comm, gpu, rank, n, (std::size_t{1} << 20) / 8 + 3, 300);
      movement_case<std::int64_t>(comm, gpu, rank, n, (std::size_t{1} << 19) / 8 + 1, 400);
    });
  }
}

TEST_CASE("gpu collectives: the ring forwarding from device receive slots (forward_received), 3 ranks") {
  fabrix::coll::options o = fxc::small_chunks();
  o.forward_received = true;
  with_device_comm(3, o, [](fxc::comm_t& comm, fabrix::memory_location gpu, int rank, int n) {
    allreduce_case<float>(comm, gpu, rank, n, 4099, 500);
    allreduce_case<std::int64_t>(comm, gpu, rank, n, 1001, 510);
    movement_case<std::int32_t>(comm, gpu, rank, n, 1001, 520);
  });
}

TEST_CASE("gpu collectives: allocate_memory gives device memory that the collectives run on, 3 ranks") {
  with_device_comm(3, fxc::small_chunks(), [](fxc::comm_t& comm, fabrix::memory_location gpu, int rank, int n) {
    const std::size_t count = 4099;
    auto mem = fxt::must(comm.allocate_memory(count * sizeof(float)), "allocate_memory");
    const std::span<float> x = mem.as<float>();
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, x.data()) != cudaSuccess || attr.type != cudaMemoryTypeDevice)
      fxt::rank_fail("allocate_memory: not device memory", __FILE__, __LINE__);
    std::vector<float> host(count);
    for (std::size_t i = 0; i < count; ++i) host[i] = fxc::value<float>(rank, i, 600);
    if (cudaMemcpy(x.data(), host.data(), x.size_bytes(), cudaMemcpyHostToDevice) != cudaSuccess)
      fxt::rank_fail("copy to device", __FILE__, __LINE__);
    fxc::check_ok(fabrix::coll::allreduce(comm, x, reduce_op::sum, gpu), "allreduce on allocated device memory");
    if (cudaMemcpy(host.data(), x.data(), x.size_bytes(), cudaMemcpyDeviceToHost) != cudaSuccess)
      fxt::rank_fail("copy to host", __FILE__, __LINE__);
    fxc::expect_elements(
        host, [&](std::size_t i) { return fxc::reference<float>(n, i, reduce_op::sum, 600); }, "allocated on the GPU");
  });
}

int main(int argc, char** argv) {
  if (const std::string why = fabrix::cuda::unavailable_reason(); !why.empty()) {
    std::printf("gpu collectives: skipped: %s\n", why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
