# Known count: 1 + 2*1000 + 3 = 2004 instructions; exits with status 3.
    .globl _start
    .text
_start:
    li t0, 1000
1:  addi t0, t0, -1
    bnez t0, 1b
    li a0, 3
    li a7, 93
    ecall
