// What a skipped normal_ or uniform_ would have drawn from its CPU
// generator, and the advance that leaves the generator where the kernel
// would have left it: a layer made after the sync without reseeding, a
// dropout mask, a sampler's permutation then come out as without fsdpskip.
//
// The counts are torch's CPU kernels' (aten/src/ATen/native/cpu/
// DistributionTemplates.h, read in 1.13.1, 2.6.0 and 2.14.1): one 32-bit
// MT19937 output per value of a float, half or bfloat16 and two (random64)
// per double; a complex tensor is drawn as its real view.
//   uniform_: every value once.
//   normal_ on a contiguous tensor of at least 16 values (normal_fill):
//     every value once, and the last 16 again when 16 does not divide the
//     size; half and bfloat16 from 2.14 on (blocks of 16 in float): the
//     values of whole blocks once, then the last 16.
// Which rule the running torch follows is not taken on trust: the first
// count runs its kernels on a few sizes per dtype on a scratch generator and
// keeps, per kernel and dtype, the rule whose advance matched every size; a
// kernel no rule matches (or that refused) is never skipped, nor is a call
// counted on another thread while the probe runs.
// normal_ on anything else takes a scalar Box-Muller path that caches its
// second sample in the generator, a value only the draws themselves give:
// such a call has no count and is never skipped (a tensor under 16
// values, a strided one). Neither is an init on another device: a CUDA
// kernel's Philox offset is not derived here, so the kernel runs.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/MT19937RNGEngine.h>

#include <cstdint>
#include <optional>

#include "../common/plugin_abi.h"
#include "compat.h"

namespace fsdpskip {

// The 32-bit outputs torch's CPU kernel draws for `kernel` (FSDPSKIP_NORMAL
// or FSDPSKIP_UNIFORM) on `self`, or nullopt where the count is not known.
std::optional<uint64_t> random_draws(fsdpskip_kernel kernel, const at::Tensor& self);

// True on a thread running the probe of torch's kernels (random_draws'
// first call): those calls are decided RUN without asking random_draws.
bool probing_random_kernels();

// Moves an MT19937 state's place (left_, next_) by `draws` outputs, and
// returns the regenerations of its words that those outputs also make:
// regenerate_times (mt19937_jump.h) makes them, in any order with the
// place's move.
uint64_t move_place(at::mt19937_data_pod& state, uint64_t draws);

// Advances an MT19937 state by `draws` outputs, as that many calls of
// at::mt19937's operator() would (without tempering what is thrown away).
void discard_draws(at::mt19937_data_pod& state, uint64_t draws);

// The generator a call with this argument draws from: the one passed, else
// the default CPU generator. Throws what torch's kernel would for another
// device's generator.
at::Generator cpu_generator(const compat::GeneratorArgument& argument);

// True when `generator` (a CPU generator) has drawn nothing since it was
// seeded: a torch.manual_seed since any earlier state.
bool freshly_seeded(const at::Generator& generator);

// Advances `generator` (a CPU generator) by `draws` outputs, under its lock.
void advance(const at::Generator& generator, uint64_t draws);

// Gives `cpu`'s engine `state`; the caller holds `cpu->mutex_`.
void set_engine_state(at::CPUGeneratorImpl* cpu, const at::mt19937_data_pod& state);

}  // namespace fsdpskip
