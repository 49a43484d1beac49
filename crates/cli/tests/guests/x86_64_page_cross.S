# Known count: 2 + 3*100 + 3 = 305 instructions. The loop's movabs (10 bytes) straddles a page
# boundary and is not first in its translated block: QEMU 7.2 lists a stale copy of it in the
# block it cut it from, which must not be counted.
    .globl _start
    .text
_start:
    mov $100, %ecx
    jmp 1f
    .p2align 12
    .fill 4090, 1, 0x90
1:  dec %ecx
    movabs $0x1122334455667788, %rax
    jnz 1b
    mov $60, %eax
    xor %edi, %edi
    syscall
