#include "mt19937_jump.h"

#include <ATen/core/MT19937RNGEngine.h>

#include <cstring>
#include <memory>
#include <new>

namespace fsdpskip {
namespace {

#include "mt19937_jumps.inc"

constexpr int kShift = at::MERSENNE_STATE_M;  // 397
constexpr uint32_t kMatrixA = at::MATRIX_A, kUpperMask = at::UMASK, kLowerMask = at::LMASK;
static_assert(kMtWords == at::MERSENNE_STATE_N, "torch's MT19937 state size");
constexpr int kDegree = 19937;
// A jump sums the states 0 .. kDegree - 1 words ahead: the words up to
// kDegree - 1 + 624, whole regenerations of them.
constexpr int kSequenceWindows = (kDegree - 1 + kMtWords + kMtWords - 1) / kMtWords;

inline uint32_t twist(uint32_t upper, uint32_t lower) {
  uint32_t mixed = (upper & kUpperMask) | (lower & kLowerMask);
  return (mixed >> 1) ^ ((lower & 1u) ? kMatrixA : 0u);
}

// sum ^= the 624 words at `words`.
#if defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))
#endif
__attribute__((optimize("O3"))) void add_window(uint32_t* __restrict sum, const uint32_t* __restrict words) {
  for (int w = 0; w < kMtWords; ++w) sum[w] ^= words[w];
}

}  // namespace

// Each loop reads only words it has not written yet, or written 227 words
// earlier, so the compiler vectorises them.
#if defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))
#endif
__attribute__((optimize("O3"))) void regenerate(uint32_t* state) {
  int i = 0;
  for (; i < kMtWords - kShift; ++i) state[i] = state[i + kShift] ^ twist(state[i], state[i + 1]);
  for (; i < kMtWords - 1; ++i) state[i] = state[i + kShift - kMtWords] ^ twist(state[i], state[i + 1]);
  state[kMtWords - 1] = state[kShift - 1] ^ twist(state[kMtWords - 1], state[0]);
}

int first_jump_exponent() { return kFirstJump; }
int last_jump_exponent() { return kLastJump; }

// With g = t^D mod phi (phi MT19937's characteristic polynomial), the state
// D words ahead is the sum of the states i words ahead over g's terms t^i:
// each state (the first word's top bit and the 623 words after it) is a
// window of 624 consecutive words of the sequence. Where the sequence cannot be held, the
// regenerations are made one by one: the same state, slower.
void jump(uint32_t* state, int jump_exponent) {
  const uint64_t* polynomial = kJumps[jump_exponent - kFirstJump];
  std::unique_ptr<uint32_t[]> sequence(new (std::nothrow) uint32_t[kSequenceWindows * kMtWords]);
  if (!sequence) {
    for (uint64_t i = 0; i < uint64_t{1} << jump_exponent; ++i) regenerate(state);
    return;
  }
  std::memcpy(sequence.get(), state, sizeof(uint32_t) * kMtWords);
  for (int window = 1; window < kSequenceWindows; ++window) {
    uint32_t* words = sequence.get() + window * kMtWords;
    std::memcpy(words, words - kMtWords, sizeof(uint32_t) * kMtWords);
    regenerate(words);
  }
  uint32_t sum[kMtWords] = {};
  for (int word = 0; word < kJumpWords; ++word)
    for (uint64_t bits = polynomial[word]; bits != 0; bits &= bits - 1)
      add_window(sum, sequence.get() + 64 * word + __builtin_ctzll(bits));
  // The sum is exact but for the low 31 bits of its first word, which are
  // no part of the state (only its top bit goes into the words after it);
  // the engine outputs them, so they are recovered from the word they went
  // into: word 623 = word 396 ^ twist(the word before the first, the first).
  uint32_t twisted = sum[kMtWords - 1] ^ sum[kShift - 1];
  uint32_t lowest = twisted >> 31;  // MATRIX_A's top bit: set where the first word's bit 0 was
  uint32_t shifted = twisted ^ (lowest ? kMatrixA : 0u);
  sum[0] = (sum[0] & kUpperMask) | ((shifted << 1) & kLowerMask) | lowest;
  std::memcpy(state, sum, sizeof sum);
}

void regenerate_times(uint32_t* state, uint64_t regenerations) {
  for (uint64_t i = 0, low = regenerations & ((uint64_t{1} << kFirstJump) - 1); i < low; ++i) regenerate(state);
  for (int exponent = kFirstJump; exponent < 64; ++exponent) {
    if (!(regenerations >> exponent & 1)) continue;
    // Past the table (2^36 regenerations: 43 trillion outputs), its last row as often as it takes.
    int row = exponent <= kLastJump ? exponent : kLastJump;
    for (uint64_t i = 0; i < uint64_t{1} << (exponent - row); ++i) jump(state, row);
  }
}

}  // namespace fsdpskip
