// detail::validate's two halves agree: common_shape_ok (the quick check
// most operations stop at) passes an operation only where validate_all
// would, over a grid of operations built by changing one or two fields of
// a valid write or read at a time.
#include <doctest/doctest.h>

#include <fabrix/detail/validate.hpp>

#include <array>
#include <cstdint>
#include <span>

using fabrix::access;
using fabrix::local_slice;
using fabrix::op_options;
using fabrix::opcode;
using fabrix::operation;
using fabrix::provider_id;
using fabrix::remote_key;
using fabrix::status;
using fabrix::detail::post_rules;

namespace {

constexpr std::uint64_t owner = 0x1234;
constexpr std::uint64_t importer = 77;

// Each way to spoil (or vary) one field of a valid operation.
using change = void (*)(operation&, local_slice&, remote_key&);
const std::array<change, 25> changes = {
    [](operation&, local_slice&, remote_key&) {},
    [](operation& o, local_slice&, remote_key&) { o.code = opcode::read; },
    [](operation& o, local_slice&, remote_key&) { o.code = opcode::fetch_add; },
    [](operation& o, local_slice&, remote_key&) { o.code = opcode::send; },
    [](operation& o, local_slice&, remote_key&) { o.code = opcode::recv; },
    [](operation& o, local_slice&, remote_key&) { o.code = opcode::flush; },
    [](operation& o, local_slice&, remote_key&) { o.code = static_cast<opcode>(200); },
    [](operation& o, local_slice&, remote_key&) { o.options = op_options::unsignaled; },
    [](operation& o, local_slice&, remote_key&) { o.options = op_options::delivered | op_options::unsignaled; },
    [](operation& o, local_slice&, remote_key&) { o.options = op_options::fence; },
    [](operation& o, local_slice&, remote_key&) { o.options = static_cast<op_options>(64); },
    [](operation& o, local_slice&, remote_key&) { o.flags = fabrix::detail::flag_awaited; },
    [](operation&, local_slice& l, remote_key&) { l.owner = 0; },  // slice() refused its range
    [](operation&, local_slice& l, remote_key&) { l.owner = owner + 1; },
    [](operation&, local_slice& l, remote_key&) { l.length = 7; },
    [](operation&, local_slice&, remote_key& k) { k.importer = importer + 1; },
    [](operation&, local_slice&, remote_key& k) { k.provider = provider_id::verbs; },
    [](operation&, local_slice&, remote_key& k) { k.rights = access::remote_read; },
    [](operation&, local_slice&, remote_key& k) { k.rights = access::remote_write; },
    [](operation&, local_slice&, remote_key& k) { k.length = 15; },
    [](operation& o, local_slice&, remote_key&) { o.remote.offset = 4090; },
    [](operation& o, local_slice&, remote_key&) { o.remote.offset = ~std::uint64_t{0} - 2; },
    [](operation& o, local_slice&, remote_key&) { o.remote.key = nullptr; },
    [](operation& o, local_slice&, remote_key&) { o.gather = std::span<const local_slice>(&o.local, 1); },
    [](operation& o, local_slice&, remote_key&) { o.remote.length = 0; },
};

}  // namespace

TEST_CASE("validate: the quick check passes only what the full check passes, and passes the common shapes") {
  fabrix::capabilities full_caps;
  fabrix::capabilities no_rma;
  no_rma.rma = false;
  fabrix::capabilities no_sge;
  no_sge.max_sge = 0;
  fabrix::capabilities no_messages;
  no_messages.send_recv = false;
  int common = 0;
  for (const auto& caps : {full_caps, no_rma, no_sge, no_messages}) {
    const post_rules rules(provider_id::ucx, owner, importer, caps);
    for (const change& first : changes) {
      for (const change& second : changes) {
        std::array<std::byte, 16> bytes{};
        local_slice l{bytes.data(), 8, nullptr, owner, {}};
        remote_key k;
        k.provider = provider_id::ucx;
        k.rights = access::remote_read | access::remote_write;
        k.address = 0x10000;
        k.length = 4096;
        k.importer = importer;
        k.ref = {0, 1};
        operation o = fabrix::op::write(l, k.slice(64, 8), 1);
        first(o, l, k);
        second(o, l, k);
        o.local = l;
        if (!o.gather.empty()) o.gather = std::span<const local_slice>(&l, 1);
        const bool quick = fabrix::detail::common_shape_ok(o, rules);
        const status all = fabrix::detail::validate_all(o, rules);
        if (quick) {
          CHECK(all == status::ok);
          ++common;
        }
        CHECK(fabrix::detail::validate(o, rules) == all);
      }
    }
  }
  // The untouched write, the read, and their unsignaled / delivered forms,
  // under the full capabilities, take the quick path.
  CHECK(common >= 6);

  // So do a plain send and recv, and an unsignaled send; not an unsignaled
  // recv (refused), nor a message where the provider has none.
  const post_rules rules(provider_id::ucx, owner, importer, full_caps);
  std::array<std::byte, 16> bytes{};
  const local_slice l{bytes.data(), 8, nullptr, owner, {}};
  CHECK(fabrix::detail::common_shape_ok(fabrix::op::send(l, 1), rules));
  CHECK(fabrix::detail::common_shape_ok(fabrix::op::recv(l, 1), rules));
  CHECK(fabrix::detail::common_shape_ok(fabrix::op::send(l, 1, op_options::unsignaled), rules));
  operation unsignaled_recv = fabrix::op::recv(l, 1);
  unsignaled_recv.options = op_options::unsignaled;
  CHECK_FALSE(fabrix::detail::common_shape_ok(unsignaled_recv, rules));
  CHECK(fabrix::detail::validate(unsignaled_recv, rules) == status::invalid_argument);
  const post_rules silent(provider_id::ucx, owner, importer, no_messages);
  CHECK_FALSE(fabrix::detail::common_shape_ok(fabrix::op::send(l, 1), silent));
  CHECK(fabrix::detail::validate(fabrix::op::send(l, 1), silent) == status::unsupported);
}
