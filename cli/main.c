/* main.c - `whet`, the one binary, and the dispatcher that picks a subcommand.
 *
 * Operators run `whet up` (everything on one machine) or the components one by one (`whet migrate`,
 * `whet gateway`, `whet scheduler`, `whet executor`); tenants and tests use the rest. Subcommands
 * register themselves (commands.h); the list is kept sorted by name for --help. */
#include <stdio.h>
#include <string.h>

#include "commands.h"

static struct whet_command *commands;

void whet_command_register(struct whet_command *cmd) {
    struct whet_command **p = &commands;
    while (*p && strcmp((*p)->name, cmd->name) < 0) p = &(*p)->next;
    cmd->next = *p;
    *p = cmd;
}

const struct whet_command *whet_command_find(const char *name) {
    for (struct whet_command *c = commands; c; c = c->next)
        if (!strcmp(c->name, name)) return c;
    return NULL;
}

int cli_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
    }
    return 0;
}

static int cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("whet %s\n", WHET_VERSION);
    return 0;
}
WHET_COMMAND("version", cmd_version, "print the version")

static void usage(FILE *out) {
    fprintf(out,
            "usage: whet COMMAND [ARGS...]\n\n"
            "whet is a self-hostable, multi-tenant fine-tuning service with an OpenAI-compatible API.\n\n"
            "commands:\n");
    for (struct whet_command *c = commands; c; c = c->next) fprintf(out, "  %-10s %s\n", c->name, c->summary);
    fprintf(out, "\nRun `whet COMMAND --help` for a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) return cmd_version(0, NULL);
    const struct whet_command *c = whet_command_find(argv[1]);
    if (c) return c->run(argc - 1, argv + 1);
    fprintf(stderr, "whet: unknown command \"%s\"\nhint: run `whet --help` for the list of commands\n", argv[1]);
    return 2;
}
