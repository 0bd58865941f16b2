// The ping-pong of hello_write with coroutines: each side writes a counter
// into the other's buffer with write_with_imm and awaits the reply.
//
//   FABRIX_SIZE=2 FABRIX_RANK=1 FABRIX_BOOTSTRAP=127.0.0.1:29501 ./coro_pingpong &
//   FABRIX_SIZE=2 FABRIX_RANK=0 FABRIX_BOOTSTRAP=127.0.0.1:29501 ./coro_pingpong
#include <fabrix/fabrix.hpp>
#include <fabrix/ucx.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

using ucx = fabrix::ucx::provider;

// Waits for the next notification from the peer, polling the domain.
// (Inbound notifications are completions without a token, so the task
// polls for them itself; its own writes are awaited directly.)
fabrix::completion next_notification(fabrix::domain<ucx>& dom) {
  fabrix::completion c[1];
  while (dom.poll(c) == 0 || c[0].op != fabrix::opcode::remote_write_imm) {
  }
  return c[0];
}

// `theirs`: the peer's buffer, imported once by `peer` (queue_pair::import),
// since every round writes into it.
fabrix::task<int> pingpong(fabrix::domain<ucx>& dom, fabrix::queue_pair<ucx>& peer, fabrix::memory_region<ucx>& mr,
                           const fabrix::remote_key& theirs, bool serve_first, int rounds) {
  std::uint64_t value = 0;
  for (int i = 0; i < rounds; ++i) {
    if (serve_first || i > 0) {
      const fabrix::completion in = next_notification(dom);
      std::memcpy(&value, mr.data(), sizeof value);
      if (in.imm != value) co_return 1;  // the data arrived before its notification
    }
    ++value;
    std::memcpy(mr.data() + 8, &value, sizeof value);
    const fabrix::completion out =
        co_await peer.write_with_imm(mr.slice(8, 8), theirs.slice(0, 8), static_cast<std::uint32_t>(value));
    if (out.status != fabrix::status::ok) co_return 1;
  }
  co_return 0;
}

int main() {
  auto boot = fabrix::bootstrap::from_env().value();
  auto dom = fabrix::ucx::domain::create().value();
  std::vector<std::byte> buf(16);
  auto mr = dom.register_memory(buf, fabrix::access::remote_write).value();
  auto qps = fabrix::connect_all(dom, boot).value();
  auto peers = fabrix::exchange(boot, mr.remote()).value();
  const int other = 1 - boot.rank();

  const auto theirs = qps[other].import(peers[other]).value();
  const int rc = fabrix::sync_wait(dom, pingpong(dom, qps[other], mr, theirs, boot.rank() == 1, 1000));
  if (boot.rank() == 0 && rc == 0) next_notification(dom);  // rank 1's last reply
  std::printf("rank %d: %s\n", boot.rank(), rc == 0 ? "1000 round trips, all in order" : "FAILED");
  return boot.barrier() && rc == 0 ? 0 : 1;
}
