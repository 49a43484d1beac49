/* Threads in waves: each wave starts 3 threads, joins them, so vCPU indexes are reused. */
#include <pthread.h>
#include <stdio.h>
static unsigned long sink[64];
static void *work(void *arg) {
    long id = (long)arg;
    unsigned long s = 0;
    for (unsigned i = 0; i < 200000u * (unsigned)(id % 5 + 1); i++)
        s += (i ^ (unsigned)id) % 13;
    sink[id] = s;
    return 0;
}
int main(void) {
    unsigned long total = 0;
    for (long wave = 0; wave < 6; wave++) {
        pthread_t t[3];
        for (long i = 0; i < 3; i++) pthread_create(&t[i], 0, work, (void *)(wave * 3 + i));
        for (long i = 0; i < 3; i++) pthread_join(t[i], 0);
    }
    for (int i = 0; i < 18; i++) total += sink[i];
    printf("%lu\n", total);
    return 0;
}
