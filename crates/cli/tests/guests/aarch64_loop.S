// Known count: 1 + 2*1000 + 3 = 2004 instructions; exits with status 3.
    .globl _start
    .text
_start:
    mov x1, #1000
1:  subs x1, x1, #1
    b.ne 1b
    mov x0, #3
    mov x8, #93
    svc #0
