// Bandwidth sweep: fabrix cuda_ipc writes (through a remote key imported
// once, as fabrix-perf posts them) from one process into another's
// GPU memory, 4 KiB to 1 GiB, against a same-process cudaMemcpyAsync
// device-to-device baseline on the same GPU, in the same run. Each size runs
// `repetitions` times, fabrix and the baseline alternating; each repetition
// gives one ratio (fabrix / the baseline run beside it), and the figures are
// medians (one run's ratio swung 0.84-1.13 on a shared GPU). A second
// baseline is raw CUDA IPC: a bare cudaMemcpyAsync loop into a buffer of the
// target opened with cudaIpcOpenMemHandle, timed like fabrix (wall clock):
// what fabrix adds over the raw stack.
//
//   gpu_bench OUT.json [max_bytes] [window] [min_bytes]
//
// window: writes in flight (32); sizes run from min_bytes (4 KiB) up in
// steps of 4. It also times poll() on the quiet domain before the sweep.
//
// Two processes: this one (rank 0, the writer) and a forked child (rank 1,
// the target), wired through the embedded bootstrap. Neither touches CUDA
// before the fork. Exit 77 without a CUDA device.
#include <fabrix/cuda/available.hpp>
#include <fabrix/cuda_ipc.hpp>
#include <fabrix/fabrix.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using acc = fabrix::access;
using fabrix::status;
using clk = std::chrono::steady_clock;

namespace {

constexpr std::uint32_t done_imm = 0xd0e;
constexpr std::uint32_t check_imm = 0xc4e;
constexpr std::size_t check_bytes = 1 << 20;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "gpu_bench: %s\n", what.c_str());
  std::_Exit(1);
}
template <class R>
auto must(R&& r, const char* what) {
  if (!r) die(std::string(what) + ": " + r.error().describe());
  return std::move(*r);
}

std::byte pattern(std::size_t i) { return static_cast<std::byte>((i * 7 + (i >> 9)) & 0xff); }

std::size_t iterations_for(std::size_t size) {
  const std::size_t by_bytes = (std::size_t{4} << 30) / size;
  return std::max<std::size_t>(8, std::min<std::size_t>(2000, by_bytes));
}

fabrix::completion wait_for(fabrix::cuda_ipc::domain& dom, auto pred) {
  fabrix::completion buf[64];
  const auto deadline = clk::now() + std::chrono::seconds(120);
  std::vector<fabrix::completion> keep;
  while (clk::now() < deadline) {
    const std::size_t n = dom.poll(buf);
    for (std::size_t i = 0; i < n; ++i) {
      if (buf[i].status != status::ok) die("completion failed: " + std::string(fabrix::to_string(buf[i].status)));
      if (pred(buf[i])) return buf[i];
    }
  }
  die("timed out waiting for a completion");
}

int target(fabrix::bootstrap& boot, std::size_t max_bytes) {
  auto dom = must(fabrix::cuda_ipc::domain::create({}), "domain");
  auto qps = must(fabrix::connect_all(dom, boot), "connect_all");
  auto buf = must(fabrix::cuda::device_buffer::create(max_bytes), "device_buffer");
  auto mr = must(dom.register_memory(buf.data(), buf.size(), buf.location(), acc::remote_write), "register");
  must(fabrix::exchange(boot, mr.remote()), "exchange");
  // A second buffer, shared by a bare CUDA IPC handle: the raw baseline's target.
  auto raw = must(fabrix::cuda::device_buffer::create(max_bytes), "device_buffer (raw IPC)");
  cudaIpcMemHandle_t h;
  if (cudaIpcGetMemHandle(&h, raw.data()) != cudaSuccess) die("cudaIpcGetMemHandle");
  std::vector<std::byte> handle(sizeof(h));
  std::memcpy(handle.data(), &h, sizeof(h));
  must(boot.allgather(handle), "allgather IPC handle");
  wait_for(dom,
           [](const fabrix::completion& c) { return c.op == fabrix::opcode::remote_write_imm && c.imm == check_imm; });
  std::vector<std::byte> host(check_bytes);
  if (buf.copy_to_host(0, host) != status::ok) die("copy_to_host");
  std::size_t bad = 0;
  for (std::size_t i = 0; i < check_bytes; ++i) bad += host[i] != pattern(i);
  std::vector<std::byte> verdict(1, static_cast<std::byte>(bad == 0));
  must(boot.allgather(verdict), "allgather verdict");
  wait_for(dom,
           [](const fabrix::completion& c) { return c.op == fabrix::opcode::remote_write_imm && c.imm == done_imm; });
  return 0;
}

