// An operation a static provider cannot do is a compile error with a
// readable message. static_caps.sh compiles this file twice: as is (must
// compile), and with -DCALL_FETCH_ADD (must fail with the static_assert).
#include "../unit/fake_provider.hpp"

struct no_atomics : fake::provider {
  static constexpr fabrix::capabilities caps{.atomics = false, .max_sge = 4};
};
static_assert(fabrix::provider<no_atomics>);

int main() {
  auto a = fabrix::domain<no_atomics>::create().value();
  auto qp = a.connect(a.address().value()).value();
  std::vector<std::byte> buf(16);
  auto mr = a.register_memory(buf, fabrix::access::all_remote).value();
#ifdef CALL_FETCH_ADD
  (void)qp.fetch_add(mr.slice(0, 8), mr.remote().slice(8, 8), 1, 1);
#endif
  return qp.write(mr.slice(0, 8), mr.remote().slice(8, 8), 1) == fabrix::status::ok ? 0 : 1;
}
