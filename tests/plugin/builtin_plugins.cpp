// The other built-in providers built as plugins, one source compiled once per
// provider (builtins/meson.build, ofi/meson.build): FX_PLUGIN_<NAME> picks
// the umbrella header and the provider type. A built-in provider keeps its
// built-in number (ofi 3, verbs 2, cuda_ipc 4) as a plugin, so its remote
// buffers are those of the compiled-in provider of the same name.
#include <fabrix/plugin_export.hpp>

#if defined(FX_PLUGIN_OFI)
#include <fabrix/ofi.hpp>
FABRIX_EXPORT_PROVIDER(fabrix::ofi::provider, 40)
#elif defined(FX_PLUGIN_VERBS)
#include <fabrix/verbs.hpp>
FABRIX_EXPORT_PROVIDER(fabrix::verbs::provider, 60)
#elif defined(FX_PLUGIN_CUDA_IPC)
#include <fabrix/cuda_ipc.hpp>
FABRIX_EXPORT_PROVIDER(fabrix::cuda_ipc::provider, 70)
#else
#error "define FX_PLUGIN_OFI, FX_PLUGIN_VERBS or FX_PLUGIN_CUDA_IPC"
#endif
