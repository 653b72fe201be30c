/* commands.h - how a `whet` subcommand plugs into the dispatcher.
 *
 * Each subcommand lives in its own cli/cmd_*.c file and registers itself with one line:
 *
 *     WHET_COMMAND("sim", cmd_sim, "replay a workload through the placement library");
 *
 * so adding a command never touches a shared table. The function takes the arguments after `whet`
 * (argv[0] is the subcommand's name), prints its own --help, and returns the process exit code:
 * 0 success, 1 failure at run time, 2 bad usage. */
#ifndef WHET_CLI_COMMANDS_H
#define WHET_CLI_COMMANDS_H

struct whet_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
    struct whet_command *next;
};

void whet_command_register(struct whet_command *cmd);
/* The registered command called `name`, or NULL (lets `whet up` start the components this build has). */
const struct whet_command *whet_command_find(const char *name);

#define WHET_COMMAND(cname, fn, csummary)                                                   \
    static struct whet_command whet_command_##fn = {cname, fn, csummary, 0};               \
    __attribute__((constructor)) static void whet_command_register_##fn(void) {            \
        whet_command_register(&whet_command_##fn);                                         \
    }

/* Returns 1 when argv holds -h or --help (callers then print usage and return 0). */
int cli_wants_help(int argc, char **argv);

#endif