constexpr int repetitions = 5;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One figure over the repetitions.
struct spread {
  double median, min, max;
};
spread spread_of(const std::vector<double>& v) {
  return {median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

struct row {
  std::size_t bytes, iters;
  spread fabrix_gbps;
  double baseline_gbps, raw_gbps, fabrix_us;  // medians
  spread ratio, raw_ratio;                    // per repetition: fabrix / the baseline run beside it
};

struct sweep_options {
  std::size_t max_bytes = std::size_t{1} << 30;
  std::size_t window = 32;
  std::size_t min_bytes = 4096;
};

// ns per poll() of a domain with nothing in flight and nothing arriving, and
// how many of those polls read the sockets (the doorbell should make it ~0).
struct idle_poll {
  double ns = 0;
  std::uint64_t socket_reads = 0, polls = 0;
};
idle_poll time_idle_poll(fabrix::cuda_ipc::domain& dom) {
  fabrix::completion buf[64];
  const auto warm = clk::now() + std::chrono::milliseconds(20);  // the peer's `rings` arrives
  while (clk::now() < warm) dom.poll(buf);
  idle_poll r;
  r.polls = 200000;
  const auto reads = fabrix::detail::provider_impl(dom).socket_reads();
  const auto start = clk::now();
  for (std::uint64_t i = 0; i < r.polls; ++i) dom.poll(buf);
  r.ns = std::chrono::duration<double, std::nano>(clk::now() - start).count() / static_cast<double>(r.polls);
  r.socket_reads = fabrix::detail::provider_impl(dom).socket_reads() - reads;
  return r;
}

// Diagnostics (GPU_BENCH_COSTS=1): the host time of the calls a cuda_ipc
// post and poll make, next to a bare cudaMemcpyAsync, in ns per call.
template <class QP, class MR>
void print_post_costs(fabrix::cuda_ipc::domain& dom, QP& qp, MR& mr, const fabrix::remote_buffer& remote,
                      const fabrix::remote_key& key, void* raw_dst, void* src, cudaStream_t stream) {
  constexpr int n = 20000, batch = 100;
  auto ns_per = [](auto start, int count) {
    return std::chrono::duration<double, std::nano>(clk::now() - start).count() / count;
  };
  int dev = 0;
  auto t = clk::now();
  for (int i = 0; i < n; ++i) cudaGetDevice(&dev);
  const double get_device = ns_per(t, n);
  cudaEvent_t ev;
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  t = clk::now();
  for (int i = 0; i < n; ++i) cudaEventRecord(ev, stream);
  const double record = ns_per(t, n);
  cudaStreamSynchronize(stream);
  t = clk::now();
  for (int i = 0; i < n; ++i) (void)cudaEventQuery(ev);
  const double query = ns_per(t, n);
  cudaEventDestroy(ev);
  // Other ways to enqueue the same copy: the kind named, the driver call
  // without the runtime, and (CUDA 12.8+) one batch call for 16 copies.
  auto per_copy = [&](auto&& enqueue, int copies_per_call) {
    double sum = 0;
    for (int round = 0; round < 20; ++round) {
      const auto t0 = clk::now();
      for (int i = 0; i < batch / copies_per_call; ++i) enqueue();
      sum += ns_per(t0, batch) / 20;
      cudaStreamSynchronize(stream);
    }
    return sum;
  };
  const double kind_named = per_copy([&] { cudaMemcpyAsync(raw_dst, src, 4096, cudaMemcpyDeviceToDevice, stream); }, 1);
  using cu_copy_fn = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  double driver_call = -1;
  if (cudaGetDriverEntryPointByVersion("cuMemcpyAsync", &fn, 12000, cudaEnableDefault, &found) == cudaSuccess &&
      fn != nullptr) {
    auto cu_copy = reinterpret_cast<cu_copy_fn>(fn);
    driver_call = per_copy(
        [&] {
          cu_copy(reinterpret_cast<CUdeviceptr>(raw_dst), reinterpret_cast<CUdeviceptr>(src), 4096,
                  reinterpret_cast<CUstream>(stream));
        },
        1);
  }
  double batched = -1;
#if CUDART_VERSION >= 13000
  {
    void* dsts[16];
    const void* srcs[16];
    std::size_t sizes[16];
    for (int i = 0; i < 16; ++i) dsts[i] = raw_dst, srcs[i] = src, sizes[i] = 4096;
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    std::size_t attr_idx = 0;
    if (cudaMemcpyBatchAsync(dsts, srcs, sizes, 16, &attr, &attr_idx, 1, stream) == cudaSuccess)
      batched = per_copy([&] { cudaMemcpyBatchAsync(dsts, srcs, sizes, 16, &attr, &attr_idx, 1, stream); }, 16);
    else
      (void)cudaGetLastError();
    cudaStreamSynchronize(stream);
  }
#endif
  std::printf(
      "enqueue alternatives (ns/copy): DeviceToDevice named %.0f, driver cuMemcpyAsync %.0f, "
      "cudaMemcpyBatchAsync x16 %.0f\n",
      kind_named, driver_call, batched);

  fabrix::completion buf[128];
  double raw_enqueue = 0, fabrix_post = 0, fabrix_post_buffer = 0, fabrix_post_empty = 0, fabrix_drain_polls = 0;
  auto drain = [&] {
    int done = 0, polls = 0;
    while (done < batch) {
      done += static_cast<int>(dom.poll(buf));
      ++polls;
    }
    return polls;
  };
  for (int round = 0; round < 20; ++round) {
    t = clk::now();
    for (int i = 0; i < batch; ++i) cudaMemcpyAsync(raw_dst, src, 4096, cudaMemcpyDefault, stream);
    raw_enqueue += ns_per(t, batch) / 20;
    cudaStreamSynchronize(stream);
    t = clk::now();
    for (int i = 0; i < batch; ++i)
      if (qp.write(mr.slice(0, 4096), key.slice(0, 4096), i) != status::ok) die("write (costs)");
    fabrix_post += ns_per(t, batch) / 20;
    fabrix_drain_polls += static_cast<double>(drain()) / 20;
    t = clk::now();
    for (int i = 0; i < batch; ++i)
      if (qp.write(mr.slice(0, 4096), remote.slice(0, 4096), i) != status::ok) die("write (costs)");
    fabrix_post_buffer += ns_per(t, batch) / 20;
    drain();
    // 0 bytes: everything a post does but the copy (fabrix's own cost).
    t = clk::now();
    for (int i = 0; i < batch; ++i)
      if (qp.write(mr.slice(0, 0), key.slice(0, 0), i) != status::ok) die("write (costs)");
    fabrix_post_empty += ns_per(t, batch) / 20;
    drain();
  }
  std::printf(
      "host costs (ns/call): cudaGetDevice %.0f, cudaEventRecord %.0f, cudaEventQuery (done) %.0f, "
      "cudaMemcpyAsync 4 KiB to the peer %.0f, fabrix write 4 KiB post %.0f with an imported key, %.0f with the "
      "remote_buffer, %.0f for 0 bytes (no copy) (polls to drain %d: %.0f)\n",
      get_device, record, query, raw_enqueue, fabrix_post, fabrix_post_buffer, fabrix_post_empty, batch,
      fabrix_drain_polls);
}

int writer(fabrix::bootstrap& boot, const sweep_options& opt, const char* out_path) {
  const std::size_t max_bytes = opt.max_bytes;
  auto dom = must(fabrix::cuda_ipc::domain::create({}), "domain");
  auto qps = must(fabrix::connect_all(dom, boot), "connect_all");
  auto src = must(fabrix::cuda::device_buffer::create(max_bytes), "device_buffer");
  auto dst = must(fabrix::cuda::device_buffer::create(max_bytes), "device_buffer (baseline)");
  if (src.fill(0x5a) != status::ok) die("fill");
  auto mr = must(dom.register_memory(src.data(), src.size(), src.location(), acc::local), "register");
  auto dummy = must(fabrix::cuda::device_buffer::create(4096), "device_buffer (dummy)");
  auto dmr = must(dom.register_memory(dummy.data(), dummy.size(), dummy.location(), acc::remote_write), "register");
  auto peers = must(fabrix::exchange(boot, dmr.remote()), "exchange");
  const fabrix::remote_buffer& remote = peers[1];
  auto& qp = qps[1];
  auto handles = must(boot.allgather(std::vector<std::byte>(sizeof(cudaIpcMemHandle_t))), "allgather IPC handle");
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handles[1].data(), sizeof(h));
  void* raw_dst = nullptr;
  if (cudaIpcOpenMemHandle(&raw_dst, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) die("cudaIpcOpenMemHandle");

  cudaStream_t stream;
  cudaEvent_t t0, t1;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess || cudaEventCreate(&t0) != cudaSuccess ||
      cudaEventCreate(&t1) != cudaSuccess)
    die("baseline stream/events");

  const idle_poll idle = time_idle_poll(dom);
  std::printf("idle poll(): %.1f ns, %llu socket reads in %llu polls\n", idle.ns,
              static_cast<unsigned long long>(idle.socket_reads), static_cast<unsigned long long>(idle.polls));

  // The fast path, as fabrix-perf posts: a key imported once per queue pair.
  const auto key = must(qp.import(remote), "import");
  if (std::getenv("GPU_BENCH_COSTS")) print_post_costs(dom, qp, mr, remote, key, raw_dst, src.data(), stream);

  std::vector<row> rows;
  for (std::size_t size = opt.min_bytes; size <= max_bytes; size *= 4) {
    const std::size_t iters = iterations_for(size);
    // fabrix: up to `window` writes in flight, then wait for all.
    const std::size_t window = opt.window;
    fabrix::completion buf[64];
    auto run = [&](std::size_t n) {
      std::size_t posted = 0, done = 0;
      while (done < n) {
        while (posted < n && posted - done < window) {
          const status s = qp.write(mr.slice(0, size), key.slice(0, size), posted);
          if (s == status::again) break;
          if (s != status::ok) die("write: " + std::string(fabrix::to_string(s)));
          ++posted;
        }
        const std::size_t got = dom.poll(buf);
        for (std::size_t i = 0; i < got; ++i) {
          if (buf[i].status != status::ok) die("write completion failed");
          ++done;
        }
      }
    };
    run(std::min<std::size_t>(iters, 4));  // warm-up (opens the mapping)
    cudaMemcpyAsync(raw_dst, src.data(), size, cudaMemcpyDefault, stream);
    if (cudaStreamSynchronize(stream) != cudaSuccess) die("raw IPC warm-up copy failed");
    const double bytes = static_cast<double>(size) * static_cast<double>(iters);
    std::vector<double> fabrix_gbps, baseline_gbps, ratios, raw_gbps, raw_ratios;
    for (int rep = 0; rep < repetitions; ++rep) {
      const auto start = clk::now();
      run(iters);
      const double secs = std::chrono::duration<double>(clk::now() - start).count();
      fabrix_gbps.push_back(bytes / secs / 1e9);

      // Baseline: the same copies in one process, one stream, timed by events.
      cudaMemcpyAsync(dst.data(), src.data(), size, cudaMemcpyDeviceToDevice, stream);
      cudaEventRecord(t0, stream);
      for (std::size_t i = 0; i < iters; ++i)
        cudaMemcpyAsync(dst.data(), src.data(), size, cudaMemcpyDeviceToDevice, stream);
      cudaEventRecord(t1, stream);
      if (cudaEventSynchronize(t1) != cudaSuccess) die("baseline copy failed");
      float ms = 0;
      cudaEventElapsedTime(&ms, t0, t1);
      baseline_gbps.push_back(bytes / (ms / 1e3) / 1e9);
      ratios.push_back(fabrix_gbps.back() / baseline_gbps.back());

      // Raw CUDA IPC: the same copies into the peer's memory by a bare loop
      // on one stream, timed like fabrix (wall clock, to the last copy done).
      const auto raw_start = clk::now();
      for (std::size_t i = 0; i < iters; ++i) cudaMemcpyAsync(raw_dst, src.data(), size, cudaMemcpyDefault, stream);
      if (cudaStreamSynchronize(stream) != cudaSuccess) die("raw IPC copy failed");
      raw_gbps.push_back(bytes / std::chrono::duration<double>(clk::now() - raw_start).count() / 1e9);
      raw_ratios.push_back(fabrix_gbps.back() / raw_gbps.back());
    }
    const spread f = spread_of(fabrix_gbps);
    rows.push_back({size, iters, f, median(baseline_gbps), median(raw_gbps),
                    bytes / (f.median * 1e9) * 1e6 / static_cast<double>(iters), spread_of(ratios),
                    spread_of(raw_ratios)});
    const row& r = rows.back();
    std::printf(
        "%12zu B  x%5zu x%d  fabrix %8.2f GB/s [%.2f-%.2f] (%8.2f us/op)  cudaMemcpy D2D %8.2f GB/s  ratio %.3f "
        "[%.3f-%.3f]  raw IPC %8.2f GB/s  ratio %.3f [%.3f-%.3f]\n",
        size, iters, repetitions, f.median, f.min, f.max, r.fabrix_us, r.baseline_gbps, r.ratio.median, r.ratio.min,
        r.ratio.max, r.raw_gbps, r.raw_ratio.median, r.raw_ratio.min, r.raw_ratio.max);
  }

  cudaIpcCloseMemHandle(raw_dst);  // before done_imm lets the target free it

  // Correctness of what the sweep measured: a known pattern, checked by the target.
  std::vector<std::byte> host(check_bytes);
  for (std::size_t i = 0; i < check_bytes; ++i) host[i] = pattern(i);
  if (src.copy_from_host(0, host) != status::ok) die("copy_from_host");
  if (qp.write_with_imm(mr.slice(0, check_bytes), remote.slice(0, check_bytes), check_imm, 1) != status::ok)
    die("write_with_imm");
  wait_for(dom, [](const fabrix::completion& c) { return c.token == 1 && c.op == fabrix::opcode::write_with_imm; });
  auto verdicts = must(boot.allgather(std::vector<std::byte>(1, std::byte{1})), "allgather verdict");
  const bool verified = verdicts[1][0] == std::byte{1};
  if (qp.write_with_imm(mr.slice(0, 0), remote.slice(0, 0), done_imm, 2) != status::ok) die("write_with_imm");
  wait_for(dom, [](const fabrix::completion& c) { return c.token == 2; });

  std::FILE* f = std::fopen(out_path, "w");
  if (!f) die(std::string("cannot write ") + out_path);
  std::fprintf(f, "{\n  \"benchmark\": \"cuda_ipc write bandwidth, 2 processes, 1 GPU\",\n");
  std::fprintf(f,
               "  \"domain\": \"%s\",\n  \"window\": %zu,\n  \"repetitions\": %d,\n  \"figures\": \"medians\",\n"
               "  \"idle_poll_ns\": %.1f,\n  \"idle_poll_socket_reads\": %llu,\n  \"idle_polls\": %llu,\n"
               "  \"verified\": %s,\n  \"rows\": [\n",
               dom.describe().c_str(), opt.window, repetitions, idle.ns,
               static_cast<unsigned long long>(idle.socket_reads), static_cast<unsigned long long>(idle.polls),
               verified ? "true" : "false");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    std::fprintf(f,
                 "    {\"bytes\": %zu, \"iterations\": %zu, \"fabrix_gbps\": %.3f, \"fabrix_gbps_min\": %.3f, "
                 "\"fabrix_gbps_max\": %.3f, \"fabrix_us_per_op\": %.3f, \"cudamemcpy_d2d_gbps\": %.3f, "
                 "\"ratio\": %.4f, \"ratio_min\": %.4f, \"ratio_max\": %.4f, \"raw_ipc_gbps\": %.3f, "
                 "\"ratio_raw_ipc\": %.4f, \"ratio_raw_ipc_min\": %.4f, \"ratio_raw_ipc_max\": %.4f}%s\n",
                 r.bytes, r.iters, r.fabrix_gbps.median, r.fabrix_gbps.min, r.fabrix_gbps.max, r.fabrix_us,
                 r.baseline_gbps, r.ratio.median, r.ratio.min, r.ratio.max, r.raw_gbps, r.raw_ratio.median,
                 r.raw_ratio.min, r.raw_ratio.max, i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  std::fclose(f);
  return verified ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gpu_bench OUT.json [max_bytes] [window] [min_bytes]\n");
    return 2;
  }
  sweep_options opt;
  if (argc > 2) opt.max_bytes = std::strtoull(argv[2], nullptr, 0);
  if (argc > 3) opt.window = std::strtoull(argv[3], nullptr, 0);
  if (argc > 4) opt.min_bytes = std::strtoull(argv[4], nullptr, 0);
  if (opt.window == 0 || opt.min_bytes == 0 || opt.min_bytes > opt.max_bytes || opt.max_bytes < check_bytes) {
    std::fprintf(stderr, "gpu_bench: need window > 0 and 0 < min_bytes <= max_bytes, max_bytes >= 1 MiB\n");
    return 2;
  }
  const std::size_t max_bytes = opt.max_bytes;
  if (const std::string why = fabrix::cuda::unavailable_reason(); !why.empty()) {
    std::printf("gpu_bench: skipped: %s\n", why.c_str());
    return 77;
  }
  auto root = fabrix::bootstrap::listen(2, "127.0.0.1:0", "fabrix-gpu-bench");
  if (!root) die(root.error().describe());
  const std::string where = "127.0.0.1:" + std::to_string(root->port());
  std::fflush(stdout);
  const pid_t child = ::fork();
  if (child < 0) die("fork");
  if (child == 0) {
    auto boot = fabrix::bootstrap::create(1, 2, where, "fabrix-gpu-bench");
    if (!boot) die(boot.error().describe());
    std::_Exit(target(*boot, max_bytes));
  }
  auto boot = root->accept();
  if (!boot) die(boot.error().describe());
  const int rc = writer(*boot, opt, argv[1]);
  int st = 0;
  ::waitpid(child, &st, 0);
  return rc != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 ? 1 : 0;
}
