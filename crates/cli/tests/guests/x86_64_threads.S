# Four threads with known counts, no libc. The main thread (1) starts threads 2, 3 and 4 with
# loops of 3000, 2000 and 1000 iterations, runs 500 iterations itself and exits its own thread;
# the process ends when the last thread exits.
#   main:   2 + 3*14 + 1 + 2*500 + 3 = 1048
#   child:  2 + 1 + 2*N + 3          = 2N + 6  (6006, 4006, 2006)
    .globl _start
    .text
_start:
    mov $3, %r15d
    lea stacks_end(%rip), %r14
spawn:
    mov %r15d, %r12d
    imul $1000, %r12d, %r12d
    mov $56, %eax               # clone(VM|FS|FILES|SIGHAND|THREAD|SYSVSEM, stack)
    mov $0x50f00, %edi
    mov %r14, %rsi
    xor %edx, %edx
    xor %r10d, %r10d
    xor %r8d, %r8d
    syscall
    test %eax, %eax
    jz child
    sub $4096, %r14
    dec %r15d
    jnz spawn
    mov $500, %ecx
1:  dec %ecx
    jnz 1b
    mov $60, %eax               # exit: this thread only
    xor %edi, %edi
    syscall
child:
    mov %r12d, %ecx
2:  dec %ecx
    jnz 2b
    mov $60, %eax
    xor %edi, %edi
    syscall
    .bss
    .align 64
stacks: .skip 16384
stacks_end:
