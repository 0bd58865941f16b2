// fabrix-perf's static binding for the routed domain (bindings.hpp):
// fabrix::routed<Ps...> over the providers compiled into this fabrix-perf
// (providers.hpp's with_<name> lists), each provider domain held by its type, whose route
// --transport (or FABRIX_ROUTE) names, e.g. "node=ucx:tcp". Against the
// same provider run directly it measures what routing costs per operation;
// --dispatch any runs routed<> (the providers behind any_provider, as
// open("routed") opens it) behind any_provider.
#include "bindings.hpp"
#include "providers.hpp"
#include "run.hpp"

#include <tuple>
#include <utility>

namespace fabrix::perf {

namespace {

template <class Tuple>
struct routed_over;
template <class... Ps>
struct routed_over<std::tuple<Ps...>> {
  using type = fabrix::routed<Ps...>;
};
// Best first, as the registry's priorities: the default net route is the
// first of these that opens.
using compiled = decltype(std::tuple_cat(std::declval<with_verbs>(), std::declval<with_ucx>(), std::declval<with_ofi>(),
                                         std::declval<with_cuda_ipc>()));

}  // namespace

std::optional<int> open_and_run_routed(side& sd, const domain_options& dopts, bool may_skip, std::string& why) {
  return open_and_run<routed_over<compiled>::type>(sd, dopts, may_skip, why);
}

}  // namespace fabrix::perf
