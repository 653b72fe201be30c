/* Picking the next token: greedy is the argmax, top-p keeps only the nucleus, draws follow the
 * softmax of logits / temperature, and the same seed gives the same draws. */
#include <math.h>

#include "rng.h"
#include "sampler.h"
#include "test.h"

#define V 6
static const float logits_ref[V] = {1.0f, 3.0f, 0.5f, 2.0f, -1.0f, 2.9f};

static int pick(float temperature, float top_p, struct rng *rng) {
    float l[V];
    int order[V];
    memcpy(l, logits_ref, sizeof l);
    return sample_pick(l, order, V, temperature, top_p, rng);
}

TEST(greedy_is_argmax) {
    struct rng rng;
    rng_seed(&rng, 1);
    CHECK(pick(0, 1, &rng) == 1);
    CHECK(pick(0, 0.1f, &rng) == 1);
}

TEST(top_p_keeps_the_nucleus) {
    /* softmax at T=1: p1 ~ 0.39, p5 ~ 0.35, p3 ~ 0.14, ... ; top_p 0.5 keeps {1, 5} */
    struct rng rng;
    rng_seed(&rng, 2);
    int counts[V] = {0};
    for (int i = 0; i < 4000; i++) counts[pick(1, 0.5f, &rng)]++;
    CHECK(counts[0] == 0 && counts[2] == 0 && counts[3] == 0 && counts[4] == 0);
    double p1 = exp(3.0), p5 = exp(2.9);
    CHECK_NEAR(counts[1] / 4000.0, p1 / (p1 + p5), 0.03);
    /* a tiny top_p leaves only the most likely token */
    for (int i = 0; i < 100; i++) CHECK(pick(1, 1e-3f, &rng) == 1);
}

TEST(draws_follow_the_tempered_softmax) {
    struct rng rng;
    rng_seed(&rng, 3);
    const float T = 2.0f;
    int counts[V] = {0}, n = 20000;
    for (int i = 0; i < n; i++) counts[pick(T, 1, &rng)]++;
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(logits_ref[i] / T);
    for (int i = 0; i < V; i++) CHECK_NEAR(counts[i] / (double)n, exp(logits_ref[i] / T) / z, 0.015);
}

TEST(same_seed_same_draws) {
    struct rng a, b, c;
    rng_seed(&a, 42);
    rng_seed(&b, 42);
    rng_seed(&c, 43);
    int same_ab = 1, same_ac = 1;
    for (int i = 0; i < 64; i++) {
        int x = pick(1.5f, 0.9f, &a), y = pick(1.5f, 0.9f, &b), z = pick(1.5f, 0.9f, &c);
        same_ab &= x == y;
        same_ac &= x == z;
    }
    CHECK(same_ab);
    CHECK(!same_ac);
}

int main(void) {
    RUN(greedy_is_argmax);
    RUN(top_p_keeps_the_nucleus);
    RUN(draws_follow_the_tempered_softmax);
    RUN(same_seed_same_draws);
    return test_summary();
}
