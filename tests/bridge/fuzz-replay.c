/*
 * Replays the fuzz target over every file of the seed corpus directories given as
 * arguments, so that each test run checks every input the fuzzer found interesting.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz-bridge.h"

/* Seeds are small programs; a bigger file is not one of ours. */
#define REPLAY_MAX (1u << 20)

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    uint8_t *buf = malloc(REPLAY_MAX);
    size_t n = buf ? fread(buf, 1, REPLAY_MAX, f) : 0;
    fclose(f);
    if (!buf)
        return -1;
    /* An exact-size copy, so that ASan sees any read past the input. */
    uint8_t *exact = malloc(n ? n : 1);
    if (exact) {
        memcpy(exact, buf, n);
        LLVMFuzzerTestOneInput(exact, n);
    }
    free(exact);
    free(buf);
    return exact ? 0 : -1;
}

static int replay_dir(const char *dir)
{
    struct dirent **list;
    int n = scandir(dir, &list, NULL, alphasort), done = 0;
    if (n < 0) {
        fprintf(stderr, "%s: %s\n", dir, strerror(errno));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, list[i]->d_name);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && replay_file(path) == 0)
            done++;
        free(list[i]);
    }
    free(list);
    return done;
}

int main(int argc, char **argv)
{
    int total = 0;
    for (int i = 1; i < argc; i++) {
        int n = replay_dir(argv[i]);
        if (n < 0)
            return 1;
        total += n;
    }
    printf("replayed %d inputs\n", total);
    return total > 0 ? 0 : 1;
}
