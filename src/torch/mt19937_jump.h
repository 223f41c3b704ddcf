// Moving an MT19937 state forward by whole regenerations of its 624 words:
// one by one for the low bits of the count, and by one jump polynomial
// (tools/mt19937-jumps) for each higher bit, so that a million
// regenerations cost about what a few thousand do.
#pragma once

#include <cstdint>

namespace fsdpskip {

constexpr int kMtWords = 624;  // at::MERSENNE_STATE_N (mt19937_jump.cc checks)

// MT19937's regeneration of all 624 words (what the engine does once every
// 624 outputs).
void regenerate(uint32_t* state);

// `state` (the engine's 624 words) as after `regenerations` regenerations.
void regenerate_times(uint32_t* state, uint64_t regenerations);

// The same by jump polynomials alone where the count allows (the tests'
// reference for both paths): `jump_exponent` k moves by 2^k regenerations.
void jump(uint32_t* state, int jump_exponent);
int first_jump_exponent();
int last_jump_exponent();

}  // namespace fsdpskip
