/* rng.h - the one seeded random number generator of whet: xoshiro256** seeded through splitmix64,
 * plus the two small mixers some callers draw from directly.
 *
 * Everything random that must repeat (LoRA initialisation, random model weights for `whet model init`,
 * data shuffling, sampling, the simulator's synthetic clusters) draws from a `struct rng` the caller
 * owns. The state is four plain 64-bit words, so a trainer checkpoint stores it as-is and a resumed run
 * continues the same stream. The same seed gives the same numbers on every machine (no libc rand, no
 * float-dependent state); tests/unit/common pins the sequences, since changing any of them changes
 * training results.
 *
 * The mixers are header-only so pure code (and hot loops) can use them without a call:
 * - rng_splitmix64(&state): Vigna's splitmix64 stream (state advances by the golden-ratio constant);
 *   what shuffles SFT epochs and draws gateway request ids.
 * - rng_mix64(z): splitmix64's finaliser alone, a well-mixed hash of one word.
 * - rng_stream(seed, k): the k-th seed derived from one (the (k+1)-th output of its splitmix64 stream):
 *   GRPO's per-epoch and per-step seeds, a rollout's per-slot and a served request's per-choice seeds.
 * - rng_xorshift64(&x): Marsaglia's xorshift64 (13, 7, 17), cheaper and weaker; state must not be 0.
 * - rng_counter_uniform(seed, counter): a uniform draw that is a pure function of its two arguments
 *   (a counter-based generator), so a device kernel draws the same number as the CPU for a row of a
 *   batch without sharing a stream; what sampling draws from. */
#ifndef WHET_RNG_H
#define WHET_RNG_H

#include <stdint.h>

#define RNG_GOLDEN 0x9e3779b97f4a7c15ull /* 2^64 / golden ratio: splitmix64's increment */

static inline uint64_t rng_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rng_splitmix64(uint64_t *state) { return rng_mix64(*state += RNG_GOLDEN); }

static inline uint64_t rng_xorshift64(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static inline uint64_t rng_stream(uint64_t seed, uint64_t k) { return rng_mix64(seed + RNG_GOLDEN * (k + 1)); }

/* Uniform in [0, 1) with 53 random bits: rng_stream(seed, counter)'s top bits. */
static inline double rng_counter_uniform(uint64_t seed, uint64_t counter) {
    return (double)(rng_stream(seed, counter) >> 11) * 0x1.0p-53;
}

struct rng {
    uint64_t s[4];
};

/* Seeds the generator; every seed (0 included) gives a distinct, well-mixed state. */
void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_u64(struct rng *r);
/* Uniform in [0, 1) with 24 random bits (exactly representable as a float). */
float rng_uniform(struct rng *r);
/* Uniform in [lo, hi). */
float rng_uniform_range(struct rng *r, float lo, float hi);
/* Standard normal (Box-Muller, computed in double). */
float rng_normal(struct rng *r);
/* Uniform integer in [0, n) without modulo bias; n > 0. */
uint64_t rng_below(struct rng *r, uint64_t n);

#endif
