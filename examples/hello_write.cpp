// Two processes: rank 0 writes a greeting into rank 1's buffer and notifies
// it with write_with_imm; rank 1 waits for the notification and prints.
//
//   FABRIX_SIZE=2 FABRIX_RANK=1 FABRIX_BOOTSTRAP=127.0.0.1:29500 ./hello_write &
//   FABRIX_SIZE=2 FABRIX_RANK=0 FABRIX_BOOTSTRAP=127.0.0.1:29500 ./hello_write
// (or under mpirun -np 2). Set UCX_TLS to choose UCX's transport.
#include <fabrix/fabrix.hpp>
#include <fabrix/ucx.hpp>

#include <cstdio>
#include <cstring>
#include <string_view>
#include <vector>

int main() {
  auto boot = fabrix::bootstrap::from_env();
  if (!boot) return std::fprintf(stderr, "bootstrap: %s\n", boot.error().describe().c_str()), 1;
  auto dom = fabrix::ucx::domain::create();
  if (!dom) return std::fprintf(stderr, "domain: %s\n", dom.error().describe().c_str()), 1;

  std::vector<std::byte> buf(4096);
  auto mr = dom->register_memory(buf, fabrix::access::remote_write).value();
  auto qps = fabrix::connect_all(*dom, *boot).value();        // qps[r] reaches rank r
  auto peers = fabrix::exchange(*boot, mr.remote()).value();  // peers[r]: rank r's buffer

  fabrix::completion done[4];
  if (boot->rank() == 0) {
    constexpr std::string_view hello = "hello from rank 0";
    std::memcpy(buf.data(), hello.data(), hello.size());
    auto s = qps[1].write_with_imm(mr.slice(0, hello.size()), peers[1].slice(0, hello.size()),
                                   /*imm=*/42, /*token=*/1);
    if (s != fabrix::status::ok) return std::fprintf(stderr, "post: %s\n", fabrix::to_string(s).data()), 1;
    while (dom->poll(done) == 0) {  // our write's completion: the buffer is ours again
    }
    if (done[0].status != fabrix::status::ok) return 1;
  } else {
    // The notification is delivered only after the data is in place.
    std::size_t n = 0;
    while ((n = dom->poll(done)) == 0) (void)dom->wait(std::chrono::milliseconds(100));
    if (done[0].op != fabrix::opcode::remote_write_imm) return 1;
    std::printf("rank 1 got imm %u: \"%.*s\"\n", done[0].imm, static_cast<int>(done[0].bytes),
                reinterpret_cast<const char*>(buf.data()));
  }
  return boot->barrier() ? 0 : 1;
}
