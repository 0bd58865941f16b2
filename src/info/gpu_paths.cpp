// Why each provider moves GPU memory the way it does here: registered by
// the provider itself (dma-buf or peer memory on verbs, FI_HMEM on
// libfabric, UCX's CUDA memory type, CUDA IPC), or not, and then the reason
// (no driver, a UCX or libfabric built without CUDA, an option that turned
// it off). Where a provider has no direct path, fabrix::cuda::staged<P>
// still carries GPU buffers through host memory (gpu_staged_path()).
#include "gpu_paths.hpp"

#if FABRIX_HAVE_UCX
#include <dlfcn.h>
#include <ucp/api/ucp.h>
#endif
#if FABRIX_HAVE_OFI
#include <fabrix/ofi/detail/setup.hpp>
#endif
#include <fabrix/detail/env.hpp>
#include <fabrix/fabrix.hpp>

#include "sysfs.hpp"

#include <string>

namespace fabrix::info {

namespace {

#if FABRIX_HAVE_UCX
// UCX lists a CUDA memory type only when its libuct_cuda module loaded;
// the modules sit in the "ucx" directory beside libucp.
std::string ucx_without_cuda() {
  Dl_info where{};
  if (::dladdr(reinterpret_cast<void*>(&ucp_init_version), &where) == 0 || where.dli_fname == nullptr)
    return "this UCX lists no CUDA memory type";
  std::string dir = where.dli_fname;
  dir = dir.substr(0, dir.rfind('/') + 1) + "ucx";
  for (const std::string& f : entries(dir))
    if (f.rfind("libuct_cuda", 0) == 0)
      return "this UCX lists no CUDA memory type although " + dir + "/" + f +
             " is there: the module did not load (no NVIDIA driver?)";
  return "this UCX lists no CUDA memory type: " + dir + " has no libuct_cuda (UCX built without CUDA)";
}
#endif

#if FABRIX_HAVE_OFI
// want_hmem() decides; set, FABRIX_OFI_HMEM says no only as "0".
std::string ofi_without_hmem() {
  if (!fabrix::ofi::detail::want_hmem())
    return fabrix::detail::env_text("FABRIX_OFI_HMEM") != nullptr
               ? "FI_HMEM not asked for: FABRIX_OFI_HMEM=0"
               : "FI_HMEM not asked for: libcuda.so.1 does not load (no NVIDIA driver); FABRIX_OFI_HMEM=1 asks anyway";
  return "asked for FI_HMEM, but no libfabric provider for this transport offers it (libfabric built without "
         "CUDA, or the provider has no HMEM support)";
}
#endif

// The verbs provider's describe() ends with ", GPU memory: <how>" and, for
// none, " (<why>)".
std::string verbs_gpu(const std::string& describe) {
  const std::string mark = ", GPU memory: ";
  const auto at = describe.rfind(mark);
  if (at == std::string::npos) return "not reported";
  const std::string rest = describe.substr(at + mark.size());
  if (rest.rfind("none (", 0) == 0 && rest.back() == ')') return rest.substr(6, rest.size() - 7);
  return "registers GPU memory with the NIC by " + rest;
}

std::string why(std::string_view provider, any_domain& d) {
  const bool direct = d.caps().gpu == gpu_path::direct;
  if (provider == "verbs") return verbs_gpu(d.describe());
  if (provider == "cuda_ipc") return "GPU memory shared by CUDA IPC handles between processes on one node";
#if FABRIX_HAVE_UCX
  if (provider == "ucx")
    return direct ? "this UCX registers CUDA memory (its CUDA memory type; cuda_copy, cuda_ipc, gdr_copy move it)"
                  : ucx_without_cuda();
#endif
#if FABRIX_HAVE_OFI
  if (provider == "ofi")
    return direct ? "the libfabric provider has FI_HMEM: CUDA memory is registered with FI_HMEM_CUDA"
                  : ofi_without_hmem();
#endif
  return direct ? "registers GPU memory itself" : "host memory only";
}

}  // namespace

value gpu_path_of(std::string_view provider, result<any_domain>& d) {
  value v = value::make_object();
  if (!d) return v.set("path", "none").set("why", "it does not open here (see why_not)");
  v.set("path", to_string(d->caps().gpu)).set("why", why(provider, *d));
  return v;
}

value gpu_staged_path() {
#if FABRIX_HAVE_CUDA
  return value(
      "fabrix::cuda::staged<P> (fabrix-cuda) carries GPU buffers through host bounce buffers over any provider "
      "(FABRIX_STAGING_*)");
#else
  return value(
      "none: fabrix-info was built without CUDA (fabrix-cuda's staged<P> carries GPU buffers through host "
      "memory where it is built)");
#endif
}

}  // namespace fabrix::info
