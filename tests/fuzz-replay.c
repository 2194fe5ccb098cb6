/*
 * Replays a fuzz target over files and directories of files (a seed corpus), so that the
 * normal test run checks every input the fuzzers ever found interesting. Linked with each
 * target of tests/ (protocol, bridge); in -Dfuzzing builds libFuzzer's main takes its place.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Corpus files are small; anything bigger than a protocol frame is not a seed of ours. */
#define REPLAY_FILE_MAX (8u * 1024 * 1024)

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = malloc(REPLAY_FILE_MAX), *exact = NULL;
    size_t n = 0;
    int ret = -1;

    if (f && buf)
        n = fread(buf, 1, REPLAY_FILE_MAX, f);
    /* A copy of exactly n bytes, so that ASan catches reads past the input. */
    if (f && buf)
        exact = malloc(n ? n : 1);
    if (exact) {
        memcpy(exact, buf, n);
        LLVMFuzzerTestOneInput(exact, n);
        ret = 0;
    } else {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
    }
    if (f)
        fclose(f);
    free(buf);
    free(exact);
    return ret;
}

/* Replay every regular file in @dir, in name order; returns the number replayed or -1. */
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
        struct stat st;
        int n;

        if (stat(argv[i], &st) < 0) {
            fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        n = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : (replay_file(argv[i]) == 0 ? 1 : -1);
        if (n < 0)
            return 1;
        total += n;
    }
    printf("replayed %d inputs\n", total);
    return total > 0 ? 0 : 1;
}
