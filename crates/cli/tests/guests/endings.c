/* Ways a guest ends: ./endings MODE. Prints to stdout and stderr, echoes stdin when asked. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile unsigned long sink;

static void work(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) sink += i;
}

static void *thread_exit(void *arg) {
    (void)arg;
    work(200000);
    _exit(7);
}

static void *thread_work(void *arg) {
    (void)arg;
    work(300000);
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ok";
    printf("out:%s\n", mode);
    fprintf(stderr, "err:%s\n", mode);
    fflush(stdout);
    work(500000);
    if (!strcmp(mode, "echo")) {
        char buf[256];
        while (fgets(buf, sizeof buf, stdin)) fputs(buf, stdout);
        return 0;
    }
    if (!strcmp(mode, "abort")) abort();
    if (!strcmp(mode, "term")) raise(SIGTERM);
    if (!strcmp(mode, "closed")) { close(2); return 4; }
    if (!strcmp(mode, "thread-exit")) {
        pthread_t t;
        pthread_create(&t, NULL, thread_exit, NULL);
        for (;;) work(1000);
    }
    if (!strcmp(mode, "threads")) {
        pthread_t t[3];
        for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, thread_work, NULL);
        for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
        return 5;
    }
    return 0;
}
