// A multi-rank suite's answers to the shared main() (support/suite_main.hpp)
// and to the MPI runner (main_mpi.cpp): the conformance suite, and the
// collectives suite, whose case library is compiled with
// -DFX_SUITE_NAME="collectives". The provider is FX_PROVIDER_HEADER's.
#include "../support/suite_main.hpp"
#include "harness.hpp"

#include FX_PROVIDER_HEADER

#ifndef FX_SUITE_NAME
#define FX_SUITE_NAME "conformance"
#endif

const char* fxt::suite::name() { return FX_SUITE_NAME; }
const char* fxt::suite::provider() { return fxt::provider_name; }
std::string fxt::suite::skip_reason() { return fxt::unavailable_reason(); }
