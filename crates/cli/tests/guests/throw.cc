// An exception leaves three frames early: ./throw
#include <cstdio>
#include <stdexcept>

volatile int sink;

__attribute__((noinline)) void deep(int depth) {
    if (depth == 0)
        throw std::runtime_error("out");
    deep(depth - 1);
    sink = depth;
}

int main() {
    try {
        deep(3);
    } catch (const std::exception &e) {
        std::printf("caught %s\n", e.what());
    }
    return 0;
}
