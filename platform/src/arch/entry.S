// Pinfold EL2 entry: the image's headers (arm64 Image header and PE/COFF
// header, so one file is started by QEMU -kernel, U-Boot booti and UEFI),
// relocation of the static PIE, BSS clearing (small: the heap and the boot
// stack are outside it), the EFI entry and its way out of firmware, and
// per-CPU stacks. Everything after this is Rust.

.equ STACK_SIZE, 0x10000
.equ R_AARCH64_RELATIVE, 1027

// The headers fill the first 4 KiB (the PE SizeOfHeaders); the linker script
// starts .text at 0x1000. The arm64 Image header (Linux's
// Documentation/arch/arm64/booting.rst) comes first: its code0 is also the
// DOS "MZ" signature and its last word (offset 0x3c) the DOS header's
// pointer to the PE header, as in Linux's head.S and efi-header.S. Fields
// that depend on the file's final length are zero here and patched by the
// xtask (tools/xtask/src/image.rs `assemble`): image_size, and in the PE
// header SizeOfInitializedData, SizeOfImage and .data's VirtualSize and
// SizeOfRawData (CheckSum stays 0, which EFI loaders accept).
.section .text.head, "ax"
.global _head
_head:
    .inst   0xfa405a4d                  // code0: "MZ"; ccmp x18, #0, #0xd, pl: a no-op
    b       primary_entry               // code1
    .quad   0                           // text_offset
    .quad   0                           // image_size: patched by the xtask to file + heap
    .quad   0xa                         // flags: LE, 4 KiB pages, may be placed anywhere
    .quad   0
    .quad   0
    .quad   0
    .ascii  "ARM\x64"                   // magic
    .long   pe_header - _head           // DOS e_lfanew: offset of the PE header

// PE/COFF (Microsoft PE format spec). No base relocations: the image is
// linked at 0 (ImageBase 0) and relocates itself, as it does under booti,
// and RELOCS_STRIPPED is clear, so the loader may place it anywhere.
pe_header:
    .ascii  "PE\0\0"
    .short  0xaa64                      // Machine: ARM64
    .short  2                           // NumberOfSections
    .long   0                           // TimeDateStamp
    .long   0                           // PointerToSymbolTable
    .long   0                           // NumberOfSymbols
    .short  section_table - optional_header // SizeOfOptionalHeader
    .short  0x0206                      // EXECUTABLE_IMAGE | LINE_NUMS_STRIPPED | DEBUG_STRIPPED
optional_header:
    .short  0x020b                      // PE32+
    .byte   0, 0                        // linker version
    .long   __pe_text_size              // SizeOfCode
    .long   0                           // SizeOfInitializedData: patched (.data's VirtualSize)
    .long   0                           // SizeOfUninitializedData
    .long   __pe_efi_entry_rva          // AddressOfEntryPoint: pinfold_efi_entry
    .long   __pe_text_rva               // BaseOfCode
    .quad   0                           // ImageBase
    .long   0x1000                      // SectionAlignment
    .long   0x1000                      // FileAlignment
    .short  0, 0                        // OS version
    .short  0, 0                        // image version
    .short  0, 0                        // subsystem version
    .long   0                           // Win32VersionValue
    .long   0                           // SizeOfImage: patched (= image_size)
    .long   0x1000                      // SizeOfHeaders
    .long   0                           // CheckSum
    .short  10                          // Subsystem: EFI application
    .short  0                           // DllCharacteristics
    .quad   0                           // SizeOfStackReserve
    .quad   0                           // SizeOfStackCommit
    .quad   0                           // SizeOfHeapReserve
    .quad   0                           // SizeOfHeapCommit
    .long   0                           // LoaderFlags
    .long   (section_table - data_directories) / 8 // NumberOfRvaAndSizes
data_directories:
    .quad   0                           // export
    .quad   0                           // import
    .quad   0                           // resource
    .quad   0                           // exception
    .quad   0                           // certificate (a signing tool fills it)
    .quad   0                           // base relocation: none
section_table:
    // .text: code, rodata, the RELA table; the loader copies it as is.
    .ascii  ".text\0\0\0"
    .long   __pe_text_size              // VirtualSize
    .long   __pe_text_rva               // VirtualAddress
    .long   __pe_text_size              // SizeOfRawData
    .long   __pe_text_rva               // PointerToRawData (file offset = RVA)
    .long   0                           // PointerToRelocations
    .long   0                           // PointerToLinenumbers
    .short  0                           // NumberOfRelocations
    .short  0                           // NumberOfLinenumbers
    .long   0x60000020                  // CODE | MEM_EXECUTE | MEM_READ
    // .data: data, boot stack, BSS and the appended payload (the rest of
    // the file), then the EL2 heap, which the loader zero-fills: the same
    // memory image_size claims under booti.
    .ascii  ".data\0\0\0"
    .long   0                           // VirtualSize: patched (image_size - RVA)
    .long   __pe_data_rva               // VirtualAddress
    .long   0                           // SizeOfRawData: patched (file length - RVA)
    .long   __pe_data_rva               // PointerToRawData
    .long   0
    .long   0
    .short  0
    .short  0
    .long   0xc0000040                  // INITIALIZED_DATA | MEM_READ | MEM_WRITE
