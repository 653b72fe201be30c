/* main.c - `whet`, the one binary: a table of subcommands and the dispatcher that picks one.
 *
 * Operators run `whet up` (everything on one machine) or the components one by one (`whet migrate`,
 * `whet gateway`, `whet scheduler`, `whet executor`); tenants and tests use the rest. Each
 * subcommand lives in its own cli/cmd_*.c file and calls into the component libraries. */
#include <stdio.h>
#include <string.h>

#include "commands.h"

static const struct whet_command commands[] = {
    {"version", cmd_version, "print the version"},
};

int cli_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
    }
    return 0;
}

int cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("whet %s\n", WHET_VERSION);
    return 0;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: whet COMMAND [ARGS...]\n\n"
            "whet is a self-hostable, multi-tenant fine-tuning service with an OpenAI-compatible API.\n\n"
            "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
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
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "whet: unknown command \"%s\"\nhint: run `whet --help` for the list of commands\n", argv[1]);
    return 2;
}
