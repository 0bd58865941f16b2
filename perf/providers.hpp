// The providers compiled into fabrix-perf. Including a provider's header
// registers it with fabrix::open(); perf/meson.build defines FABRIX_HAVE_<NAME>
// for every provider dependency the build found, so providers merged later
// join without changes here beyond their line.
#pragma once

#if defined(FABRIX_HAVE_UCX) && FABRIX_HAVE_UCX
#include <fabrix/ucx.hpp>
#endif
#if defined(FABRIX_HAVE_OFI) && FABRIX_HAVE_OFI && __has_include(<fabrix/ofi.hpp>)
#include <fabrix/ofi.hpp>
#endif
#if defined(FABRIX_HAVE_VERBS) && FABRIX_HAVE_VERBS && __has_include(<fabrix/verbs.hpp>)
#include <fabrix/verbs.hpp>
#endif
#if defined(FABRIX_HAVE_CUDA_IPC) && FABRIX_HAVE_CUDA_IPC && __has_include(<fabrix/cuda_ipc.hpp>)
#include <fabrix/cuda_ipc.hpp>
#endif
#include <fabrix/routed.hpp>  // over whichever of the above FABRIX_ROUTE names