.global __pe_header_end
__pe_header_end:

.section .text, "ax"
primary_entry:
    msr     daifset, #0xf
    mov     x19, x0                     // host DTB
    mrs     x1, CurrentEL
    cmp     x1, #(2 << 2)
    b.ne    not_el2
    bl      relocate_and_clear_bss
    adrp    x1, __boot_stack
    add     x1, x1, :lo12:__boot_stack
    mov     x2, #STACK_SIZE
    add     sp, x1, x2
    mov     x0, x19
    bl      pinfold_primary_main
    b       halt

// Apply R_AARCH64_RELATIVE relocations, *(base + offset) = base + addend
// (idempotent: the value comes from the addend alone), then clear BSS.
// Needs no stack; clobbers x9-x15.
relocate_and_clear_bss:
    adr     x15, _head
    adrp    x9, __rela_start
    add     x9, x9, :lo12:__rela_start
    adrp    x10, __rela_end
    add     x10, x10, :lo12:__rela_end
1:  cmp     x9, x10
    b.hs    2f
    ldp     x11, x12, [x9], #16
    ldr     x13, [x9], #8
    cmp     w12, #R_AARCH64_RELATIVE
    b.ne    1b
    add     x13, x13, x15
    str     x13, [x15, x11]
    b       1b
2:
    adrp    x9, __bss_start
    add     x9, x9, :lo12:__bss_start
    adrp    x10, __bss_end
    add     x10, x10, :lo12:__bss_end
    // 64 bytes per pass: link.ld aligns both ends to 64.
3:  cmp     x9, x10
    b.hs    4f
    stp     xzr, xzr, [x9]
    stp     xzr, xzr, [x9, #16]
    stp     xzr, xzr, [x9, #32]
    stp     xzr, xzr, [x9, #48]
    add     x9, x9, #64
    b       3b
4:  ret

// The PE entry point (AddressOfEntryPoint): UEFI calls it as a function,
// x0 = image handle, x1 = system table, on firmware's stack with the MMU
// and caches on (identity mapped). pinfold_efi_main returns only to give
// firmware an error status; otherwise it leaves through
// pinfold_efi_leave_firmware. The UEFI specification makes x18 (the
// platform register) "do not use" for EFI code, and our Rust code is
// compiled for a target that uses it freely, so its value is saved here
// and given back with the error status (edk2 itself never uses it, so
// calls into boot services are unaffected).
.global pinfold_efi_entry
pinfold_efi_entry:
    stp     x29, x30, [sp, #-48]!
    mov     x29, sp
    stp     x19, x20, [sp, #16]
    str     x18, [sp, #32]
    mov     x19, x0
    mov     x20, x1
    bl      relocate_and_clear_bss
    mov     x0, x19
    mov     x1, x20
    bl      pinfold_efi_main
    ldr     x18, [sp, #32]
    ldp     x19, x20, [sp, #16]
    ldp     x29, x30, [sp], #48
    ret

// After ExitBootServices: x0 = the boot handoff (passed on in x0), x1/x2 =
// start and length of the image's memory (headers to heap end). Cleans and
// invalidates the image to the point of coherency, turns off firmware's
// EL2 MMU and caches (SCTLR_EL2.M, C, I), drops its TLB entries and the
// instruction cache, invalidates the image again (lines speculatively
// refilled before the MMU went off must not hit once ours is on), and
// continues on the boot stack in the image, as primary_entry does:
// firmware's stack is boot-services memory, free RAM from now on. The
// caller cleaned everything else it hands over (bundle, DTB, ACPI).
.global pinfold_efi_leave_firmware
pinfold_efi_leave_firmware:
    msr     daifset, #0xf
    mov     x19, x0
    mrs     x9, ctr_el0
    ubfx    x9, x9, #16, #4
    mov     x10, #4
    lsl     x10, x10, x9                // D-cache line size
    sub     x11, x10, #1
    bic     x12, x1, x11                // first line
    add     x13, x1, x2                 // end
5:  cmp     x12, x13
    b.hs    6f
    dc      civac, x12
    add     x12, x12, x10
    b       5b
6:  dsb     sy
    mrs     x9, sctlr_el2
    bic     x9, x9, #(1 << 0)           // M
    bic     x9, x9, #(1 << 2)           // C
    bic     x9, x9, #(1 << 12)          // I
    msr     sctlr_el2, x9
    isb
    tlbi    alle2
    dsb     sy
    ic      iallu
    dsb     sy
    isb
    bic     x12, x1, x11
7:  cmp     x12, x13
    b.hs    8f
    dc      ivac, x12
    add     x12, x12, x10
    b       7b
8:  dsb     sy
    adrp    x9, __boot_stack
    add     x9, x9, :lo12:__boot_stack
    mov     x10, #STACK_SIZE
    add     sp, x9, x10
    mov     x29, xzr
    mov     x0, x19
    bl      pinfold_efi_resume
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
