/* Known path: main -> loop(10): for.cond 11 times, for.body and for.inc 10 times. */
__attribute__((noinline)) int loop(int n) {
    int s = 0;
    for (int i = 0; i < n; i++)
        s += i;
    return s;
}

int main(void) {
    if (loop(10) != 45)
        return 1;
    return 0;
}
