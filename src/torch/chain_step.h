// A chain step: a structured kernel that rewrites a skipped storage in
// place with scalar operands (trunc_normal_'s erfinv_, mul_, add_, clamp_ up
// to torch 2.11: kernels.def's role STEP). Recorded after the calls whose
// values it reads, and replayed after them with its impl's own arguments,
// it makes the storage's values "this step of that recipe", bitwise,
// without running while loading.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/util/Optional.h>

#include "../common/plugin_abi.h"

namespace fsdpskip {

struct ChainStep {
  // mul_'s and add_'s one-element CPU operand, a copy (a Python number's
  // wrapped tensor stays one: type promotion tells them apart).
  at::Tensor scalar;
  bool scalar_first = false;  // mul_: its impl got scalar * rewritten (torch 1.13's mul_(Scalar))
  c10::optional<c10::Scalar> alpha, min, max;  // add_'s; clamp_'s (c10::optional: torch 1.13's clamp_out takes it)
};

// Why `kernel`'s call with `arguments` (operands: its impl's self, then the
// others), writing `out`, cannot join out's recipe, or nullptr when it can.
// Deciding (`step` nullptr): it does not rewrite out in place with scalar
// operands, or its kernel raises for out's dtype when it runs (erfinv_ on
// half in torch 1.13; tried on one element, so that such a call runs, and
// raises). Recording a call so decided (`step` given): only the first, and
// `step` is filled in.
const char* describe_step(fsdpskip_kernel kernel, const at::Tensor& out, const fsdpskip_call_arguments& arguments,
                          ChainStep* step);

// Rewrites `rewritten` as the step's impl did. Throws what torch throws.
void run_step(fsdpskip_kernel kernel, const ChainStep& step, const at::Tensor& rewritten);

}  // namespace fsdpskip
