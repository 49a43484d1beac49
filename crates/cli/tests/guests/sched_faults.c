/* Two threads that compute, plus one thing a deterministic schedule cannot follow from the
   guest alone (argv[1]):
     timed    a condition wait with a timeout that expires
     blocked  a third thread blocked for good in read() on a pipe nobody writes
     fork     a fork while both threads run (the child exits at once)
     signal   a signal from another process (a child sends SIGUSR1) handled mid-run
   For bbv run --schedule deterministic: the run ends, and the summary says where the order
   stopped following the guest. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile double sink;
static volatile int handled;

static void work(long n) {
  double x = 1.0;
  for (long i = 0; i < n; i++) x = x * 1.0000001 + 0.5;
  sink += x;
}

static void *worker(void *arg) {
  (void)arg;
  work(20000000);
  return NULL;
}

static void *reader(void *arg) {
  char c;
  (void)!read(*(int *)arg, &c, 1);
  return NULL;
}

static void on_usr1(int s) {
  (void)s;
  handled = 1;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "timed";
  int fds[2];
  pid_t sender = -1;
  pthread_t t, r;
  if (strcmp(mode, "signal") == 0) {
    signal(SIGUSR1, on_usr1);
    pid_t parent = getpid();
    sender = fork();
    if (sender == 0) {
      usleep(100000);
      kill(parent, SIGUSR1);
      _exit(0);
    }
  }
  pthread_create(&t, NULL, worker, NULL);
  if (strcmp(mode, "timed") == 0) {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 20000000;
    if (until.tv_nsec >= 1000000000) {
      until.tv_sec += 1;
      until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&m);
    pthread_cond_timedwait(&c, &m, &until);
    pthread_mutex_unlock(&m);
  } else if (strcmp(mode, "blocked") == 0) {
    if (pipe(fds) != 0) return 3;
    pthread_create(&r, NULL, reader, &fds[0]);
  } else if (strcmp(mode, "fork") == 0) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
  }
  work(20000000);
  pthread_join(t, NULL);
  if (sender > 0) {
    while (!handled) work(1000000);
    waitpid(sender, NULL, 0);
  }
  printf("%s done\n", mode);
  /* The blocked reader never returns: the process ends it. */
  return 0;
}
