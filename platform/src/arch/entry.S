// Pinfold EL2 entry: the arm64 Image header, relocation of the static PIE,
// BSS clearing (small: the heap and the boot stack are outside it) and
// per-CPU stacks. Everything after this is Rust.

.equ STACK_SIZE, 0x10000
.equ R_AARCH64_RELATIVE, 1027

.section .text.head, "ax"
.global _head
_head:
    b       primary_entry               // code0
    .long   0                           // code1
    .quad   0                           // text_offset
    .quad   0                           // image_size: patched by the xtask to file + heap
    .quad   0xa                         // flags: LE, 4 KiB pages, may be placed anywhere
    .quad   0
    .quad   0
    .quad   0
    .ascii  "ARM\x64"                   // magic
    .long   0                           // no PE/COFF header (yet)

.section .text, "ax"
primary_entry:
    msr     daifset, #0xf
    mov     x19, x0                     // host DTB
    mrs     x1, CurrentEL
    cmp     x1, #(2 << 2)
    b.ne    not_el2

    // Apply R_AARCH64_RELATIVE relocations: *(base + offset) = base + addend.
    adr     x20, _head
    adrp    x1, __rela_start
    add     x1, x1, :lo12:__rela_start
    adrp    x2, __rela_end
    add     x2, x2, :lo12:__rela_end
1:  cmp     x1, x2
    b.hs    2f
    ldp     x3, x4, [x1], #16
    ldr     x5, [x1], #8
    cmp     w4, #R_AARCH64_RELATIVE
    b.ne    1b
    add     x5, x5, x20
    str     x5, [x20, x3]
    b       1b
2:
    adrp    x1, __bss_start
    add     x1, x1, :lo12:__bss_start
    adrp    x2, __bss_end
    add     x2, x2, :lo12:__bss_end
3:  cmp     x1, x2
    b.hs    4f
    stp     xzr, xzr, [x1], #16
    b       3b
4:
    adrp    x1, __boot_stack
    add     x1, x1, :lo12:__boot_stack
    mov     x2, #STACK_SIZE
    add     sp, x1, x2
    mov     x0, x19
    bl      pinfold_primary_main
    b       halt

// Secondary CPUs arrive here from PSCI CPU_ON with x0 = the address of
// their boot record (stack_top, index) (arch::SecondaryBoot), with the
// MMU off: the boot CPU cleaned the record to the point of coherency.
.global pinfold_secondary_entry
pinfold_secondary_entry:
    msr     daifset, #0xf
    ldr     x1, [x0]
    mov     sp, x1
    ldr     x0, [x0, #8]
    bl      pinfold_secondary_main
    b       halt

not_el2:
halt:
    wfe
    b       halt

.section .stack.boot, "aw", %nobits
.balign 4096
.global __boot_stack
__boot_stack:
    .space STACK_SIZE
