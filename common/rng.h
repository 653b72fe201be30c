/* rng.h - the seeded random number generator of the training engine (xoshiro256**, seeded through
 * splitmix64).
 *
 * Everything random in training (LoRA initialisation, random model weights for `whet model init`,
 * data shuffling, sampling) draws from a `struct rng` that the caller owns. The state is four plain
 * 64-bit words, so a trainer checkpoint stores it as-is and a resumed run continues the same stream.
 * The same seed gives the same numbers on every machine (no libc rand, no float-dependent state). */
#ifndef WHET_RNG_H
#define WHET_RNG_H

#include <stdint.h>

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
