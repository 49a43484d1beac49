/* Four threads with different amounts of work; prints a checksum. */
#include <pthread.h>
#include <stdio.h>
#include "bbv.h"

static unsigned long result[4];
static unsigned long counted[4];

static void *work(void *arg) {
    long id = (long)arg;
    unsigned long s = 0;
    for (unsigned i = 0; i < 10000u * (unsigned)(id + 1); i++)
        s += (i ^ (unsigned)id) % 13;
    result[id] = s;
    counted[id] = bbv_count();
    return 0;
}

int main(void) {
    pthread_t t[3];
    for (long i = 1; i < 4; i++)
        pthread_create(&t[i - 1], 0, work, (void *)i);
    work(0);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], 0);
    unsigned long sum = 0;
    for (int i = 0; i < 4; i++)
        sum += result[i];
    printf("checksum %lu\n", sum);
    for (int i = 0; i < 4; i++)
        fprintf(stderr, "worker %d counted %lu\n", i, counted[i]);
    return 0;
}
