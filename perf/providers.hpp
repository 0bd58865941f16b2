// The providers compiled into fabrix-perf. Including a provider's header
// registers it with fabrix::open(); perf/meson.build defines FABRIX_HAVE_<NAME>
// for every provider dependency the build found, so providers merged later
// join without changes here beyond their block. Each block also names the
// provider's type in a one-element tuple (empty where it is not compiled
// in), from which bind_routed.cpp builds routed<the providers compiled in>.
#pragma once

#include <tuple>

#if defined(FABRIX_HAVE_UCX) && FABRIX_HAVE_UCX
#include <fabrix/ucx.hpp>
namespace fabrix::perf {
using with_ucx = std::tuple<fabrix::ucx::provider>;
}
#else
namespace fabrix::perf {
using with_ucx = std::tuple<>;
}
#endif
#if defined(FABRIX_HAVE_OFI) && FABRIX_HAVE_OFI && __has_include(<fabrix/ofi.hpp>)
#include <fabrix/ofi.hpp>
namespace fabrix::perf {
using with_ofi = std::tuple<fabrix::ofi::provider>;
}
#else
namespace fabrix::perf {
using with_ofi = std::tuple<>;
}
#endif
#if defined(FABRIX_HAVE_VERBS) && FABRIX_HAVE_VERBS && __has_include(<fabrix/verbs.hpp>)
#include <fabrix/verbs.hpp>
namespace fabrix::perf {
using with_verbs = std::tuple<fabrix::verbs::provider>;
}
#else
namespace fabrix::perf {
using with_verbs = std::tuple<>;
}
#endif
#if defined(FABRIX_HAVE_CUDA_IPC) && FABRIX_HAVE_CUDA_IPC && __has_include(<fabrix/cuda_ipc.hpp>)
#include <fabrix/cuda_ipc.hpp>
namespace fabrix::perf {
using with_cuda_ipc = std::tuple<fabrix::cuda_ipc::provider>;
}
#else
namespace fabrix::perf {
using with_cuda_ipc = std::tuple<>;
}
#endif
#include <fabrix/routed.hpp>  // over whichever of the above FABRIX_ROUTE names
