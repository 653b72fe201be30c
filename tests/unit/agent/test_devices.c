/* The executor's devices (executor/agent/devices.c): --devices specs and their errors, the devices a
 * job takes (the lowest free ones; disjoint while there are enough; shared, and said so, when not),
 * and what a job on CUDA GPUs is handed: CUDA_VISIBLE_DEVICES and the /dev nodes of exactly those. */
#include <string.h>

#include "agent.h"
#include "test.h"

TEST(specs) {
    struct agent_device d[AGENT_MAX_DEVICES];
    struct whet_err err;
    CHECK(agent_parse_devices("cpu:3", d, AGENT_MAX_DEVICES, &err) == 3 && !strcmp(d[2].type, "cpu"));
    CHECK(agent_parse_devices("sim:H100:2:80", d, AGENT_MAX_DEVICES, &err) == 2);
    CHECK(!strcmp(d[1].type, "H100") && d[1].memory_mib == 80 * 1024);
    CHECK(agent_parse_devices("gpu:2", d, AGENT_MAX_DEVICES, &err) == -1);
    CHECK_CONTAINS(err.msg, "expected cuda, cpu:N or sim:TYPE:N[:GIB]");
    CHECK(agent_parse_devices("cpu:17", d, AGENT_MAX_DEVICES, &err) == -1);
    CHECK_CONTAINS(err.msg, "1 <= N <= 16");
    CHECK(agent_parse_devices("sim:H100:2:-1", d, AGENT_MAX_DEVICES, &err) == -1);
}

TEST(jobs_take_the_lowest_free_devices) {
    uint32_t busy = 0;
    int shared;
    uint32_t a = agent_take_devices(&busy, 8, 2, &shared);
    CHECK(a == 0x3 && !shared);
    uint32_t b = agent_take_devices(&busy, 8, 4, &shared);
    CHECK(b == 0x3c && !shared && busy == 0x3f);
    busy &= ~a; /* the first job ended */
    uint32_t c = agent_take_devices(&busy, 8, 3, &shared);
    CHECK(c == 0x43 && !shared);
    /* more than are free: the rest are the lowest busy ones, and it is said */
    uint32_t d = agent_take_devices(&busy, 8, 3, &shared);
    CHECK(d == (0x80 | 0x3) && shared && busy == 0xff);
}

TEST(a_gpu_job_sees_only_its_devices) {
    struct agent_cuda_grant g;
    agent_cuda_grant(&g, 0x5);
    CHECK_STR(g.visible, "CUDA_VISIBLE_DEVICES=0,2");
    const char *want[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia2", NULL};
    int same = 1;
    for (int i = 0; want[i] || g.nodes[i]; i++) same &= want[i] && g.nodes[i] && !strcmp(want[i], g.nodes[i]);
    CHECK(same);
    agent_cuda_grant(&g, 1u << 15);
    CHECK_STR(g.visible, "CUDA_VISIBLE_DEVICES=15");
    CHECK_STR(g.nodes[3], "nvidia15");
    CHECK(g.nodes[4] == NULL);
}

int main(void) {
    RUN(specs);
    RUN(jobs_take_the_lowest_free_devices);
    RUN(a_gpu_job_sees_only_its_devices);
    return test_summary();
}
