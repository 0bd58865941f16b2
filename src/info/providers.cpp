// Providers: every one compiled into fabrix-info, best first, opened the
// way fabrix::open(name) opens it, with default options and the FABRIX_*
// environment. An opened one reports what it runs on and its capabilities
// and its GPU path with the reason for it (gpu_paths.cpp); one that cannot
// open reports why, which is most often the answer to "why is it not used
// here?".
#include "gpu_paths.hpp"
#include "sections.hpp"

#if FABRIX_HAVE_UCX
#include <fabrix/ucx.hpp>
#endif
#if FABRIX_HAVE_OFI
#include <fabrix/ofi.hpp>
#endif
#if FABRIX_HAVE_VERBS
#include <fabrix/verbs.hpp>
#if FABRIX_HAVE_CUDA
// The verbs provider's GPU memory backend (dma-buf, peer memory) and its
// probe at domain creation, so that the report says what a program built
// with fabrix-verbs and fabrix-cuda gets, not "no backend in this program".
#include <fabrix/verbs/cuda.hpp>
#endif
#endif
#if FABRIX_HAVE_CUDA_IPC
#include <fabrix/cuda_ipc.hpp>
#endif

#include <fabrix/any_provider.hpp>
#include <fabrix/fabrix.hpp>
#include <fabrix/plugins.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace fabrix::info {

namespace {

value capabilities_of(const capabilities& c) {
  value v = value::make_object();
  v.set("rma", c.rma)
      .set("write_with_imm", c.write_with_imm)
      .set("atomics", c.atomics)
      .set("send_recv", c.send_recv)
      .set("gpu_path", to_string(c.gpu))
      .set("max_sge", static_cast<std::int64_t>(c.max_sge))
      .set("needs_target_progress", c.needs_target_progress);
  return v;
}

value described(std::string_view name, result<any_domain>& d) {
  value v = value::make_object();
  v.set("name", name);
  if (!d)
    v.set("opens", false).set("why_not", d.error().describe());
  else
    v.set("opens", true)
        .set("describe", d->describe())
        .set("capabilities", capabilities_of(d->caps()))
        .set("device_pci", d->device_pci().value_or("none (no device on PCI, several, or not reported)"));
  v.set("gpu", gpu_path_of(name, d));
  return v;
}

// Every plugin on the plugin path (plugins.hpp): where it is, whether it
// loads and what its table says, and whether a compiled-in provider of the
// same name shadows it (then open(name) never loads it); one that is not
// shadowed is opened as open(name) opens it.
value plugins_of(const std::vector<std::string_view>& compiled_in) {
  value dirs = value::make_array();
  for (const auto& d : provider_plugin_path()) dirs.push(d);
  value found = value::make_array();
  for (const auto& f : find_provider_plugins()) {
    value v = value::make_object();
    v.set("name", f.name).set("path", f.path);
    const bool shadowed = std::find(compiled_in.begin(), compiled_in.end(), f.name) != compiled_in.end();
    if (shadowed) {
      v.set("used", "no: a compiled-in provider of this name wins over the plugin (it is not loaded)");
      found.push(std::move(v));
      continue;
    }
    auto p = load_provider_plugin(f.name);
    if (!p) {
      v.set("loads", false).set("why_not", p.error().describe());
      found.push(std::move(v));
      continue;
    }
    v.set("loads", true)
        .set("version", (*p)->version.empty() ? std::string("-") : (*p)->version)
        .set("abi_version", static_cast<std::int64_t>((*p)->abi_version))
        .set("priority", static_cast<std::int64_t>((*p)->priority))
        .set("wire_id", static_cast<std::int64_t>((*p)->wire_id));
    auto d = fabrix::open(f.name);
    if (!d)
      v.set("opens", false).set("why_not", d.error().describe());
    else
      v.set("opens", true).set("describe", d->describe()).set("capabilities", capabilities_of(d->caps()));
    found.push(std::move(v));
  }
  value s = value::make_object();
  s.set("path", std::move(dirs)).set("found", std::move(found));
  return s;
}

}  // namespace

value providers_section() {
  value list = value::make_array();
  for (std::string_view name : registered_providers()) {
    auto d = fabrix::open(name);
    list.push(described(name, d));
  }
  value plugins = plugins_of(registered_providers());
  // What fabrix::open("auto") opens here (any_provider.hpp: the routed
  // domain where FABRIX_ROUTE is set or two or more providers open for its
  // default routes, else the best provider that opens, a plugin included),
  // opened once more to ask it.
  auto best = fabrix::open("auto");
  const std::string pick = best ? best->describe() : std::string();
  value s = value::make_object();
  s.set("compiled_in", std::move(list))
      .set("plugins", std::move(plugins))
      .set("auto", pick.empty() ? value("none opens: every provider above says why not") : value(pick))
      .set("gpu_staged", gpu_staged_path());
  return s;
}

}  // namespace fabrix::info
