// The conformance suite's answers to the shared main() (support/suite_main.hpp).
#include "../support/suite_main.hpp"
#include "providers.hpp"

const char* fxt::suite::name() { return "conformance"; }
const char* fxt::suite::provider() { return fxt::provider_name; }
std::string fxt::suite::skip_reason() { return fxt::unavailable_reason(); }
