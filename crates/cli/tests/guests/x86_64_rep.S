# Known count: 1 + 2*1000 + 12 = 2013 instructions; exits with status 3.
# Each rep string instruction counts once, whatever its iteration count.
    .globl _start
    .text
_start:
    mov $1000, %ecx
1:  dec %ecx
    jnz 1b
    lea src(%rip), %rsi
    lea dst(%rip), %rdi
    mov $100, %ecx
    rep movsb               # 100 iterations, one instruction
    xor %ecx, %ecx
    rep stosq               # no iteration, one instruction
    mov $7, %ecx
    jmp 2f                  # enter a rep through a jump: its own block
2:  rep stosb               # 7 iterations, one instruction
    mov $60, %eax
    mov $3, %edi
    syscall
    .bss
src: .skip 128
dst: .skip 128
