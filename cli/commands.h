/* commands.h - every `whet` subcommand. Each takes the arguments after its name (argv[0] is the
 * subcommand's name), prints its own --help, and returns the process exit code:
 * 0 success, 1 failure at run time, 2 bad usage. */
#ifndef WHET_CLI_COMMANDS_H
#define WHET_CLI_COMMANDS_H

struct whet_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
};

/* Returns 1 when argv holds -h or --help (callers then print usage and return 0). */
int cli_wants_help(int argc, char **argv);

int cmd_version(int argc, char **argv);

#endif
