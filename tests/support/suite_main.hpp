// What the provider suites' shared main() (suite_main.cpp) asks of the suite
// it is linked into. Each suite defines these once (its suite_entry.cpp,
// compiled with its provider header), so that main() itself compiles once
// per build, not once per provider.
#pragma once

#include <string>

namespace fxt::suite {

const char* name();      // "conformance", "collectives": the first word of a skip line
const char* provider();  // the provider under test
// Why the provider cannot run on this machine (no GPU, no RDMA device);
// empty when it can. Non-empty: the whole run exits 77 (skipped).
std::string skip_reason();

}  // namespace fxt::suite
